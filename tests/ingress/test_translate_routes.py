"""Hosts, paths, conflicts and default backends: Ingress rules → servers and locations."""

from __future__ import annotations

import json
import random

import pytest

from tests.ingress.test_translate_fixtures import (
    backend,
    configmap,
    endpoint_slice,
    ingress,
    locations,
    path,
    reasons,
    rendered,
    routed,
    rule,
    service,
    translate,
    web,
)

SERVICES = [*web(), *web(name="api", ips=("10.2.0.1",)), *web(name="other", ips=("10.3.0.1",))]


# --- paths ---------------------------------------------------------------------------

PATH_CASES = [
    # (description, path item, annotations, expected (match, path) in the model)
    ("Exact", path("/foo", path_type="Exact"), {}, ("exact", "/foo")),
    ("Prefix", path("/foo", path_type="Prefix"), {}, ("prefix", "/foo")),
    ("Prefix keeps its trailing slash text; canonical base is the same", path("/foo/", path_type="Prefix"), {},
     ("prefix", "/foo/")),
    ("ImplementationSpecific is Prefix", path("/foo", path_type="ImplementationSpecific"), {}, ("prefix", "/foo")),
    ("missing pathType is ImplementationSpecific", path("/foo", path_type=None), {}, ("prefix", "/foo")),
    ("ImplementationSpecific + use-regex is a regex", path("/v[0-9]+/api", path_type="ImplementationSpecific"),
     {"use-regex": "true"}, ("regex", "/v[0-9]+/api")),
    ("ImplementationSpecific + rewrite-target is a regex", path("/foo(/|$)(.*)", path_type="ImplementationSpecific"),
     {"rewrite-target": "/$2"}, ("regex", "/foo(/|$)(.*)")),
    ("use-regex leaves Prefix alone", path("/foo", path_type="Prefix"), {"use-regex": "true"}, ("prefix", "/foo")),
    ("use-regex leaves Exact alone", path("/foo", path_type="Exact"), {"use-regex": "true"}, ("exact", "/foo")),
]


@pytest.mark.parametrize("desc,item,annotations,expected", PATH_CASES, ids=[c[0] for c in PATH_CASES])
def test_path_types(desc, item, annotations, expected):
    result = translate(ingress(rules=[rule("example.com", item)], annotations=annotations), SERVICES)
    assert expected in locations(result, "example.com")
    assert not [r for r in reasons(result) if r != "UnsupportedAnnotation"]


def test_prefix_is_element_wise_and_exact_beats_prefix_in_the_route_table():
    result = translate(
        ingress(rules=[rule("example.com", path("/foo/", service="web"), path("/foo", path_type="Exact", service="api"))]),
        SERVICES,
    )
    host = routed(result)["hosts"]["example.com"]
    assert host["exact"]["/foo"]["backend"] == "default.api.80"
    # Canonical prefix: the router matches it element-wise (/foo, /foo/...; not /foobar).
    assert host["prefix"]["/foo"]["backend"] == "default.web.80"


def test_regex_paths_render_anchored_case_insensitive():
    result = translate(
        ingress(rules=[rule("example.com", path("/api(/|$)(.*)", path_type="ImplementationSpecific"))],
                annotations={"rewrite-target": "/$2"}),
        SERVICES,
    )
    (route,) = routed(result)["hosts"]["example.com"]["regex"]
    assert route["pattern"] == "^/api(/|$)(.*)"  # the router matches it case-insensitively
    assert route["rewrite"] == "(?i)^/api(/|$)(.*)"
    assert routed(result)["policies"][route["policy"]]["rewrite_target"] == "/$2"


@pytest.mark.parametrize("bad", ["/a b", "/x;y", "/$host", "foo", '/a"b'])
def test_invalid_paths_are_left_out_alone(bad):
    result = translate(
        ingress(rules=[rule("example.com", path(bad, path_type="Exact"), path("/ok"))]), SERVICES,
    )
    assert reasons(result) == ["InvalidPath"]
    assert set(locations(result, "example.com")) == {("prefix", "/ok")}


def test_invalid_regex_is_left_out():
    result = translate(
        ingress(rules=[rule("example.com", path("/a(", path_type="ImplementationSpecific"), path("/ok"))],
                annotations={"use-regex": "true"}),
        SERVICES,
    )
    assert reasons(result) == ["InvalidPath"]
    assert set(locations(result, "example.com")) == {("prefix", "/ok")}


# --- hosts ---------------------------------------------------------------------------


def test_hosts_are_lower_cased_and_wildcards_kept():
    result = translate(ingress(rules=[rule("Example.COM", path("/")), rule("*.Apps.example.com", path("/"))]), SERVICES)
    assert sorted(s.hostname for s in result.configuration.servers) == ["*.apps.example.com", "example.com"]
    assert set(routed(result)["hosts"]) == {"*.apps.example.com", "example.com"}


