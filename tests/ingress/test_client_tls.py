"""auth-tls-*: parsing, hostile values (CVE-2025-1097's match-cn), the CA
Secret, fail-closed translation, and what reaches Lua."""

from __future__ import annotations

import base64

import pytest

from platformd.ingress import client_tls
from platformd.ingress.annotations import PREFIX, parse
from platformd.ingress.routes import payload
from tests.helpers import pki
from tests.ingress.test_annotations import HOSTILE
from tests.ingress.test_translate_fixtures import ingress, path, reasons, rendered, rule, server, translate, web

CA = pki.authority("Client CA")
HOST = "secure.example.com"


def ca_secret(name="ca", namespace="default", pem=CA.cert_pem, type_="Opaque", key="ca.crt") -> dict:
    return {"kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "type": type_,
            "data": {key: base64.b64encode(pem.encode()).decode()}}


def secure(name="app", host=HOST, created="2024-01-01T00:00:00Z", **annotations) -> dict:
    annotations.setdefault("auth-tls-secret", "default/ca")
    return ingress(name, rules=[rule(host, path("/"))], annotations=annotations, created=created)


# --- parsing ---------------------------------------------------------------------

def test_defaults_are_ingress_nginx_ones():
    auth = parse({PREFIX + "auth-tls-secret": "default/ca"}).annotations.client_tls
    assert auth == client_tls.AuthTls("default/ca", verify="on", depth=1, error_page="", pass_certificate=False,
                                      match_cn="")


def test_every_setting_is_read():
    auth = parse({PREFIX + "auth-tls-secret": "ca", PREFIX + "auth-tls-verify-client": "optional_no_ca",
                  PREFIX + "auth-tls-verify-depth": "3", PREFIX + "auth-tls-error-page": "https://e.example.com/x",
                  PREFIX + "auth-tls-pass-certificate-to-upstream": "true",
                  PREFIX + "auth-tls-match-cn": "CN=(alice|bob)"}).annotations.client_tls
    assert auth == client_tls.AuthTls("ca", "optional_no_ca", 3, "https://e.example.com/x", True, "CN=(alice|bob)")


@pytest.mark.parametrize("name,value", [
    ("auth-tls-verify-client", "sometimes"),
    ("auth-tls-verify-depth", "0"),
    ("auth-tls-verify-depth", "101"),
    ("auth-tls-secret", "a/b/c"),
    ("auth-tls-secret", "Default/CA"),
    ("auth-tls-error-page", "javascript:alert(1)"),
    ("auth-tls-match-cn", "alice"),  # must be a CN= pattern
])
def test_bad_values_are_refused(name, value):
    parsed = parse({PREFIX + "auth-tls-secret": "ca", PREFIX + name: value})
    assert [e.annotation for e in parsed.errors] == [PREFIX + name]


# CVE-2025-1097: match-cn was pasted into `if ($ssl_client_s_dn !~ <value>)`.
MATCH_CN_ATTACKS = [
    "CN=a) { return 200; } if ($x ~ (",
    'CN=a"; } location /x { content_by_lua_block { os.execute("id") } } #',
    "CN=a$ssl_client_cert",
    "CN=${pwned}",
    "CN=a\nreturn 200;",
    "CN=a;",
    "CN=a b",
    "CN=(unclosed",
    "CN=a{1,2}",
    "CN=" + "a" * 600,
    "CN=(?{code})",
    "CN=\\",
]


@pytest.mark.parametrize("value", MATCH_CN_ATTACKS + HOSTILE)
def test_match_cn_injection_is_refused(value):
    parsed = parse({PREFIX + "auth-tls-secret": "ca", PREFIX + "auth-tls-match-cn": value})
    assert [e.annotation for e in parsed.errors] == [PREFIX + "auth-tls-match-cn"]
    assert parsed.annotations.client_tls is None


def test_match_cn_compiles_with_luas_engine():
    with pytest.raises(Exception) as exc:
        client_tls.match_cn("f", "CN=a(")
    assert "regular expression" in str(exc.value)
    assert client_tls.match_cn("f", "^CN=[a-z]+.example$") == "^CN=[a-z]+.example$"
    with pytest.raises(Exception):
        client_tls.match_cn("f", "CN=a$b")


def test_settings_without_the_secret_refuse_the_ingress():
    parsed = parse({PREFIX + "auth-tls-verify-client": "on"})
    assert [e.annotation for e in parsed.errors] == [PREFIX + "auth-tls-verify-client"]
    assert "auth-tls-secret" in parsed.errors[0].reason


def test_unknown_auth_tls_names_stay_refused():
    assert parse({PREFIX + "auth-tls-unknown": "x"}).errors


# --- the CA Secret -----------------------------------------------------------------


def test_ca_is_re_encoded():
    intermediate = pki.authority("I", parent=CA)
    pem = client_tls.load_ca(ca_secret(pem="junk before\n" + CA.cert_pem + intermediate.cert_pem), "default/ca")
    assert pem == CA.cert_pem + intermediate.cert_pem


