"""Traffic annotations (platformd.ingress.traffic, www_redirect): values
parsed into the model, bad values refused with a message naming the
annotation. Hostile values for every annotation are in test_annotations.py
(its table covers every parser)."""

from __future__ import annotations

import pytest

from platformd.ingress import routes
from platformd.ingress.annotations import PREFIX
from platformd.ingress.model import RateLimit, Redirect
from platformd.ingress.traffic import Traffic
from tests.ingress.test_annotations import SERVICES, loc, served
from tests.ingress.test_translate_fixtures import ingress, path, rendered, rule, server, translate

VALID = [
    # (annotations, the Location's traffic, its lane directives)
    ({"x-forwarded-prefix": "/shop"}, Traffic(forwarded_prefix="/shop"), ()),
    ({"preserve-trailing-slash": "true"}, Traffic(preserve_trailing_slash=True), ()),
    ({"proxy-redirect-from": "http://internal/", "proxy-redirect-to": "https://app.example.com/"}, Traffic(),
     (("proxy_redirect", "http://internal/ https://app.example.com/"),)),
    ({"proxy-redirect-from": "off", "proxy-redirect-to": "/x"}, Traffic(), ()),
    ({"proxy-redirect-from": "default"}, Traffic(), ()),
    ({"proxy-cookie-domain": "localhost example.org"}, Traffic(),
     (("proxy_cookie_domain", "localhost example.org"),)),
    ({"proxy-cookie-domain": "off"}, Traffic(), ()),
    ({"proxy-cookie-path": "/app/ /"}, Traffic(), (("proxy_cookie_path", "/app/ /"),)),
    ({"connection-proxy-header": "keep-alive"}, Traffic(connection_header="keep-alive"), ()),
    ({"proxy-next-upstream": "error timeout http_502"}, Traffic(),
     (("proxy_next_upstream", "error http_502 timeout"),)),
    ({"proxy-next-upstream": "off"}, Traffic(next_upstream_off=True), ()),
    ({"proxy-next-upstream-tries": "5", "proxy-next-upstream-timeout": "10"}, Traffic(next_upstream_tries=5),
     (("proxy_next_upstream_timeout", "10s"),)),
    ({"limit-rate": "100", "limit-rate-after": "1000"}, Traffic(limit_rate=102400),
     (("limit_rate_after", "1024000"),)),
    ({"enable-access-log": "false"}, Traffic(), (("access_log", "off"),)),
    ({"enable-rewrite-log": "true"}, Traffic(rewrite_log=True), ()),
    ({"proxy-http-version": "1.0", "proxy-request-buffering": "off", "client-body-buffer-size": "64k"}, Traffic(),
     (("client_body_buffer_size", "64k"), ("proxy_http_version", "1.0"), ("proxy_request_buffering", "off"))),
    ({"proxy-http-version": "1.1", "proxy-request-buffering": "on"}, Traffic(), ()),
    ({"proxy-buffer-size": "16k"}, Traffic(),
     (("proxy_buffer_size", "16k"), ("proxy_buffers", "4 16k"), ("proxy_busy_buffers_size", "16k"))),
    ({"proxy-buffers-number": "8", "proxy-max-temp-file-size": "0"}, Traffic(),
     (("proxy_buffer_size", "4k"), ("proxy_buffers", "8 4k"), ("proxy_busy_buffers_size", "4k"),
      ("proxy_max_temp_file_size", "0"))),
]


@pytest.mark.parametrize("annotations,traffic,directives", VALID, ids=[",".join(a) for a, _, _ in VALID])
def test_valid_traffic_annotations(annotations, traffic, directives):
    result = served(annotations)
    assert result.problems == (), result.problems
    assert loc(result).traffic == traffic
    assert loc(result).lane_directives == directives
    routes.payload(result.configuration)  # and it makes a route table
    rendered(result)  # and nginx.conf


def test_limit_rate_turns_buffering_on_unless_set():
    assert loc(served({"limit-rate": "100"})).proxy.buffering is True
    assert loc(served({"limit-rate": "100", "proxy-buffering": "off"})).proxy.buffering is False
    assert loc(served({"limit-rate": "0"})).proxy.buffering is None


