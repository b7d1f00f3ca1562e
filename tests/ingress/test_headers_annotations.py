"""Headers, snippets and mirroring from Ingress annotations and the ConfigMap:
parsed into the one header program (headers.py), hostile values refused
with a message naming the annotation (and the snippet's line), and nothing
of theirs ever in nginx.conf.

Behaviour through nginx: tests/ingress/test_headers_nginx.py and
tests/ingress/test_mirror_nginx.py.
"""

from __future__ import annotations

import json

import pytest

from platformd.ingress import headers as h
from platformd.ingress import render, snippets
from platformd.ingress.annotations import PREFIX, parse
from platformd.ingress.mirror import Mirror
from tests.ingress.test_translate_fixtures import (
    configmap,
    ingress,
    locations,
    path,
    reasons,
    rendered,
    routed,
    rule,
    translate,
    web,
)


def served(annotations: dict, *extra, **options):
    ing = ingress(rules=[rule("example.com", path("/app"))], annotations=annotations)
    return translate(ing, *web(), *extra, **options)


def loc(result):
    return locations(result, "example.com")[("prefix", "/app")]


def headers_cm(name: str, data: dict, namespace: str = "platform") -> dict:
    return {"kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


def everything(result) -> str:
    return rendered(result) + json.dumps([s.data for s in render.dynamic_sections(result.configuration)])


# --- custom-headers, proxy-set-headers, add-headers -----------------------------------


ALLOW = configmap({"global-allowed-response-headers": "X-Frame-Options, x-content-type-options,X-A,Content-Length"})


def test_custom_headers_come_from_the_configmap_as_response_sets():
    cm = headers_cm("sec", {"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff"}, namespace="default")
    result = served({PREFIX + "custom-headers": "default/sec"}, ALLOW, cm)
    assert result.problems == ()
    assert loc(result).headers == (h.HeaderOp("response", "set", "X-Content-Type-Options", ("nosniff",)),
                                   h.HeaderOp("response", "set", "X-Frame-Options", ("DENY",)))
    assert "default/sec" in result.configmaps_used
    policy = next(iter(routed(result)["policies"].values()))
    assert policy["fast"] is False and policy["headers"][0]["op"] == "res_set"


@pytest.mark.parametrize("data", [None, {"X Bad": "v"}, {"X-A": "a\r\nSet-Cookie: pwned=1"}, {"X-A": "a\x00b"},
                                  {"Content-Length": "0"}, {"X-A": "x" * 5000}, {"X-Not-Allowed": "pwned"}])
def test_custom_headers_that_cannot_be_applied_leave_the_ingress_unserved(data):
    extra = [headers_cm("sec", data, namespace="default")] if data is not None else []
    result = served({PREFIX + "custom-headers": "default/sec"}, ALLOW, *extra)
    assert reasons(result) == ["InvalidPath"] and "default/sec" in result.problems[0].message
    assert result.configuration.servers == () or not locations(result, "example.com")
    assert "pwned" not in everything(result)


def test_custom_headers_need_the_operators_allowlist():
    cm = headers_cm("sec", {"X-Frame-Options": "DENY"}, namespace="default")
    result = served({PREFIX + "custom-headers": "sec"}, configmap({}), cm)
    assert reasons(result) == ["InvalidPath"] and "global-allowed-response-headers" in result.problems[0].message


def test_custom_headers_from_another_namespace_are_refused():
    cm = headers_cm("sec", {"X-A": "1"}, namespace="other")
    result = served({PREFIX + "custom-headers": "other/sec"}, ALLOW, cm)
    assert reasons(result) == ["InvalidAnnotation"] and "namespace" in result.problems[0].message
    assert result.configuration.servers == ()


def test_custom_headers_name_alone_is_the_ingress_namespace():
    cm = headers_cm("sec", {"X-A": "1"}, namespace="default")
    result = served({PREFIX + "custom-headers": "sec"}, ALLOW, cm)
    assert loc(result).headers == (h.HeaderOp("response", "set", "X-A", ("1",)),)


def test_global_proxy_set_headers_and_add_headers():
    cm = configmap({"proxy-set-headers": "platform/req", "add-headers": "res"})
    result = served({}, cm, headers_cm("req", {"X-Env": "prod"}), headers_cm("res", {"X-Served-By": "platform"}))
    assert result.problems == ()
    assert result.configuration.settings.headers == (h.HeaderOp("request", "set", "X-Env", ("prod",)),
                                                     h.HeaderOp("response", "set", "X-Served-By", ("platform",)))
    policy = next(iter(routed(result)["policies"].values()))
    assert [s["op"] for s in policy["headers"]] == ["req_set", "res_set"]


def test_global_headers_configmap_missing_is_reported_and_the_rest_served():
    result = served({}, configmap({"add-headers": "platform/nope"}))
    assert reasons(result) == ["InvalidConfigValue"] and "add-headers" in result.problems[0].message
    assert result.configuration.settings.headers == ()
    assert loc(result).backend


# --- snippets ------------------------------------------------------------------------------

SNIPPET = """more_set_headers "X-Frame-Options: DENY";
proxy_set_header X-User $http_x_user;
if ($http_x_debug = "1") { return 403; }
"""


def test_snippets_off_refuse_the_ingress():
    result = served({PREFIX + "configuration-snippet": SNIPPET})
    assert reasons(result) == ["InvalidAnnotation"] and result.configuration.servers == ()
    assert "X-Frame-Options" not in everything(result)


@pytest.mark.parametrize("switch", [
    {"allow_snippet_annotations": True},
    {"cm": {"allow-snippet-annotations": "true", "annotations-risk-level": "Critical"}},
])
def test_snippets_on_become_a_program(switch):
    extra = [configmap(switch.pop("cm"))] if "cm" in switch else []
    result = served({PREFIX + "configuration-snippet": SNIPPET, PREFIX + "server-snippet": "add_header X-S 1;"},
                    *extra, **switch)
    assert result.problems == ()
    assert loc(result).headers == (
        h.HeaderOp("response", "add", "X-S", ("1",)),
        h.HeaderOp("response", "set", "X-Frame-Options", ("DENY",)),
        h.HeaderOp("request", "set", "X-User", (h.Var("http_x_user"),)),
        h.If("http_x_debug", False, ("1",), (h.Return(403),)),
    )
    assert "X-Frame-Options" not in rendered(result)  # data for Lua, never nginx.conf


def test_allow_snippet_annotations_without_critical_risk_level_keeps_them_off():
    result = served({PREFIX + "configuration-snippet": SNIPPET}, configmap({"allow-snippet-annotations": "true"}))
    assert reasons(result) == ["InvalidAnnotation"]


HOSTILE_SNIPPETS = [
    ("lua_need_request_body on;", 1, "lua_need_request_body"),
    ("add_header X 1;\ncontent_by_lua_block { os.execute('id') }", 2, "content_by_lua_block"),
    ("include /etc/nginx/secrets;", 1, "include"),
    ("add_header A b;\n\nproxy_pass http://169.254.169.254/;", 3, "proxy_pass"),
    ("location /x { return 200; }", 1, "location"),
    ("add_header X-A \"a\r\nSet-Cookie: x\";", 1, "CR"),
    ("add_header X-A $document_root;", 1, "$document_root"),
    ("add_header X-A ${realpath_root};", 1, "$realpath_root"),
    ("set $x $remote_user;", 1, "$remote_user"),
    ("if ($http_a ~* b) { return 200; }", 1, "if accepts only"),
    ("if ($http_a = b) { if ($http_c = d) { return 200; } }", 1, "if inside an if"),
    ("more_set_headers -s 404 'X: y';", 1, "options"),
    ("more_set_input_headers -r 'X: y';", 1, "options"),
    ("proxy_set_header Host evil.example;", 1, "Host"),
    ("proxy_set_header Transfer-Encoding chunked;", 1, "Transfer-Encoding"),
    ("more_set_input_headers 'X-Forwarded-For: 1.2.3.4';", 1, "X-Forwarded-For"),
    ("add_header X-A b", 1, "missing ';'"),
    ("add_header X-A b; }", 1, "unexpected '}'"),
    ("if ($http_a = b) { add_header X 1;", 1, "missing '}'"),
    ("return 700;", 1, "200-599"),
    ("return javascript:alert(1);", 1, "http://"),
    ("add_header X-A 'unterminated;", 1, "unterminated"),
    ("add_header X-A \\x;", 1, "backslash"),
    ("set $host evil;", 1, "nginx variable"),
    ("add_header X-A " + "y" * 5000 + ";", 1, "longer"),
]


@pytest.mark.parametrize("text,line,needle", HOSTILE_SNIPPETS)
def test_snippets_outside_the_subset_are_refused_naming_the_line(text, line, needle):
    with pytest.raises(snippets.SnippetError) as err:
        snippets.parse(text)
    assert err.value.line == line and needle in str(err.value)
    result = served({PREFIX + "configuration-snippet": text}, allow_snippet_annotations=True)
    assert reasons(result) == ["InvalidAnnotation"]
    assert f"line {line}" in result.problems[0].message and result.configuration.servers == ()


def test_a_huge_snippet_is_refused():
    parsed = parse({PREFIX + "configuration-snippet": "add_header X-A b;\n" * 2000}, allow_snippets=True)
    assert [e.annotation for e in parsed.errors] == [PREFIX + "configuration-snippet"]


def test_a_dollar_in_a_snippet_value_is_a_variable_not_text():
    # A '$' that names no variable cannot slip through as a literal.
    with pytest.raises(snippets.SnippetError):
        snippets.parse("add_header X-A 'cost: $';")


# --- mirroring -----------------------------------------------------------------------------


def test_mirror_annotations():
    result = served({PREFIX + "mirror-target": "http://10.9.0.1:8080$request_uri",
                     PREFIX + "mirror-host": "shadow.example", PREFIX + "mirror-request-body": "off"})
    assert result.problems == ()
    assert loc(result).mirror == Mirror(scheme="http", address="10.9.0.1:8080", uri=(h.Var("request_uri"),),
                                        host="shadow.example", request_body=False)
    policy = next(iter(routed(result)["policies"].values()))
    assert policy["mirror"]["address"] == "10.9.0.1:8080" and policy["fast"] is False


@pytest.mark.parametrize("target", [
    "http://shadow.example/", "ftp://10.0.0.1/", "http://10.0.0.1/$host", "http://10.0.0.1/${request_uri}x$args",
    "http://user@10.0.0.1/", "http://10.0.0.1:0/", "http://10.0.0.1/a;b", "http://10.0.0.1/{x}", "http://10.0.0.1/a b",
    "http://10.0.0.1/\r\nX: y", "http://10.0.0.1/'", "10.0.0.1", "http://10.0.0.1/" + "a" * 3000,
])
def test_hostile_mirror_targets_are_refused(target):
    parsed = parse({PREFIX + "mirror-target": target})
    assert [e.annotation for e in parsed.errors] == [PREFIX + "mirror-target"], target
    assert parsed.annotations.mirror is None


@pytest.mark.parametrize("name,value", [("mirror-host", "evil.example;"), ("mirror-host", "a b"),
                                        ("mirror-request-body", "yes"), ("custom-headers", "../etc"),
                                        ("custom-headers", "ns/Name")])
def test_hostile_mirror_and_header_options_are_refused(name, value):
    parsed = parse({PREFIX + "mirror-target": "http://10.0.0.1/", PREFIX + name: value})
    assert PREFIX + name in [e.annotation for e in parsed.errors]


def test_mirror_to_a_cluster_service_makes_its_backend():
    shadow = web(name="shadow", ips=("10.7.0.1",))
    result = served({PREFIX + "mirror-target": "http://shadow.default.svc.cluster.local/$request_uri"}, *shadow)
    assert result.problems == ()
    m = loc(result).mirror
    assert (m.backend, m.address, m.host) == ("default.shadow.80", None, "shadow.default.svc.cluster.local")
    backend = result.configuration.backend("default.shadow.80")
    assert backend is not None and [e.address for e in backend.endpoints] == ["10.7.0.1"]
    policy = next(iter(routed(result)["policies"].values()))
    assert policy["mirror"]["backend"] == "default.shadow.80"


def test_a_grpc_ingress_mirrors_grpc_calls_with_their_body_only():
    result = served({PREFIX + "mirror-target": "http://10.0.0.1/", PREFIX + "backend-protocol": "GRPC"})
    assert result.problems == ()
    assert loc(result).lane_directives == (("mirror", "/_platform_mirror_grpc"), ("mirror_request_body", "on"))
    for extra in ({"backend-protocol": "GRPC", "mirror-request-body": "off"}, {"backend-protocol": "GRPCS"}):
        result = served({PREFIX + "mirror-target": "http://10.0.0.1/", **{PREFIX + k: v for k, v in extra.items()}})
        assert reasons(result) == ["InvalidPath"] and "gRPC" in result.problems[0].message


def test_header_configmap_values_read_allowed_variables_only():
    cm = configmap({"proxy-set-headers": "platform/req"})
    ok = served({}, cm, headers_cm("req", {"X-Client": "${remote_addr}:$remote_port", "X-Lit": "plain"}))
    assert ok.problems == ()
    assert ok.configuration.settings.headers == (
        h.HeaderOp("request", "set", "X-Client", (h.Var("remote_addr"), ":", h.Var("remote_port"))),
        h.HeaderOp("request", "set", "X-Lit", ("plain",)))
    for value in ("$document_root", "cost $5", "${realpath_root}", "$"):
        bad = served({}, cm, headers_cm("req", {"X-A": value}))
        assert reasons(bad) == ["InvalidConfigValue"], value
        assert bad.configuration.settings.headers == ()


def test_a_stray_dollar_between_variables_is_refused_in_snippets():
    with pytest.raises(snippets.SnippetError):
        snippets.parse("add_header X-A 'a$5 $host';")