@pytest.mark.parametrize("secret,fragment", [
    (None, "not found"),
    ({"data": {}}, "no 'ca.crt'"),
    ({"data": {"ca.crt": "!!"}}, "not base64"),
    (ca_secret(pem="hello"), "no PEM certificate"),
    (ca_secret(pem="-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), "does not parse"),
    (ca_secret(pem=CA.cert_pem * 101), "at most 100"),
    ({"data": {"ca.crt": "A" * 400_000}}, "larger than"),
])
def test_unusable_ca_secrets(secret, fragment):
    with pytest.raises(client_tls.Unusable) as exc:
        client_tls.load_ca(secret, "default/ca")
    assert fragment in str(exc.value)


# --- translation: fail closed ----------------------------------------------------------


def test_host_gets_the_policy():
    result = translate(secure(**{"auth-tls-verify-depth": "2"}), ca_secret(), *web())
    policy = server(result, HOST).client_tls
    assert policy.ca_pem == CA.cert_pem and policy.depth == 2 and policy.verify == "on"
    assert policy.source == "default/ca"


@pytest.mark.parametrize("objects,fragment", [
    ((), "not found"),
    ((ca_secret(key="tls.crt"),), "no 'ca.crt'"),
    ((ca_secret(namespace="other"),), "not found"),
])
def test_unusable_secret_means_not_served(objects, fragment):
    result = translate(secure(), *objects, *web())
    assert [s.hostname for s in result.configuration.servers] == []
    problem = next(p for p in result.problems if p.reason == "InvalidAnnotation")
    assert "auth-tls-secret" in problem.message and fragment in problem.message


def test_secret_of_another_namespace_is_refused():
    result = translate(secure(**{"auth-tls-secret": "other/ca"}), ca_secret(namespace="other"), *web())
    assert result.configuration.servers == ()
    assert any("another namespace" in p.message for p in result.problems)


def test_hostless_rule_is_refused():
    obj = ingress("app", rules=[rule(None, path("/"))], annotations={"auth-tls-secret": "ca"})
    result = translate(obj, ca_secret(), *web())
    assert result.configuration.default_server_locations == ()
    assert any("needs a host" in p.message for p in result.problems)


def test_off_asks_nothing():
    result = translate(secure(**{"auth-tls-verify-client": "off"}), *web())
    assert server(result, HOST).client_tls is None
    assert "InvalidAnnotation" not in reasons(result)


def test_the_oldest_ingress_decides_a_host_and_others_are_told():
    other_ca = pki.authority("Other")
    first = secure("first", created="2024-01-01T00:00:00Z")
    second = ingress("second", rules=[rule(HOST, path("/api"))], created="2024-02-01T00:00:00Z",
                     annotations={"auth-tls-secret": "ca2"})
    plain = ingress("plain", rules=[rule(HOST, path("/open"))], created="2023-01-01T00:00:00Z")
    result = translate(first, second, plain, ca_secret(), ca_secret("ca2", pem=other_ca.cert_pem), *web())
    s = server(result, HOST)
    assert s.client_tls.ca_pem == CA.cert_pem
    assert {loc.path for loc in s.locations} == {"/", "/api", "/open"}  # all paths checked: one handshake per host
    assert "ClientTlsConflict" in reasons(result)


def test_aliases_are_covered_and_data_reaches_lua():
    result = translate(secure(**{"server-alias": "alias.example.com", "auth-tls-match-cn": "CN=admin",
                                 "auth-tls-pass-certificate-to-upstream": "true"}), ca_secret(), *web())
    table = payload(result.configuration)
    policy = server(result, HOST).client_tls
    assert table["client_tls"]["names"] == {HOST: policy.id, "alias.example.com": policy.id}
    assert table["client_tls"]["cas"] == {policy.id: {"pem": CA.cert_pem, "depth": 1}}
    assert table["hosts"][HOST]["client_tls"] == {"id": policy.id, "verify": "on", "error_page": "",
                                                  "pass_certificate": True, "match_cn": "CN=admin"}
    # Nothing of it is nginx.conf text: a CA change never reloads.
    assert "CN=admin" not in rendered(result) and "BEGIN CERTIFICATE" not in rendered(result)


def test_no_client_tls_leaves_the_payload_as_it_was():
    result = translate(ingress("app", rules=[rule(HOST, path("/"))]), *web())
    assert "client_tls" not in payload(result.configuration)
    assert "client_tls" not in payload(result.configuration)["hosts"][HOST]


def test_policy_id_follows_ca_and_depth():
    a = client_tls.ClientTls(CA.cert_pem)
    assert a.id == client_tls.ClientTls(CA.cert_pem, verify="optional", match_cn="CN=x").id
    assert a.id != client_tls.ClientTls(CA.cert_pem, depth=2).id
    assert a.id != client_tls.ClientTls(pki.authority("B").cert_pem).id