def test_rate_limit_annotations():
    result = served({"limit-rpm": "120", "limit-burst-multiplier": "2", "limit-allowlist": "10.0.0.0/8",
                     "limit-whitelist": "192.168.1.1"})
    assert result.problems == ()
    assert loc(result).rate_limit == RateLimit(rpm=120, burst_multiplier=2,
                                               allowlist=("10.0.0.0/8", "192.168.1.1/32"))
    policy = next(iter(routes.payload(result.configuration)["policies"].values()))
    assert (policy["limit_rpm"], policy["limit_rpm_burst"], policy["limit_allow"]) == (
        120, 240, ["10.0.0.0/8", "192.168.1.1/32"])


INVALID = [
    ("x-forwarded-prefix", "/a<b>"), ("x-forwarded-prefix", " /lead"), ("x-forwarded-prefix", "/" + "a" * 2000),
    ("preserve-trailing-slash", "yes please"),
    ("proxy-redirect-from", "http://a b/"), ("proxy-redirect-to", "<x>"), ("proxy-redirect-to", "#x"),
    ("proxy-redirect-to", "x/y"), ("proxy-buffer-size", "8k;"), ("proxy-buffer-size", "100g"),
    ("proxy-buffers-number", "2"), ("proxy-max-temp-file-size", "1k"), ("proxy-http-version", "2.0"),
    ("proxy-request-buffering", "maybe"), ("client-body-buffer-size", "1 k"),
    ("proxy-cookie-domain", "example.org"), ("proxy-cookie-domain", "a b c"), ("proxy-cookie-domain", "a_b c"),
    ("proxy-cookie-path", "/a"), ("proxy-cookie-path", "/a <b>"),
    ("connection-proxy-header", "up<grade"),
    ("proxy-next-upstream", "error bogus"), ("proxy-next-upstream", "off timeout"), ("proxy-next-upstream", ""),
    ("proxy-next-upstream-tries", "-1"), ("proxy-next-upstream-tries", "1001"),
    ("proxy-next-upstream-timeout", "10s"), ("limit-rate", "1k"), ("limit-rate-after", "-5"),
    ("enable-access-log", "maybe"), ("enable-rewrite-log", "2"),
    ("limit-rpm", "ten"), ("limit-burst-multiplier", "0"), ("limit-allowlist", "10.0.0.0/33"),
    ("limit-whitelist", "example.com"), ("from-to-www-redirect", "yes"),
]


@pytest.mark.parametrize("name,value", INVALID, ids=[f"{n}={v[:30]!r}" for n, v in INVALID])
def test_invalid_values_are_refused_and_only_that_ingress_is_left_out(name, value):
    bad = ingress("bad", rules=[rule("bad.example.com", path("/"))], annotations={name: value})
    good = ingress("good", rules=[rule("good.example.com", path("/"))])
    result = translate(bad, good, *SERVICES)
    assert [(p.name, p.reason) for p in result.problems] == [("bad", "InvalidAnnotation")]
    assert PREFIX + name in result.problems[0].message
    assert [s.hostname for s in result.configuration.servers] == ["good.example.com"]


def test_from_to_www_redirect_adds_the_other_name_unless_served():
    www = ingress("www", rules=[rule("example.com", path("/"))],
                  annotations={"from-to-www-redirect": "true"})
    result = translate(www, *SERVICES)
    redirect = server(result, "www.example.com")
    assert redirect.redirect == Redirect("http://example.com", 308) and redirect.locations == ()
    host = routes.payload(result.configuration)["hosts"]["www.example.com"]
    assert host["redirect"] == {"code": 308, "target": "http://example.com", "host": "example.com"}
    # The reverse, for a www host.
    back = ingress("back", rules=[rule("www.shop.example", path("/"))],
                   annotations={"from-to-www-redirect": "true"})
    result = translate(back, *SERVICES)
    assert server(result, "shop.example").redirect == Redirect("http://www.shop.example", 308)
    # A name another Ingress serves stays its own.
    other = ingress("other", rules=[rule("www.example.com", path("/"))])
    result = translate(www, other, *SERVICES)
    assert server(result, "www.example.com").redirect is None
    assert result.problems == ()


def test_custom_http_errors_with_the_default_backend_annotation():
    from platformd.ingress.custom_errors import CustomErrors

    result = served({"custom-http-errors": "503, 404,404", "default-backend": "other"})
    assert result.problems == ()
    location = loc(result)
    assert location.traffic.errors == CustomErrors((404, 503), "default.other.80", "default", "app", "web", "80")
    assert ("error_page", "404 503 = @platform_custom_error") in location.lane_directives
    assert ("proxy_intercept_errors", "on") in location.lane_directives
    assert result.configuration.backend("default.other.80") is not None
    # The option's default backend when the Ingress names none.
    result = served({"custom-http-errors": "404"}, default_backend_service="default/api")
    assert loc(result).traffic.errors.backend == "default.api.80"


