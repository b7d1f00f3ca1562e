"""Status bodies from translated status values; hostnames and address pools."""

import pytest

from platformd.ingress import gateway_hostnames as hostnames
from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_addresses import parse_pool
from tests.ingress.gateway_objects import CONTROLLER, gateway, http_route, translate

NOW = "2026-11-24T03:00:00Z"
LATER = "2026-11-24T04:00:00Z"


def test_gateway_status_body_has_conditions_listeners_and_observed_generation():
    t = translate(gateway(generation=4), http_route())
    body = st.render_gateway(t.gateways["default/gw"], gateway(), NOW)
    assert [(c["type"], c["status"], c["reason"], c["observedGeneration"]) for c in body["conditions"]] == [
        ("Accepted", "True", "Accepted", 4), ("Programmed", "True", "Programmed", 4)]
    [listener] = body["listeners"]
    assert listener["name"] == "http" and listener["attachedRoutes"] == 1
    assert listener["supportedKinds"][0] == {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}
    assert all(c["lastTransitionTime"] == NOW for c in listener["conditions"])


def test_unchanged_conditions_keep_their_transition_time_so_the_body_is_equal():
    t = translate(gateway(), http_route())
    first = st.render_gateway(t.gateways["default/gw"], gateway(), NOW)
    again = st.render_gateway(t.gateways["default/gw"], {"status": first}, LATER)
    assert again == first


def test_a_changed_condition_gets_a_new_transition_time():
    t = translate(gateway(), http_route())
    first = st.render_route(t.http_routes["default/route"], http_route(), CONTROLLER, NOW)
    broken = translate(gateway(), http_route(parents=[{"name": "gw", "sectionName": "nope"}]))
    status = broken.http_routes["default/route"]
    # the parentRef differs (sectionName), so it is a new entry: all conditions are new
    after = st.render_route(status, {"status": first}, CONTROLLER, LATER)
    assert [p["parentRef"] for p in after["parents"]] == [{"name": "gw", "sectionName": "nope"}]
    assert after["parents"][0]["conditions"][0]["lastTransitionTime"] == LATER
    flipped = translate(gateway(), http_route(rules=[{"backendRefs": [{"name": "gone", "port": 80}]}]))
    after = st.render_route(flipped.http_routes["default/route"], {"status": first}, CONTROLLER, LATER)
    times = {c["type"]: c["lastTransitionTime"] for c in after["parents"][0]["conditions"]}
    assert times == {"Accepted": NOW, "ResolvedRefs": LATER}


def test_route_status_keeps_other_controllers_parents():
    other = {"parentRef": {"name": "theirs"}, "controllerName": "example.com/other", "conditions": []}
    stale = {"parentRef": {"name": "old"}, "controllerName": CONTROLLER, "conditions": []}
    t = translate(gateway(), http_route())
    body = st.render_route(t.http_routes["default/route"], {"status": {"parents": [other, stale]}}, CONTROLLER, NOW)
    assert [p["parentRef"] for p in body["parents"]] == [{"name": "theirs"}, {"name": "gw"}]


def test_class_status_keeps_other_fields():
    t = translate()
    body = st.render_class(t.classes["platform"], {"status": {"futureField": [{"name": "x"}]}}, NOW)
    assert body["futureField"] == [{"name": "x"}]
    assert [c["type"] for c in body["conditions"]] == ["Accepted", "SupportedVersion"]


# --- hostnames ------------------------------------------------------------------------------------

@pytest.mark.parametrize("pattern, host, expected", [
    ("*.example.com", "a.example.com", True),
    ("*.example.com", "a.b.example.com", True),
    ("*.example.com", "example.com", False),
    ("a.example.com", "a.example.com", True),
    (None, "anything", True),
])
def test_wildcard_matching(pattern, host, expected):
    assert hostnames.matches(pattern, host) is expected


# --- address pool ----------------------------------------------------------------------------------

def test_parse_pool_accepts_lists_and_cidrs():
    assert parse_pool("10.0.0.8/30,10.0.0.1") == ("10.0.0.1", "10.0.0.9", "10.0.0.10")
    assert parse_pool("192.0.2.7/32") == ("192.0.2.7",)
    with pytest.raises(ValueError, match="bad --gateway-address-pool entry 'nope'"):
        parse_pool("nope")