def test_invalid_host_costs_only_its_rule():
    result = translate(ingress(rules=[rule("bad host;", path("/")), rule("ok.example.com", path("/"))]), SERVICES)
    assert reasons(result) == ["InvalidHost"]
    assert [s.hostname for s in result.configuration.servers] == ["ok.example.com"]


def test_several_ingresses_add_paths_to_one_host():
    result = translate(
        ingress("a", rules=[rule("example.com", path("/a", service="web"))]),
        ingress("b", rules=[rule("example.com", path("/b", service="api"))]),
        SERVICES,
    )
    locs = locations(result, "example.com")
    assert locs[("prefix", "/a")].backend == "default.web.80"
    assert locs[("prefix", "/b")].backend == "default.api.80"
    assert result.problems == ()


CONFLICTS = [
    # (description, first ingress (name, created), second, expected winner)
    ("older wins", ("zz", "2024-01-01T00:00:00Z"), ("aa", "2024-06-01T00:00:00Z"), "zz"),
    ("same age: namespace/name decides", ("bb", "2024-01-01T00:00:00Z"), ("aa", "2024-01-01T00:00:00Z"), "aa"),
]


@pytest.mark.parametrize("desc,first,second,winner", CONFLICTS, ids=[c[0] for c in CONFLICTS])
def test_conflicts_resolve_deterministically(desc, first, second, winner):
    a = ingress(first[0], created=first[1], rules=[rule("example.com", path("/x", service="web"))])
    b = ingress(second[0], created=second[1], rules=[rule("example.com", path("/x/", service="api"))])
    for order in ((a, b), (b, a)):
        result = translate(*order, SERVICES)
        expected = "default.web.80" if winner == first[0] else "default.api.80"
        assert locations(result, "example.com")[("prefix", "/x" if winner == first[0] else "/x/")].backend == expected
        loser = second[0] if winner == first[0] else first[0]
        assert [(p.name, p.reason) for p in result.problems] == [(loser, "PathConflict")]


def test_same_path_with_different_match_is_no_conflict():
    result = translate(
        ingress("a", rules=[rule("example.com", path("/x", service="web"))]),
        ingress("b", rules=[rule("example.com", path("/x", path_type="Exact", service="api"))]),
        SERVICES,
    )
    assert result.problems == ()
    assert {k for k in locations(result, "example.com")} >= {("prefix", "/x"), ("exact", "/x")}


# --- default backends ----------------------------------------------------------------


def test_no_default_backend_means_404():
    result = translate(ingress(rules=[rule("example.com", path("/a"))]), SERVICES)
    assert result.configuration.default_backend is None
    assert set(locations(result, "example.com")) == {("prefix", "/a")}
    default = routed(result)["default"]
    assert default["exact"] == default["prefix"] == {} and default["regex"] == []  # the router answers 404


def test_spec_default_backend_of_an_ingress_without_rules_is_the_catch_all():
    result = translate(
        ingress("fallback", rules=[], default_backend=backend("other")),
        ingress("app", rules=[rule("example.com", path("/a"))]),
        SERVICES,
    )
    assert result.configuration.default_backend == "default.other.80"
    assert result.configuration.backend("default.other.80").endpoints[0].address == "10.3.0.1"


def test_spec_default_backend_serves_unmatched_paths_of_its_hosts():
    result = translate(
        ingress("app", rules=[rule("example.com", path("/a"))], default_backend=backend("api")),
        SERVICES,
    )
    assert locations(result, "example.com")[("prefix", "/")].backend == "default.api.80"
    assert result.configuration.default_backend is None  # it has rules: not the catch-all


def test_explicit_root_path_beats_spec_default_backend():
    result = translate(
        ingress("app", rules=[rule("example.com", path("/", service="web"))], default_backend=backend("api")),
        SERVICES,
    )
    assert locations(result, "example.com")[("prefix", "/")].backend == "default.web.80"


def test_default_backend_service_option():
    result = translate(
        ingress(rules=[rule("example.com", path("/a"))]),
        SERVICES, service("fallback", "platform"), endpoint_slice("fallback", "platform", ["10.9.0.1"]),
        default_backend_service="platform/fallback",
    )
    assert result.configuration.default_backend == "platform.fallback.80"
    assert locations(result, "example.com")[("prefix", "/")].backend == "platform.fallback.80"


def test_missing_default_backend_service_is_a_problem_and_404():
    result = translate(ingress(rules=[rule("example.com", path("/a"))]), SERVICES, default_backend_service="platform/nope")
    assert result.configuration.default_backend is None
    assert ("Service", "nope", "DefaultBackendNotFound") in [(p.kind, p.name, p.reason) for p in result.problems]