def test_custom_http_errors_without_an_error_backend_is_a_problem_and_served_plainly():
    result = served({"custom-http-errors": "404"})
    assert [p.reason for p in result.problems] == ["CustomErrorsWithoutBackend"]
    assert loc(result).traffic.errors is None and loc(result).lane_directives == ()


@pytest.mark.parametrize("value", ["99", "600", "404;", "4o4", "200", ""])
def test_custom_http_errors_refuses_codes_error_page_cannot_take(value):
    result = served({"custom-http-errors": value, "default-backend": "other"})
    assert [p.reason for p in result.problems] == ["InvalidAnnotation"]


def test_session_cookie_annotations():
    from platformd.ingress.model import SessionAffinity

    result = served({"affinity": "cookie", "session-cookie-secure": "true", "session-cookie-domain": ".example.com",
                     "session-cookie-expires": "172800", "session-cookie-change-on-failure": "true",
                     "session-cookie-conditional-samesite-none": "true", "session-cookie-samesite": "None",
                     "affinity-canary-behavior": "legacy"})
    assert result.problems == ()
    assert result.configuration.backend("default.web.80").session_affinity == SessionAffinity(
        secure=True, domain=".example.com", expires=172800, change_on_failure=True,
        conditional_samesite_none=True, samesite="None", canary_behavior="legacy")


@pytest.mark.parametrize("name,value", [
    ("session-cookie-domain", "exa mple.com"), ("session-cookie-domain", "-x.com"),
    ("session-cookie-expires", "0"), ("session-cookie-expires", "1d"), ("session-cookie-secure", "on"),
    ("session-cookie-change-on-failure", "yes"), ("session-cookie-conditional-samesite-none", "2"),
    ("affinity-canary-behavior", "stickyish"),
])
def test_session_cookie_annotations_refuse_bad_values(name, value):
    result = served({"affinity": "cookie", name: value})
    assert [p.reason for p in result.problems] == ["InvalidAnnotation"]
    assert PREFIX + name in result.problems[0].message


def test_use_regex_on_one_ingress_makes_the_hosts_implementation_specific_paths_regexes():
    """ingress-nginx: use-regex (or rewrite-target) on any Ingress of a host
    applies to the ImplementationSpecific paths of every Ingress of that host;
    Prefix and Exact paths keep their Kubernetes meaning."""
    spec = "ImplementationSpecific"
    regex = ingress("regex", rules=[rule("example.com", path("/v[0-9]+", path_type=spec))],
                    annotations={"use-regex": "true"})
    plain = ingress("plain", rules=[rule("example.com", path("/api.*", path_type=spec),
                                         path("/exact", path_type="Exact"), path("/pre", path_type="Prefix"))])
    other = ingress("other", rules=[rule("other.example.com", path("/api.*", path_type=spec))])
    from tests.ingress.test_translate_fixtures import locations

    result = translate(regex, plain, other, *SERVICES)
    assert result.problems == ()
    assert set(locations(result, "example.com")) == {("regex", "/v[0-9]+"), ("regex", "/api.*"),
                                                     ("exact", "/exact"), ("prefix", "/pre")}
    assert set(locations(result, "other.example.com")) == {("prefix", "/api.*")}


def test_upstream_hash_by_subset():
    from tests.ingress.test_annotations import backend_of

    result = served({"upstream-hash-by": "$request_uri", "upstream-hash-by-subset": "true"})
    assert backend_of(result).upstream_hash_by_subset_size == 3
    result = served({"upstream-hash-by": "$request_uri", "upstream-hash-by-subset": "true",
                     "upstream-hash-by-subset-size": "5"})
    assert backend_of(result).upstream_hash_by_subset_size == 5
    # Without upstream-hash-by there is nothing to hash.
    assert backend_of(served({"upstream-hash-by-subset": "true"})).upstream_hash_by_subset_size == 0
    assert [p.reason for p in served({"upstream-hash-by-subset-size": "0"}).problems] == ["InvalidAnnotation"]
