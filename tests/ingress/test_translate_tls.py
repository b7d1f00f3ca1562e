"""TLS: Secrets → certificates per SNI host, fallbacks, HTTPS redirects."""

from __future__ import annotations

import base64

import pytest

from platformd.ingress import render
from platformd.ingress.certificates import covers, load
from tests.ingress.test_translate_fixtures import (
    EC_CRT,
    EC_KEY,
    NOW,
    OTHER_EC_KEY,
    OTHER_RSA_KEY,
    RSA_KEY,
    ingress,
    path,
    reasons,
    routed,
    rule,
    server,
    tls_secret,
    translate,
    web,
)


def tls(secret: str | None = "tls", *hosts: str) -> dict:
    entry: dict = {"hosts": list(hosts)} if hosts else {}
    if secret is not None:
        entry["secretName"] = secret
    return entry


def garbage(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


SECRET_CASES = [
    # (description, secret (or None), now, expected reason or None)
    ("valid RSA", tls_secret(), NOW, None),
    ("valid EC", tls_secret(crt=EC_CRT, key=EC_KEY), NOW, None),
    ("missing", None, NOW, "SecretNotFound"),
    ("Opaque type", tls_secret(type_="Opaque"), NOW, "InvalidSecret"),
    ("not PEM", tls_secret(crt=garbage("hello"), key=RSA_KEY), NOW, "InvalidSecret"),
    ("not base64", tls_secret(crt="!!!", key=RSA_KEY), NOW, "InvalidSecret"),
    ("corrupt DER", tls_secret(crt=garbage("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")), NOW,
     "InvalidSecret"),
    ("no key", tls_secret(key=garbage("nothing")), NOW, "InvalidSecret"),
    ("RSA key of another cert", tls_secret(key=OTHER_RSA_KEY), NOW, "CertificateKeyMismatch"),
    ("EC key of another cert", tls_secret(crt=EC_CRT, key=OTHER_EC_KEY), NOW, "CertificateKeyMismatch"),
    ("EC key for an RSA cert", tls_secret(key=EC_KEY), NOW, "CertificateKeyMismatch"),
    ("expired", tls_secret(), 7258118400.0, "CertificateExpired"),  # year 2200
    ("not yet valid", tls_secret(), 0.0, "CertificateNotYetValid"),
]


@pytest.mark.parametrize("desc,secret,now,reason", SECRET_CASES, ids=[c[0] for c in SECRET_CASES])
def test_secret_checks(desc, secret, now, reason):
    loaded = load("default/tls", secret, now)
    assert (loaded.issue.reason if loaded.issue else None) == reason
    if reason is None:
        assert loaded.cert_pem.startswith("-----BEGIN CERTIFICATE-----")
        assert "PRIVATE KEY-----" in loaded.key_pem


@pytest.mark.parametrize("desc,secret,now,reason", [c for c in SECRET_CASES if c[3]], ids=[c[0] for c in SECRET_CASES if c[3]])
def test_bad_secret_falls_back_to_the_default_certificate(desc, secret, now, reason):
    objects = [ingress(rules=[rule("example.com", path("/"))], tls=[tls("tls", "example.com")]), web()]
    if secret is not None:
        objects.append(secret)
    result = translate(*objects, now=now)
    assert reasons(result) == [reason]
    host = server(result, "example.com")
    assert host.tls_certificate is None
    assert result.configuration.certificates == ()
    assert host.locations[0].ssl_redirect  # still a TLS host: the default certificate terminates it


def test_sni_mapping_for_exact_and_wildcard_hosts():
    result = translate(
        ingress(rules=[rule("example.com", path("/")), rule("a.example.com", path("/"))],
                tls=[tls("tls", "example.com", "*.example.com")]),
        web(), tls_secret(),
    )
    assert result.problems == ()
    assert server(result, "example.com").tls_certificate == "default/tls"
    assert server(result, "a.example.com").tls_certificate == "default/tls"
    payload = render.certificates_payload(result.configuration)
    assert set(payload["servers"]) == {"example.com", "*.example.com", "a.example.com"}
    assert len(set(payload["servers"].values())) == 1


def test_tls_entry_without_hosts_covers_the_rule_hosts():
    result = translate(
        ingress(rules=[rule("ec.example.org", path("/"))], tls=[tls("ec")]), web(),
        tls_secret("ec", crt=EC_CRT, key=EC_KEY),
    )
    assert server(result, "ec.example.org").tls_certificate == "default/ec"


def test_certificate_not_covering_the_host_is_not_used():
    result = translate(
        ingress(rules=[rule("other.org", path("/"))], tls=[tls("tls", "other.org")]), web(), tls_secret(),
    )
    assert reasons(result) == ["CertificateHostMismatch"]
    assert server(result, "other.org").tls_certificate is None


def test_tls_conflict_oldest_wins():
    result = translate(
        ingress("a", rules=[rule("example.com", path("/a"))], tls=[tls("tls", "example.com")]),
        ingress("b", created="2025-01-01T00:00:00Z", rules=[rule("example.com", path("/b"))],
                tls=[tls("ec", "example.com")]),
        web(), tls_secret(), tls_secret("ec", crt=EC_CRT, key=EC_KEY),
    )
    assert [(p.name, p.reason) for p in result.problems] == [("b", "TLSConflict")]
    assert server(result, "example.com").tls_certificate == "default/tls"


REDIRECTS = [
    # (description, tls?, annotations, configmap ssl-redirect, expected ssl_redirect)
    ("TLS host redirects by default", True, {}, None, True),
    ("ssl-redirect false", True, {"ssl-redirect": "false"}, None, False),
    ("ConfigMap default off", True, {}, "false", False),
    ("annotation overrides ConfigMap", True, {"ssl-redirect": "true"}, "false", True),
    ("plain host does not redirect", False, {}, None, False),
    ("force-ssl-redirect without TLS", False, {"force-ssl-redirect": "true"}, None, True),
]


@pytest.mark.parametrize("desc,with_tls,annotations,default,expected", REDIRECTS, ids=[c[0] for c in REDIRECTS])
def test_https_redirects(desc, with_tls, annotations, default, expected):
    from tests.ingress.test_translate_fixtures import configmap

    objects = [
        ingress(rules=[rule("example.com", path("/"))], tls=[tls("tls", "example.com")] if with_tls else (),
                annotations=annotations),
        web(), tls_secret(),
    ]
    if default is not None:
        objects.append(configmap({"ssl-redirect": default}))
    result = translate(*objects)
    assert server(result, "example.com").locations[0].ssl_redirect is expected
    table = routed(result)
    route = table["hosts"]["example.com"]["prefix"]["/"]
    assert table["policies"][route["policy"]]["ssl_redirect"] is expected
    assert table["ssl_redirect"] == {"code": 308, "port": 443}


def test_default_ssl_certificate_is_checked_and_carried():
    good = translate(web(), tls_secret("default-cert", "platform"), default_ssl_certificate="platform/default-cert")
    assert [c.id for c in good.configuration.certificates] == ["platform/default-cert"]
    assert good.configuration.default_certificate == "platform/default-cert"
    assert render.certificates_payload(good.configuration)["default"] is not None
    bad = translate(web(), default_ssl_certificate="platform/missing")
    assert [(p.kind, p.name, p.reason) for p in bad.problems] == [("Secret", "missing", "SecretNotFound")]
    assert bad.configuration.default_certificate is None


@pytest.mark.parametrize("names,host,expected", [
    (("example.com",), "example.com", True),
    (("example.com",), "EXAMPLE.com", True),
    (("*.example.com",), "a.example.com", True),
    (("*.example.com",), "a.b.example.com", False),
    (("*.example.com",), "example.com", False),
    (("*.example.com",), "*.example.com", True),
    (("a.example.com",), "*.example.com", False),
])
def test_covers(names, host, expected):
    assert covers(names, host) is expected


@pytest.mark.parametrize("with_secret", [True, False])
def test_tls_hosts_get_hsts_whether_or_not_their_secret_is_usable(with_secret):
    objects = [
        ingress(rules=[rule("example.com", path("/"))], tls=[tls("tls", "example.com")], name="secure"),
        ingress(rules=[rule("plain.example.com", path("/"))], name="plain"),
        web(),
    ]
    if with_secret:
        objects.append(tls_secret())
    result = translate(*objects)
    assert server(result, "example.com").tls and not server(result, "plain.example.com").tls
    hosts = routed(result)["hosts"]
    assert hosts["example.com"]["hsts"] and not hosts["plain.example.com"]["hsts"]
