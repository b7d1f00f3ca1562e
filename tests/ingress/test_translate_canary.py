"""Canary Ingresses: alternative backends with a traffic-shaping policy."""

from __future__ import annotations

import pytest

from platformd.ingress import render
from platformd.ingress.model import TrafficShapingPolicy
from tests.ingress.test_translate_fixtures import ingress, locations, path, reasons, rule, translate, web

SERVICES = [*web(), *web(name="web-v2", ips=("10.2.0.1",)), *web(name="web-v3", ips=("10.3.0.1",))]
PRIMARY = ingress("app", rules=[rule("example.com", path("/", service="web"))])


def canary(name="app-canary", service="web-v2", p="/", path_type="Prefix", host="example.com", **annotations):
    ann = {"canary": "true", **{k.replace("_", "-"): str(v) for k, v in annotations.items()}}
    return ingress(name, created="2025-01-01T00:00:00Z", rules=[rule(host, path(p, service=service, path_type=path_type))],
                   annotations=ann)


POLICIES = [
    ({"canary_weight": 30}, TrafficShapingPolicy(weight=30)),
    ({"canary_weight": 3, "canary_weight_total": 10}, TrafficShapingPolicy(weight=3, weight_total=10)),
    ({"canary_by_header": "X-Canary"}, TrafficShapingPolicy(header="X-Canary")),
    ({"canary_by_header": "X-Canary", "canary_by_header_value": "yes please"},
     TrafficShapingPolicy(header="X-Canary", header_value="yes please")),
    ({"canary_by_header": "X-Canary", "canary_by_header_pattern": "^(beta|alpha)[0-9]{1,3}$"},
     TrafficShapingPolicy(header="X-Canary", header_pattern="^(beta|alpha)[0-9]{1,3}$")),
    ({"canary_by_cookie": "canary"}, TrafficShapingPolicy(cookie="canary")),
]


@pytest.mark.parametrize("annotations,policy", POLICIES, ids=[",".join(a) for a, _ in POLICIES])
def test_canary_adds_an_alternative_backend_with_its_policy(annotations, policy):
    result = translate(PRIMARY, canary(**annotations), *SERVICES)
    assert result.problems == ()
    config = result.configuration
    assert set(locations(result, "example.com")) == {("prefix", "/")}  # no location of its own
    assert locations(result, "example.com")[("prefix", "/")].backend == "default.web.80"
    assert config.backend("default.web.80").alternative_backends == ("default.web-v2.80",)
    assert config.backend("default.web-v2.80").traffic_shaping_policy == policy
    payload = {b["name"]: b for b in render.backends_payload(config)}
    assert payload["default.web.80"]["alternative_backends"] == ["default.web-v2.80"]
    assert payload["default.web-v2.80"]["endpoints"] == [{"address": "10.2.0.1", "port": 8080}]


def test_canary_without_primary_is_a_problem():
    result = translate(PRIMARY, canary(p="/other", canary_weight=10), *SERVICES)
    assert reasons(result) == ["CanaryWithoutPrimary"]
    assert result.configuration.backend("default.web.80").alternative_backends == ()
    assert result.configuration.backend("default.web-v2.80") is None


def test_canary_matches_host_path_and_match_type():
    result = translate(PRIMARY, canary(path_type="Exact", canary_weight=10), *SERVICES)
    assert reasons(result) == ["CanaryWithoutPrimary"]


def test_canary_on_the_primary_service_is_a_problem():
    result = translate(PRIMARY, canary(service="web", canary_weight=10), *SERVICES)
    assert reasons(result) == ["CanarySameBackend"]


def test_two_canaries_on_one_primary():
    result = translate(PRIMARY, canary("c1", canary_weight=10), canary("c2", service="web-v3", canary_by_header="X-B"),
                       *SERVICES)
    assert result.problems == ()
    assert result.configuration.backend("default.web.80").alternative_backends == ("default.web-v2.80", "default.web-v3.80")


def test_invalid_canary_is_left_out_and_primary_keeps_serving():
    result = translate(PRIMARY, canary(canary_weight=101), *SERVICES)
    assert reasons(result) == ["InvalidAnnotation"]
    assert result.configuration.backend("default.web.80").alternative_backends == ()
    assert locations(result, "example.com")[("prefix", "/")].backend == "default.web.80"
