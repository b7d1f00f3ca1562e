"""Annotations: every value parsed into the model, every bad value refused.

Three tables: valid values and their effect on the model; invalid values and
the Problem they give; hostile values (nginx/Lua injection attempts) for
every annotation, which must be refused and never reach nginx.conf or Lua.
"""

from __future__ import annotations

import json

import pytest

from platformd.ingress import render
from platformd.ingress.annotations import PARSERS, PREFIX, parse
from platformd.ingress.model import (
    AccessControl,
    AffinityMode,
    BackendProtocol,
    LoadBalance,
    RateLimit,
    Redirect,
    SessionAffinity,
    Timeouts,
)
from tests.ingress.test_translate_fixtures import (
    configmap,
    ingress,
    locations,
    path,
    reasons,
    rendered,
    rule,
    server,
    translate,
    web,
)

SERVICES = [*web(), *web(name="api", ips=("10.2.0.1",)), *web(name="other", ips=("10.3.0.1",))]


def served(annotations: dict, *extra, paths=None, **options):
    ing = ingress(rules=[rule("example.com", *(paths or [path("/app")]))], annotations=annotations)
    return translate(ing, *SERVICES, *extra, **options)


def loc(result, key=("prefix", "/app")):
    return locations(result, "example.com")[key]


def backend_of(result, name="default.web.80"):
    return result.configuration.backend(name)


# --- valid values ------------------------------------------------------------------

VALID = [
    # (annotations, check(result))
    ({"rewrite-target": "/"}, lambda r: loc(r).rewrite_target == "/"),
    ({"app-root": "/app1"}, lambda r: loc(r, ("exact", "/")).redirect == Redirect("/app1", 302)),
    ({"permanent-redirect": "https://new.example.com/x"},
     lambda r: loc(r).redirect == Redirect("https://new.example.com/x", 301) and loc(r).backend is None),
    ({"permanent-redirect": "https://new.example.com/", "permanent-redirect-code": "308"},
     lambda r: loc(r).redirect.code == 308),
    ({"temporal-redirect": "/elsewhere"}, lambda r: loc(r).redirect == Redirect("/elsewhere", 302)),
    ({"server-alias": "www.example.com, *.example.net"},
     lambda r: server(r, "example.com").aliases == ("*.example.net", "www.example.com")),
    ({"backend-protocol": "GRPC"}, lambda r: loc(r).proxy.protocol is BackendProtocol.GRPC),
    ({"backend-protocol": "https"}, lambda r: loc(r).proxy.protocol is BackendProtocol.HTTPS),
    ({"proxy-connect-timeout": "3", "proxy-read-timeout": "120", "proxy-send-timeout": "30"},
     lambda r: loc(r).proxy.timeouts == Timeouts(connect=3, send=30, read=120)),
    ({"proxy-body-size": "8M"}, lambda r: loc(r).proxy.body_size == "8m"),
    ({"proxy-buffering": "on"}, lambda r: loc(r).proxy.buffering is True),
    ({"upstream-vhost": "api.internal:8080"}, lambda r: loc(r).proxy.upstream_vhost == "api.internal:8080"),
    ({"whitelist-source-range": "10.0.0.0/8, 192.168.0.1"},
     lambda r: loc(r).access == AccessControl(allow=("10.0.0.0/8", "192.168.0.1/32"))),
    ({"allowlist-source-range": "10.0.0.0/8", "denylist-source-range": "10.9.0.0/16"},
     lambda r: loc(r).access == AccessControl(allow=("10.0.0.0/8",), deny=("10.9.0.0/16",))),
    ({"limit-rps": "10", "limit-connections": "5"}, lambda r: loc(r).rate_limit == RateLimit(rps=10, connections=5)),
    ({"enable-cors": "true"}, lambda r: loc(r).cors is not None and loc(r).cors.allow_origins == ("*",)),
    ({"enable-cors": "true", "cors-allow-origin": "https://a.example.com, https://*.example.org",
      "cors-allow-methods": "GET, post", "cors-allow-headers": "X-One,X-Two", "cors-expose-headers": "X-Total",
      "cors-allow-credentials": "false", "cors-max-age": "600"},
     lambda r: (loc(r).cors.allow_origins == ("https://*.example.org", "https://a.example.com")
                and loc(r).cors.allow_methods == ("GET", "POST") and loc(r).cors.allow_headers == ("X-One", "X-Two")
                and loc(r).cors.expose_headers == ("X-Total",) and not loc(r).cors.allow_credentials
                and loc(r).cors.max_age == 600)),
    ({"cors-allow-origin": "https://a.example.com"}, lambda r: loc(r).cors is None),  # needs enable-cors
    ({"load-balance": "ewma"}, lambda r: backend_of(r).load_balance is LoadBalance.EWMA),
    ({"upstream-hash-by": "$request_uri"}, lambda r: backend_of(r).upstream_hash_by == "$request_uri"),
    ({"affinity": "cookie"}, lambda r: backend_of(r).session_affinity == SessionAffinity()),
    ({"affinity": "cookie", "affinity-mode": "persistent", "session-cookie-name": "route",
      "session-cookie-max-age": "3600", "session-cookie-path": "/app", "session-cookie-samesite": "Strict"},
     lambda r: backend_of(r).session_affinity == SessionAffinity(
         cookie_name="route", mode=AffinityMode.PERSISTENT, max_age=3600, path="/app", samesite="Strict")),
    ({"service-upstream": "true"}, lambda r: [e.address for e in backend_of(r).endpoints] == ["10.96.0.10"]),
    ({"ssl-redirect": "false", "force-ssl-redirect": "true"}, lambda r: loc(r).ssl_redirect is True),
    ({"use-regex": "false"}, lambda r: loc(r).match.value == "prefix"),
]


