"""Validators: what may reach nginx.conf, and the errors for what may not."""

from __future__ import annotations

import re

import pytest

from platformd.ingress import validate as v

HOSTILE = [
    "a\nb",
    "a;b",
    'a"b',
    "a{b}",
    "$host",
    "${host}",
    "x' }",
    "}\nlocation / { content_by_lua_block { os.execute('id') } }",
]


@pytest.mark.parametrize("value", ["example.com", "*.example.com", "a-b.c0.io", "EXAMPLE.com"])
def test_hostname_accepts_dns_names_and_lowercases(value):
    assert v.hostname("host", value) == value.lower()


@pytest.mark.parametrize("value", ["", "-a.com", "a..com", "*.", "a.*.com", "a_b.com", "a.com.", "x" * 64 + ".com", *HOSTILE])
def test_hostname_rejects(value):
    with pytest.raises(v.ValidationError) as err:
        v.hostname("server.hostname", value)
    assert err.value.field == "server.hostname"
    assert err.value.value == value
    assert "server.hostname" in str(err.value)


def test_exact_hostname_rejects_wildcard():
    with pytest.raises(v.ValidationError):
        v.hostname("h", "*.example.com", wildcard=False)


@pytest.mark.parametrize("value", ["/", "/api", "/a/b-c_d.e~f", "/%20x", "/a:b@c", "/a=b&c"])
def test_path_accepts(value):
    assert v.path("path", value) == value


@pytest.mark.parametrize("value", ["", "api", "/a b", "/a?b", "/a#b", "/a\\b", *HOSTILE])
def test_path_rejects(value):
    with pytest.raises(v.ValidationError):
        v.path("location.path", value)


@pytest.mark.parametrize("value", ["/foo(/|$)(.*)", "/v[0-9]{1,3}/.*", "^/api/(?<rest>.*)$", r"/a\.b", "/x{2}"])
def test_regex_accepts_what_ingress_users_write(value):
    assert v.regex("path", value) == value


@pytest.mark.parametrize(
    "value",
    ["/a(", "/a{b}", "/a{", "/$host", "/${x}", '/a"', "/a;b", "/a b", "/a'", "/a`", "/a\\", "/a\n", *HOSTILE],
)
def test_regex_rejects(value):
    with pytest.raises(v.ValidationError):
        v.regex("path", value)


@pytest.mark.parametrize("value", ["/", "/new", "https://example.com", "http://a.b:8080/x?y=1#z", "/a%20b"])
def test_redirect_target_accepts(value):
    assert v.redirect_target("t", value) == value


@pytest.mark.parametrize("value", ["example.com", "ftp://a.com", "javascript:alert(1)", "/a b", "//evil.com/$1", "/$request_uri", *HOSTILE])
def test_redirect_target_rejects(value):
    with pytest.raises(v.ValidationError):
        v.redirect_target("redirect.target", value)


@pytest.mark.parametrize("value", ["/$1", "/$2/x", "/", "/app/$1?q=$2", "https://a.com/$1"])
def test_rewrite_target_allows_capture_groups_only(value):
    assert v.rewrite_target("t", value) == value


@pytest.mark.parametrize("value", ["/$uri", "/$", "/${1}", "$1", *HOSTILE])
def test_rewrite_target_rejects(value):
    with pytest.raises(v.ValidationError):
        v.rewrite_target("rewrite_target", value)


def test_cidr_is_canonical():
    assert v.cidr("c", "10.1.2.3/8") == "10.0.0.0/8"
    assert v.cidr("c", "192.168.0.1") == "192.168.0.1/32"
    assert v.cidr("c", "2001:db8::1/64") == "2001:db8::/64"


@pytest.mark.parametrize("value", ["10.0.0.0/33", "all", "10.0.0.0/8; allow all", "", *HOSTILE])
def test_cidr_rejects(value):
    with pytest.raises(v.ValidationError):
        v.cidr("access.allow", value)


@pytest.mark.parametrize(
    "fn, good, bad",
    [
        (v.header_name, "X-Canary", ["X Canary", "X:C", "", *HOSTILE]),
        (v.cookie_name, "canary_1.x", ["a b", "a=b", "a;b", *HOSTILE]),
        (v.backend_name, "ns-svc-80", ["", "-x", "a/b", "a b", *HOSTILE]),
        (v.size, "8m", ["8 m", "8mb", "-1", "1t", *HOSTILE]),
        (v.upstream_hash_by, "$request_uri", ["request_uri", "$a b", "${a}", "$1", "$a;", "$a\n"]),
        (v.cors_origin, "https://a.example.com:8443", ["a.com", "https://a.com/path", "null", *HOSTILE]),
        (v.ssl_ciphers, "ECDHE-RSA-AES128-GCM-SHA256:!aNULL", ["a b", "a;b", *HOSTILE]),
        (v.upstream_vhost, "svc.ns.svc:8080", ["*.a.com", "a.com:x", *HOSTILE]),
    ],
)
def test_field_validators(fn, good, bad):
    assert fn("f", good)
    for value in bad:
        with pytest.raises(v.ValidationError):
            fn("f", value)


def test_header_value_is_printable_ascii_only():
    assert v.header_value("f", "always") == "always"
    for value in ("a\nb", "a\rb", "é", "x" * 300):
        with pytest.raises(v.ValidationError):
            v.header_value("f", value)


def test_log_format_allows_variables_and_quotes_only():
    assert v.log_format("f", '$remote_addr "$request"')
    for value in ("a\nb", "${x}", "a \\ b", "cost $", "{"):
        with pytest.raises(v.ValidationError):
            v.log_format("logging.format", value)


def test_non_strings_are_rejected_with_field():
    with pytest.raises(v.ValidationError, match="server.hostname: must be a string"):
        v.hostname("server.hostname", 42)
    with pytest.raises(v.ValidationError):
        v.port("p", True)
    with pytest.raises(v.ValidationError):
        v.port("p", 70000)


def test_quote_escapes_and_refuses_variables_and_control_characters():
    assert v.quote('a"b') == '"a\\"b"'
    assert v.quote("a\\b") == '"a\\\\b"'
    assert v.quote("^/x$", allow_variables=True) == '"^/x$"'
    with pytest.raises(v.ValidationError):
        v.quote("$host")
    with pytest.raises(v.ValidationError):
        v.quote("a\nb", allow_variables=True)


def test_pem_bundle_requires_blocks_and_never_echoes_the_key():
    cert = "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"
    key = "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n"
    assert v.pem_bundle("c", cert, key) == (cert, key)
    with pytest.raises(v.ValidationError) as err:
        v.pem_bundle("c", cert, "secret stuff")
    assert "secret" not in str(err.value)


def test_pattern_validators_share_one_contract():
    """The validators built by ``_matching``: a full match of the pattern,
    within the length limit, control characters named as such first."""
    check = v._matching("digits", re.compile(r"[0-9]+"), "must be digits",
                        max_len=3, no_control=True, doc="Digits.")
    assert (check.__name__, check.__doc__) == ("digits", "Digits.")
    assert check("f", "123") == "123"
    for value, reason in [(12, "must be a string"), ("1234", "must be digits"), ("12a", "must be digits"),
                          ("1\n", "contains control characters (newline, tab, NUL...)")]:
        with pytest.raises(v.ValidationError) as err:
            check("f", value)
        assert (err.value.field, err.value.reason) == ("f", reason)
    # The validators are plain functions with their own names (error messages, tracebacks).
    assert [f.__name__ for f in (v.path, v.backend_name, v.redirect_target, v.header_name)] == [
        "path", "backend_name", "redirect_target", "header_name"]
