"""proxy-ssl-*: parsing, hostile values, the Secret, fail-closed translation
and the lane directives each route gets."""

from __future__ import annotations

import base64

import pytest

from platformd.ingress import lanes
from platformd.ingress.annotations import PREFIX, parse
from platformd.ingress.backend_tls import BackendTlsAsk
from tests.helpers import pki
from tests.ingress.test_annotations import HOSTILE
from tests.ingress.test_translate_fixtures import ingress, path, reasons, rendered, rule, server, translate, web

CA = pki.authority("Backend CA")
CLIENT = pki.leaf(pki.authority("Clients"), "ingress", days=3650)
HOST = "app.example.com"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(name="backend", namespace="default", **data) -> dict:
    return {"kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "type": "Opaque",
            "data": {k.replace("_", "."): b64(val) for k, val in data.items()}}


def app(**annotations) -> dict:
    annotations.setdefault("backend-protocol", "HTTPS")
    return ingress("app", rules=[rule(HOST, path("/"))], annotations=annotations)


VERIFY = {"proxy-ssl-secret": "default/backend", "proxy-ssl-verify": "on"}


def directives(result) -> dict:
    (loc,) = server(result, HOST).locations
    return dict(loc.lane_directives)


def test_defaults_are_ingress_nginx_ones():
    ask = parse({PREFIX + "proxy-ssl-secret": "default/ca"}).annotations.backend_tls
    assert ask == BackendTlsAsk("default/ca", verify=False, depth=1, name="", server_name=False)


@pytest.mark.parametrize("name", ["proxy-ssl-secret", "proxy-ssl-verify", "proxy-ssl-verify-depth", "proxy-ssl-name",
                                  "proxy-ssl-server-name", "proxy-ssl-protocols", "proxy-ssl-ciphers"])
def test_hostile_values(name):
    for value in HOSTILE + ["TLSv1.2; proxy_pass http://evil", "x" * 20000]:
        parsed = parse({PREFIX + name: value, PREFIX + "backend-protocol": "HTTPS"})
        assert [e.annotation for e in parsed.errors] == [PREFIX + name], value


@pytest.mark.parametrize("value", ["SSLv3", "SSLv2 TLSv1.2", "TLSv1.4", ""])
def test_old_or_unknown_protocols_are_refused(value):
    assert parse({PREFIX + "proxy-ssl-protocols": value}).errors


def test_secret_needs_a_namespace():
    assert parse({PREFIX + "proxy-ssl-secret": "ca"}).errors


def test_the_issue_example_gets_verification():
    result = translate(app(**VERIFY), secret(ca_crt=CA.cert_pem), *web())
    got = directives(result)
    assert got["proxy_ssl_verify"] == "on" and got["proxy_ssl_verify_depth"] == "1"
    assert got["proxy_ssl_trusted_certificate"] == CA.cert_pem
    assert got["proxy_ssl_name"] == "web.default.svc"
    text = rendered(result)
    assert "proxy_ssl_verify on;" in text and "BEGIN CERTIFICATE" not in text  # a file, not inline


def test_every_setting_becomes_a_directive():
    result = translate(app(**VERIFY, **{"proxy-ssl-name": "backend.internal", "proxy-ssl-server-name": "on",
                                        "proxy-ssl-verify-depth": "3", "proxy-ssl-protocols": "TLSv1.3 TLSv1.2",
                                        "proxy-ssl-ciphers": "HIGH:!aNULL"}),
                       secret(ca_crt=CA.cert_pem, tls_crt=CLIENT.cert_pem, tls_key=CLIENT.key_pem), *web())
    got = directives(result)
    assert got["proxy_ssl_name"] == "backend.internal" and got["proxy_ssl_server_name"] == "on"
    assert got["proxy_ssl_verify_depth"] == "3" and got["proxy_ssl_protocols"] == "TLSv1.2 TLSv1.3"
    assert got["proxy_ssl_ciphers"] == "HIGH:!aNULL"
    assert got["proxy_ssl_certificate"].startswith("-----BEGIN CERTIFICATE-----")
    assert "PRIVATE KEY" in got["proxy_ssl_certificate_key"]


def test_grpcs_gets_grpc_ssl_directives():
    result = translate(app(**VERIFY, **{"backend-protocol": "GRPCS"}), secret(ca_crt=CA.cert_pem), *web())
    got = directives(result)
    assert got["grpc_ssl_verify"] == "on" and "proxy_ssl_verify" not in got


def test_plain_http_backend_with_verify_is_refused():
    result = translate(app(**VERIFY, **{"backend-protocol": "HTTP"}), secret(ca_crt=CA.cert_pem), *web())
    assert result.configuration.servers == ()
    assert any("needs backend-protocol HTTPS" in p.message for p in result.problems)


@pytest.mark.parametrize("objects,fragment", [
    ((), "not found"),
    ((secret(tls_crt=CLIENT.cert_pem, tls_key=CLIENT.key_pem),), "no 'ca.crt'"),
    ((secret(ca_crt="nope"),), "no PEM certificate"),
    ((secret(namespace="other", ca_crt=CA.cert_pem),), "not found"),
    ((secret(ca_crt=CA.cert_pem, tls_crt=CLIENT.cert_pem),), "client certificate"),
])
def test_unusable_secret_means_not_served(objects, fragment):
    result = translate(app(**VERIFY), *objects, *web())
    assert result.configuration.servers == ()
    problem = next(p for p in result.problems if p.reason == "InvalidAnnotation")
    assert "proxy-ssl-secret" in problem.message and fragment in problem.message


def test_secret_of_another_namespace_is_refused():
    result = translate(app(**{"proxy-ssl-secret": "other/backend", "proxy-ssl-verify": "on"}),
                       secret(namespace="other", ca_crt=CA.cert_pem), *web())
    assert result.configuration.servers == ()
    assert any("another namespace" in p.message for p in result.problems)


def test_one_lane_per_distinct_set():
    first = app(**VERIFY)
    second = ingress("other", rules=[rule("other.example.com", path("/"))],
                     annotations={"backend-protocol": "HTTPS", **VERIFY})
    result = translate(first, second, secret(ca_crt=CA.cert_pem), *web())
    assert len(lanes.used(result.configuration)) == 1
    changed = translate(first, second, secret(ca_crt=pki.authority("New CA").cert_pem), *web())
    assert lanes.used(changed.configuration) != lanes.used(result.configuration)  # a CA change is a new lane


def test_nothing_asked_changes_nothing():
    result = translate(app(), *web())
    assert directives(result) == {}
    assert reasons(result) == []