@pytest.mark.parametrize("annotations,check", VALID, ids=[",".join(a) for a, _ in VALID])
def test_valid_annotations(annotations, check):
    result = served(annotations)
    assert result.problems == (), result.problems
    assert check(result)
    rendered(result)  # and it renders


def test_global_load_balance_default_and_annotation_override():
    result = served({}, configmap({"load-balance": "ewma"}))
    assert backend_of(result).load_balance is LoadBalance.EWMA
    result = served({"load-balance": "round_robin"}, configmap({"load-balance": "ewma"}))
    assert backend_of(result).load_balance is LoadBalance.ROUND_ROBIN


def test_backend_settings_conflict_oldest_wins():
    a = ingress("a", rules=[rule("a.example.com", path("/"))], annotations={"load-balance": "ewma"})
    b = ingress("b", created="2025-01-01T00:00:00Z", rules=[rule("b.example.com", path("/"))],
                annotations={"affinity": "cookie"})
    result = translate(a, b, *SERVICES)
    assert [(p.name, p.reason) for p in result.problems] == [("b", "BackendSettingsConflict")]
    assert backend_of(result).load_balance is LoadBalance.EWMA and backend_of(result).session_affinity is None


# --- invalid values -------------------------------------------------------------------

INVALID = [
    ("use-regex", "yes"), ("ssl-redirect", "maybe"), ("force-ssl-redirect", "2"),
    ("rewrite-target", "/$host"), ("rewrite-target", "relative"), ("app-root", "app"),
    ("permanent-redirect", "ftp://x"), ("permanent-redirect-code", "200"), ("permanent-redirect-code", "399"),
    ("temporal-redirect", "not a url"), ("server-alias", "bad_host"), ("server-alias", ""),
    ("backend-protocol", "FCGI"), ("backend-protocol", "AUTO_HTTP"),
    ("proxy-connect-timeout", "0"), ("proxy-read-timeout", "10m"), ("proxy-send-timeout", "-1"),
    ("proxy-body-size", "8 m"), ("proxy-buffering", "yes"),
    ("canary", "on"), ("canary-weight", "x"), ("canary-weight-total", "0"),
    ("canary-by-header", "X Bad"), ("canary-by-header-value", "\x01"), ("canary-by-header-pattern", "(unclosed"),
    ("canary-by-cookie", "a=b"),
    ("affinity", "ip"), ("affinity-mode", "sticky"), ("session-cookie-name", "a b"), ("session-cookie-max-age", "0"),
    ("session-cookie-path", "app"), ("session-cookie-samesite", "lax"),
    ("load-balance", "least_conn"), ("upstream-hash-by", "request_uri"),
    ("whitelist-source-range", "10.0.0.0/33"), ("allowlist-source-range", "example.com"),
    ("denylist-source-range", "10.0.0.1,,x"),
    ("limit-rps", "ten"), ("limit-connections", "-5"),
    ("enable-cors", "sure"), ("cors-allow-origin", "example.com"), ("cors-allow-methods", "GET POST"),
    ("cors-allow-headers", "X:Y"), ("cors-expose-headers", "a b"), ("cors-allow-credentials", "x"),
    ("cors-max-age", "1d"), ("default-backend", "Other_Svc"), ("service-upstream", "y"),
    ("upstream-vhost", "a b"), ("upstream-vhost", "host:99999"),
]


@pytest.mark.parametrize("name,value", INVALID, ids=[f"{n}={v!r}" for n, v in INVALID])
def test_invalid_values_are_refused_and_only_that_ingress_is_left_out(name, value):
    bad = ingress("bad", rules=[rule("bad.example.com", path("/"))], annotations={name: value})
    good = ingress("good", rules=[rule("good.example.com", path("/"))])
    result = translate(bad, good, *SERVICES)
    assert [(p.kind, p.name, p.reason) for p in result.problems] == [("Ingress", "bad", "InvalidAnnotation")]
    message = result.problems[0].message
    assert PREFIX + name in message and repr(value)[1:-1][:20] in message
    assert [s.hostname for s in result.configuration.servers] == ["good.example.com"]
    assert result.owned_ingresses == ("default/bad", "default/good")  # still ours: it gets status


def test_canary_weight_above_total_blames_the_weight():
    result = served({"canary": "true", "canary-weight": "150"})
    assert [p.message.split(" value")[0] for p in result.problems] == [f"annotation {PREFIX}canary-weight"]


# --- snippets and unsupported annotations -----------------------------------------------------


