"""RouteCache: a build that reuses cached route translations equals a fresh
build, over random sequences of changes to routes, Services, grants,
Namespaces and Gateways (in place of the objects, as the informers do)."""

from __future__ import annotations

import copy
import random

import pytest

from platformd.ingress.gateway_input import GatewayOptions, GatewaySnapshot
from platformd.ingress.gateway_lowering import LoweringCache, lower
from platformd.ingress.gateway_translate import RouteCache, build
from tests.ingress.gateway_objects import (
    NOW, backend, gateway, gateway_class, grant, grpc_route, http_route, listener, namespace, path, rule, service,
)

NAMESPACES = ("a", "b", "c")


def _random_route(rng: random.Random, i: int, grpc: bool = False) -> dict:
    ns = rng.choice(NAMESPACES)
    rules = []
    for _ in range(rng.randint(1, 3)):
        refs = [backend(f"svc-{rng.randint(0, 5)}", rng.choice((80, 81)),
                        **({"namespace": rng.choice(NAMESPACES)} if rng.random() < 0.3 else {}),
                        **({"weight": rng.choice((0, 1, 3))} if rng.random() < 0.3 else {}))
                for _ in range(rng.randint(0, 2))]
        extra = {}
        if rng.random() < 0.2:
            extra["filters"] = [{"type": "RequestMirror", "requestMirror": {
                "backendRef": {"name": f"svc-{rng.randint(0, 5)}", "port": 80}}}]
        elif rng.random() < 0.1:
            extra["filters"] = [{"type": "RequestRedirect", "requestRedirect": {"statusCode": 301}}]
        matches = None if grpc else [path(rng.choice(("/", "/a", "/b/c")), rng.choice(("PathPrefix", "Exact")))]
        r = rule(*refs, matches=matches, **extra)
        if not refs:
            r["backendRefs"] = []
        rules.append(r)
    parents = [{"name": rng.choice(("gw", "gw2", "missing")), "namespace": "a",
                **({"sectionName": rng.choice(("http", "other"))} if rng.random() < 0.2 else {})}]
    hostnames = rng.choice((None, [f"h{rng.randint(0, 4)}.example.com"], ["*.example.com"]))
    make = grpc_route if grpc else http_route
    return make(name=f"r{i}", namespace=ns, parents=parents, hostnames=hostnames, rules=rules,
                created=f"2026-01-01T00:00:{rng.randint(0, 5):02d}Z", generation=rng.randint(1, 3))


def _gateway(rng: random.Random, name: str) -> dict:
    allowed = rng.choice(({"namespaces": {"from": "All"}}, {"namespaces": {"from": "Same"}},
                          {"namespaces": {"from": "Selector", "selector": {"matchLabels": {"team": "x"}}}}))
    return gateway(name, "a", listeners=[listener("http", hostname=rng.choice((None, "*.example.com")),
                                                  allowedRoutes=allowed)])


def _services(rng: random.Random) -> dict:
    out = {}
    for ns in NAMESPACES:
        for i in range(6):
            if rng.random() < 0.85:
                out[f"{ns}/svc-{i}"] = service(f"svc-{i}", ns, ports=rng.choice(((80,), (80, 81), (81,))))
    return out


def _mutate(rng: random.Random, state: dict) -> None:
    what = rng.random()
    if what < 0.5:
        routes = state["routes"]
        i = rng.randrange(len(routes) + 1)
        if i == len(routes) or rng.random() < 0.2:
            routes.append(_random_route(rng, state["next"], grpc=rng.random() < 0.2))
            state["next"] += 1
        elif rng.random() < 0.3:
            routes.pop(i)
        else:
            changed = _random_route(rng, 0, grpc=routes[i]["kind"] == "GRPCRoute")
            changed["metadata"] = copy.deepcopy(routes[i]["metadata"])
            if rng.random() < 0.5:
                changed["metadata"]["generation"] += 1
            routes[i] = changed
    elif what < 0.7:
        key = rng.choice(sorted({f"{ns}/svc-{i}" for ns in NAMESPACES for i in range(6)}))
        services = dict(state["services"])
        if key in services and rng.random() < 0.5:
            del services[key]
        else:
            ns, _, name = key.partition("/")
            services[key] = service(name, ns, ports=rng.choice(((80,), (81,), (80, 81))),
                                    app_protocol=rng.choice((None, None, "kubernetes.io/ws")))
        state["services"] = services
    elif what < 0.8:
        state["grants"] = [grant(rng.choice(NAMESPACES), rng.choice(NAMESPACES))] if rng.random() < 0.7 else []
    elif what < 0.9:
        state["namespaces"] = {ns: namespace(ns, **({"team": "x"} if rng.random() < 0.5 else {}))
                               for ns in NAMESPACES}
    else:
        state["gateways"] = [_gateway(rng, "gw"), *([_gateway(rng, "gw2")] if rng.random() < 0.5 else [])]


def _snapshot(state: dict, fresh: bool = False) -> GatewaySnapshot:
    if fresh:  # new objects: a fresh build must not profit from the objects being the same
        state = copy.deepcopy(state)
    routes = state["routes"]
    return GatewaySnapshot(
        gateway_classes=(gateway_class(),), gateways=tuple(state["gateways"]),
        http_routes=tuple(r for r in routes if r["kind"] == "HTTPRoute"),
        grpc_routes=tuple(r for r in routes if r["kind"] == "GRPCRoute"),
        reference_grants=tuple(state["grants"]), services=state["services"], namespaces=state["namespaces"])