def test_hostless_root_rule_is_the_catch_all_and_other_hostless_paths_are_its_locations():
    result = translate(ingress(rules=[rule(None, path("/", service="api"), path("/x"))]), SERVICES)
    config = result.configuration
    assert config.default_backend == "default.api.80"
    assert reasons(result) == []
    assert [(loc.match.value, loc.path, loc.backend) for loc in config.default_server_locations] == [
        ("prefix", "/x", "default.web.80")]
    assert {b.name for b in config.backends} == {"default.api.80", "default.web.80"}
    default = routed(result)["default"]
    assert default["prefix"]["/x"]["backend"] == "default.web.80"


def test_hostless_root_rule_with_annotations_is_a_catch_all_location():
    annotated = ingress(rules=[rule(None, path("/", service="api"))],
                        annotations={"whitelist-source-range": "10.0.0.0/8"})
    result = translate(annotated, SERVICES)
    config = result.configuration
    assert config.default_backend is None and reasons(result) == []
    (root,) = config.default_server_locations
    assert (root.path, root.backend, root.access.allow) == ("/", "default.api.80", ("10.0.0.0/8",))


def test_resource_backends_are_reported_and_skipped():
    item = {"path": "/r", "pathType": "Prefix",
            "backend": {"resource": {"apiGroup": "k8s.example.com", "kind": "StorageBucket", "name": "b"}}}
    result = translate(ingress(rules=[rule("example.com", item, path("/ok"))]), SERVICES)
    assert reasons(result) == ["ResourceBackendUnsupported"]
    assert set(locations(result, "example.com")) == {("prefix", "/ok")}


def test_default_backend_annotation_serves_when_the_service_has_no_endpoints():
    result = translate(
        ingress(rules=[rule("example.com", path("/a", service="empty"), path("/b", service="web"))],
                annotations={"default-backend": "other"}),
        SERVICES, service("empty"),
    )
    locs = locations(result, "example.com")
    assert locs[("prefix", "/a")].backend == "default.other.80"
    assert locs[("prefix", "/b")].backend == "default.web.80"


# --- determinism and naming -------------------------------------------------------------


def test_equal_snapshots_in_any_order_give_equal_results():
    objects = [
        ingress("a", rules=[rule("example.com", path("/a")), rule("b.example.com", path("/", service="api"))]),
        ingress("b", created="2025-01-01T00:00:00Z", rules=[rule("example.com", path("/a", service="api"), path("/c"))],
                annotations={"server-alias": "www.example.com"}),
        ingress("c", namespace="other", rules=[rule("c.example.com", path("/"))], default_backend=backend("web")),
        *SERVICES, *web("other"), configmap({"keep-alive": "30"}),
        endpoint_slice("web", endpoints=["10.1.0.2"], name="web-second"),
    ]
    results = set()
    texts = set()
    for seed in range(6):
        shuffled = list(objects)
        random.Random(seed).shuffle(shuffled)
        result = translate(*shuffled)
        results.add(result)
        texts.add(json.dumps(routed(result), sort_keys=True) + rendered(result))
    assert len(results) == 1 and len(texts) == 1


def test_backend_names_are_namespace_service_port():
    result = translate(
        ingress(namespace="shop", rules=[rule("example.com", path("/a", service="web", port=80),
                                              path("/b", service="web", port="http"))]),
        web("shop"),
    )
    assert [b.name for b in result.configuration.backends] == ["shop.web.80", "shop.web.http"]
    assert all(b.endpoints for b in result.configuration.backends)


def test_backend_names_never_collide_across_namespaces():
    """Service web-api in adv-team and api in adv-team-web were both
    "adv-team-web-api-80": one tenant's Ingress served the other's pods."""
    result = translate(
        ingress("a", namespace="adv-team", rules=[rule("a.example", path("/", service="web-api"))]),
        ingress("b", namespace="adv-team-web", rules=[rule("b.example", path("/", service="api"))]),
        web("adv-team", name="web-api", ips=("10.1.0.1",)),
        web("adv-team-web", name="api", ips=("10.2.0.2",)),
    )
    config = result.configuration
    a, b = locations(result, "a.example")[("prefix", "/")].backend, locations(result, "b.example")[("prefix", "/")].backend
    assert (a, b) == ("adv-team.web-api.80", "adv-team-web.api.80")
    assert [e.address for e in config.backend(a).endpoints] == ["10.1.0.1"]
    assert [e.address for e in config.backend(b).endpoints] == ["10.2.0.2"]


def test_spec_default_backend_keeps_its_ingress_annotations():
    result = translate(
        ingress("app", rules=[rule("example.com", path("/a"))], default_backend=backend("api"),
                annotations={"whitelist-source-range": "10.0.0.0/8"}),
        SERVICES,
    )
    root = locations(result, "example.com")[("prefix", "/")]
    assert root.backend == "default.api.80" and root.access.allow == ("10.0.0.0/8",)