@pytest.mark.parametrize("allow", [False, True])
@pytest.mark.parametrize("name", ["configuration-snippet", "server-snippet", "auth-snippet", "stream-snippet"])
def test_snippets_are_always_refused(name, allow):
    result = served({name: "more_set_headers 'X: pwned';"}, allow_snippet_annotations=allow)
    assert reasons(result) == ["InvalidAnnotation"]
    assert ("disabled" in result.problems[0].message) is (not allow)
    assert result.configuration.servers == ()
    assert "pwned" not in rendered(result)


def test_auth_that_cannot_be_enforced_refuses_the_ingress():
    result = served({"auth-type": "basic", "auth-secret": "missing"})
    assert reasons(result) == ["AuthSecretNotFound"] and result.configuration.servers == ()


@pytest.mark.parametrize("annotations", [
    {"backend-protocol": "HTTPS", "proxy-ssl-verify": "on", "proxy-ssl-secret": "default/ca"},
    {"backend-protocol": "HTTPS", "proxy-ssl-verify": "on"},
    {"backend-protocol": "HTTPS", "proxy-ssl-protocols": "TLSv1.3"},
    {"secure-verify-ca-secret": "default/ca"},
])
def test_backend_tls_verification_we_lack_refuses_the_ingress(annotations):
    """#12: an Ingress asking for a verified backend was served unverified (200
    where the CA does not sign the backend's certificate): fail closed."""
    result = served(annotations)
    assert set(reasons(result)) == {"InvalidAnnotation"} and result.configuration.servers == ()


def test_proxy_ssl_verify_off_asks_for_nothing_and_is_ignored():
    result = served({"backend-protocol": "HTTPS", "proxy-ssl-verify": "off"})
    assert reasons(result) == ["UnsupportedAnnotation"]
    assert ("prefix", "/app") in locations(result, "example.com")


def test_other_unknown_annotations_are_reported_and_ignored():
    result = served({"proxy-buffer-size": "8k", "example.com/unrelated": "x"})
    assert reasons(result) == ["UnsupportedAnnotation"]
    assert ("prefix", "/app") in locations(result, "example.com")


# --- hostile values: never rendered -----------------------------------------------------------

HOSTILE = [
    "/pwned\nreturn 200;",
    "/pwned\r\nX-Injected: 1",
    "/pwned;",
    "/pwned; return 200",
    "/pwned { }",
    '/pwned"',
    "/pwned'",
    "/$pwned",
    "/${pwned}",
    '"; ngx.exit(500) -- pwned',
    "'; ngx.exit(500) -- pwned",
    "}} server { listen 1; } # pwned",
    "pwned { content_by_lua_block { os.execute('id') } }",
    "/pwned`id`",
    "/pwned\\",
    "/pwned\x00",
    "/pwned\t",
]


def _payloads(result) -> str:
    return json.dumps([s.data for s in render.dynamic_sections(result.configuration)])


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_hostile_values_are_refused_and_never_rendered(name):
    # One Ingress per hostile value (each on its own host) in one snapshot:
    # each must be refused on its own, and none may reach nginx.conf or Lua.
    bad = [
        ingress(f"bad{i}", rules=[rule(f"bad{i}.example.com", path("/"))], annotations={name: value})
        for i, value in enumerate(HOSTILE)
    ]
    good = ingress("good", rules=[rule("good.example.com", path("/"))])
    result = translate(*bad, good, *SERVICES)
    refused = {p.name for p in result.problems if p.reason == "InvalidAnnotation" and PREFIX + name in p.message}
    assert refused == {f"bad{i}" for i in range(len(HOSTILE))}
    assert [s.hostname for s in result.configuration.servers] == ["good.example.com"]
    text = rendered(result)
    assert "pwned" not in text and "pwned" not in _payloads(result)


# Every annotation of the parser table, free text or not: the table is the list.
@pytest.mark.parametrize("name", sorted(PARSERS))
def test_hostile_values_are_refused_by_the_parser(name):
    for value in HOSTILE:
        parsed = parse({PREFIX + name: value})
        assert [e.annotation for e in parsed.errors] == [PREFIX + name], (name, value)


def test_server_alias_that_is_another_host_is_dropped_with_a_problem():
    a = ingress("a", rules=[rule("example.com", path("/"))], annotations={"server-alias": "other.example.com, www.example.com"})
    b = ingress("b", rules=[rule("other.example.com", path("/"))])
    result = translate(a, b, *SERVICES)
    assert [(p.name, p.reason) for p in result.problems] == [("a", "ServerAliasConflict")]
    assert server(result, "example.com").aliases == ("www.example.com",)
    rendered(result)


def test_app_root_yields_to_an_explicit_exact_root():
    result = served({"app-root": "/app1"}, paths=[path("/", path_type="Exact"), path("/app")])
    assert reasons(result) == ["AppRootConflict"]
    assert locations(result, "example.com")[("exact", "/")].backend == "default.web.80"


def test_redirect_precedence_temporal_then_permanent():
    result = served({"temporal-redirect": "https://t.example.com/", "permanent-redirect": "https://p.example.com/"})
    assert loc(result).redirect == Redirect("https://t.example.com/", 302)