@pytest.mark.parametrize("seed", range(8))
def test_cached_build_equals_fresh_build_over_random_changes(seed):
    rng = random.Random(seed)
    state = {"routes": [_random_route(rng, i, grpc=rng.random() < 0.2) for i in range(25)], "next": 25,
             "services": _services(rng), "grants": [], "gateways": [_gateway(rng, "gw")],
             "namespaces": {ns: namespace(ns) for ns in NAMESPACES}}
    options = GatewayOptions(publish_addresses=("192.0.2.1",))
    cache, servers = RouteCache(), LoweringCache()
    for _ in range(60):
        snapshot = _snapshot(state)
        cached = build(snapshot, options, NOW, cache=cache)
        fresh = build(_snapshot(state, fresh=True), options, NOW)
        assert cached == fresh
        # The lowering of the cached table with its cache (Servers found by host identity) equals a fresh one.
        args = dict(http_port=80, https_port=443, services=snapshot.services, slices=lambda key: (), secrets={},
                    now=NOW)
        assert lower(cached.table, cache=servers, **args) == lower(fresh.table, **args)
        _mutate(rng, state)


def test_cache_reuses_unchanged_routes_and_forgets_removed_ones(monkeypatch):
    from platformd.ingress import gateway_translate

    rng = random.Random(1)
    routes = [http_route(f"r{i}", "a", parents=[{"name": "gw", "namespace": "a"}], hostnames=[f"h{i}.example"],
                         rules=[rule(backend("svc-0"))]) for i in range(20)]
    services = {"a/svc-0": service("svc-0", "a")}
    base = dict(gateway_classes=(gateway_class(),), gateways=(_gateway(rng, "gw"),), services=services)
    cache = RouteCache()
    build(GatewaySnapshot(http_routes=tuple(routes), **base), GatewayOptions(), NOW, cache=cache)
    calls = []
    real = gateway_translate.http_rule
    monkeypatch.setattr(gateway_translate, "http_rule", lambda *a: calls.append(a) or real(*a))
    changed = http_route("r3", "a", parents=[{"name": "gw", "namespace": "a"}], hostnames=["h3.example"],
                         rules=[rule(backend("svc-1"))], generation=2)
    routes = [*routes[:3], changed, *routes[4:-1]]
    out = build(GatewaySnapshot(http_routes=tuple(routes), **base), GatewayOptions(), NOW, cache=cache)
    assert len(calls) == 1  # only the changed route's one rule
    assert len(cache._entries) == 19
    assert out == build(GatewaySnapshot(http_routes=tuple(routes), **base), GatewayOptions(), NOW)
    # A Service a route looked up (here: one it did not find) changes: that route is translated again.
    calls.clear()
    services2 = {**services, "a/svc-1": service("svc-1", "a")}
    base2 = {**base, "services": services2}
    out = build(GatewaySnapshot(http_routes=tuple(routes), **base2), GatewayOptions(), NOW, cache=cache)
    assert len(calls) == 1
    assert out == build(GatewaySnapshot(http_routes=tuple(routes), **base2), GatewayOptions(), NOW)


def test_cached_lowering_follows_endpoint_and_service_changes():
    snapshot = _snapshot({"routes": [http_route("r", "a", parents=[{"name": "gw", "namespace": "a"}],
                                                rules=[rule(backend("svc-0"))])],
                          "services": {"a/svc-0": service("svc-0", "a")}, "grants": [],
                          "gateways": [gateway("gw", "a")], "namespaces": {}})
    table = build(snapshot, GatewayOptions(), NOW).table

    def slice_(address, ready=True):
        return {"metadata": {"name": "svc-0-1", "namespace": "a", "labels": {"kubernetes.io/service-name": "svc-0"}},
                "addressType": "IPv4", "ports": [{"name": "", "port": 8080, "protocol": "TCP"}],
                "endpoints": [{"addresses": [address], "conditions": {"ready": ready}}]}
    cache = LoweringCache()
    steps = [({"a/svc-0": service("svc-0", "a")}, (slice_("10.0.0.1"),)),
             ({"a/svc-0": service("svc-0", "a")}, (slice_("10.0.0.1"),)),
             ({"a/svc-0": service("svc-0", "a")}, (slice_("10.0.0.2"),)),
             ({"a/svc-0": service("svc-0", "a")}, (slice_("10.0.0.2", ready=False),)),
             ({"a/svc-0": service("svc-0", "a", ports=(81,))}, (slice_("10.0.0.2"),)),
             ({}, (slice_("10.0.0.2"),)),
             ({"a/svc-0": service("svc-0", "a")}, ())]
    seen = set()
    for services, found in steps:
        args = dict(http_port=80, https_port=443, services=services, slices=lambda key, found=found: found,
                    secrets={}, now=NOW)
        cached, fresh = lower(table, cache=cache, **args), lower(table, **args)
        assert cached == fresh
        seen.add(cached.backends)
    assert len(seen) >= 3  # the steps did change the endpoints
