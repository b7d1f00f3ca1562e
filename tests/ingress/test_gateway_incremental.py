"""gateway_incremental.apply: a sequence of random changes applied one at a
time (routes added, changed, deleted; Services and EndpointSlices changed;
now and then a Gateway, grant or Namespace change, which builds in full)
gives exactly the translation and lowering of a fresh full build."""

from __future__ import annotations

import copy
import random

import pytest

from platformd.ingress import gateway_incremental as inc
from platformd.ingress.gateway_dataplane import extend, extended
from platformd.ingress.gateway_input import GatewayOptions, GatewaySnapshot
from platformd.ingress.gateway_lowering import LoweringCache, lower
from platformd.ingress.gateway_translate import GRPC_ROUTE, HTTP_ROUTE, RouteCache, build
from platformd.ingress.model import Backend, Configuration, Location, Server
from tests.helpers.certs import self_signed
from tests.ingress.gateway_objects import (
    NOW, backend, gateway, gateway_class, grant, http_route, https_listener, listener, namespace, rule, service,
    tls_secret,
)
from tests.ingress.test_gateway_routecache import NAMESPACES, _random_route, _services

OPTIONS = GatewayOptions(publish_addresses=("192.0.2.1",), listener_ports={8080: 18080},
                         address_pool=())


def _key(obj: dict) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def _slice(service_key: str, address: str) -> dict:
    ns, _, name = service_key.partition("/")
    return {"metadata": {"name": f"{name}-1", "namespace": ns, "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": [{"name": "", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}]}


@pytest.fixture(scope="module")
def secrets(tmp_path_factory) -> dict[str, dict]:
    return {"a/cert": tls_secret("cert", *self_signed("*.example.com", tmp_path_factory.mktemp("certs")), "a")}


def _gateways(rng: random.Random) -> list[dict]:
    """One Gateway on the shared ports (HTTP, and HTTPS now and then),
    sometimes a second one with a listener on a mapped port."""
    allowed = rng.choice(({"namespaces": {"from": "All"}}, {"namespaces": {"from": "Same"}},
                          {"namespaces": {"from": "Selector", "selector": {"matchLabels": {"team": "x"}}}}))
    listeners = [listener("http", hostname=rng.choice((None, "*.example.com", None)), allowedRoutes=allowed)]
    if rng.random() < 0.5:
        listeners.append(https_listener(hostname=rng.choice((None, "*.example.com", "h2.example.com")),
                                        allowedRoutes=allowed))
    gateways = [gateway("gw", "a", listeners=listeners)]
    if rng.random() < 0.4:
        gateways.append(gateway("gw2", "a", listeners=[
            listener("other", port=8080, hostname=rng.choice((None, "h1.example.com")),
                     allowedRoutes={"namespaces": {"from": "All"}})]))
    return gateways


class _World:
    """The objects as the informers hold them, and a change log like the handlers'."""

    def __init__(self, rng: random.Random, secrets: dict[str, dict]) -> None:
        self.rng, self.secrets = rng, secrets
        self.routes: dict[tuple[str, str], dict] = {}
        for i in range(30):
            self._put(_random_route(rng, i, grpc=rng.random() < 0.2))
        self.next = 30
        self.services = _services(rng)
        self.slices = {key: (_slice(key, f"10.0.0.{rng.randint(1, 9)}"),) for key in self.services}
        self.grants: list[dict] = []
        self.gateways = _gateways(rng)
        self.namespaces = {ns: namespace(ns) for ns in NAMESPACES}
        self.changes = inc.Changes()

    def _put(self, route: dict) -> tuple[str, str]:
        name = (route["kind"], _key(route))
        self.routes[name] = route
        return name

    def mutate(self) -> None:
        rng, what = self.rng, self.rng.random()
        if what < 0.55:
            names = sorted(self.routes)
            if not names or rng.random() < 0.3:
                route = _random_route(rng, self.next, grpc=rng.random() < 0.2)
                self.next += 1
            elif rng.random() < 0.3:
                name = rng.choice(names)
                del self.routes[name]
                self.changes.routes.add(name)
                return
            else:
                old = self.routes[rng.choice(names)]
                route = _random_route(rng, 0, grpc=old["kind"] == GRPC_ROUTE)
                route["metadata"] = copy.deepcopy(old["metadata"])
                route["metadata"]["generation"] += rng.random() < 0.5
            self.changes.routes.add(self._put(route))
        elif what < 0.75:
            key = rng.choice(sorted({f"{ns}/svc-{i}" for ns in NAMESPACES for i in range(6)}))
            ns, _, name = key.partition("/")
            if key in self.services and rng.random() < 0.4:
                del self.services[key]
            else:
                self.services[key] = service(name, ns, ports=rng.choice(((80,), (81,), (80, 81))),
                                             app_protocol=rng.choice((None, None, "kubernetes.io/ws")))
            self.changes.services.add(key)
        elif what < 0.9:
            key = rng.choice(sorted(self.services) or ["a/svc-0"])
            self.slices[key] = (_slice(key, f"10.0.1.{rng.randint(1, 9)}"),) if rng.random() < 0.8 else ()
            self.changes.slices.add(key)
        else:
            kind = rng.choice(("grant", "namespace", "gateway"))
            if kind == "grant":
                self.grants = [grant(rng.choice(NAMESPACES), rng.choice(NAMESPACES))] if rng.random() < 0.7 else []
            elif kind == "namespace":
                self.namespaces = {ns: namespace(ns, **({"team": "x"} if rng.random() < 0.5 else {}))
                                   for ns in NAMESPACES}
            else:
                self.gateways = _gateways(rng)
            self.changes.everything = True

    def snapshot(self, fresh: bool = False) -> GatewaySnapshot:
        routes = list(self.routes.values())
        state = (routes, self.services, self.grants, self.gateways, self.namespaces)
        if fresh:  # new objects: the fresh build must not profit from objects being the same
            state = copy.deepcopy(state)
        routes, services, grants, gateways, namespaces = state
        return GatewaySnapshot(
            gateway_classes=(gateway_class(),), gateways=tuple(gateways),
            http_routes=tuple(r for r in routes if r["kind"] == HTTP_ROUTE),
            grpc_routes=tuple(r for r in routes if r["kind"] == GRPC_ROUTE),
            reference_grants=tuple(grants), services=services, namespaces=namespaces, secrets=self.secrets)

    def sources(self) -> inc.Sources:
        return inc.Sources(route=lambda kind, key: self.routes.get((kind, key)), services=self.services,
                           slices=lambda key: self.slices.get(key, ()), secrets=self.secrets, now=NOW)


def _lower(table, world: _World, cache=None):
    return lower(table, http_port=80, https_port=443, services=world.services,
                 slices=lambda key: world.slices.get(key, ()), secrets=world.secrets, now=NOW, cache=cache)


def _ingress_configuration() -> Configuration:
    """What the Ingresses serve beside the routes: a host the routes also
    have, a host with an alias some route's host name is, their backends."""
    def server(host: str, **extra) -> Server:
        return Server(hostname=host, locations=(Location(path="/", backend=f"a-ing-{host[:2]}-80"),), **extra)
    return Configuration(servers=(server("h1.example.com"), server("ingress.example", aliases=("h3.example.com",))),
                         backends=(Backend("a-ing-h1-80"), Backend("a-ing-in-80")))


@pytest.mark.parametrize("seed", range(10))
def test_incremental_equals_fresh_build_over_random_changes(seed, secrets):
    world = _World(random.Random(seed), secrets)
    routes_cache, servers_cache = RouteCache(), LoweringCache()
    translation = build(world.snapshot(), OPTIONS, NOW, cache=routes_cache)
    lowered = _lower(translation.table, world, servers_cache)
    ingress = _ingress_configuration()
    merged = extended(ingress, lowered)
    incremental = 0
    for _ in range(80):
        world.mutate()
        changes, world.changes = world.changes, inc.Changes()
        result = inc.apply(translation, lowered, changes, OPTIONS, world.sources(), routes_cache, servers_cache)
        if result is None:
            assert changes.everything
            translation = build(world.snapshot(), OPTIONS, NOW, cache=routes_cache)
            lowered = _lower(translation.table, world, servers_cache)
        else:
            translation, lowered = result
            incremental += 1
        fresh = build(world.snapshot(fresh=True), OPTIONS, NOW)
        assert translation == fresh
        assert lowered == _lower(fresh.table, world)
        # What the data plane gets: merged with the Ingress configuration (spliced where it can be).
        merged = extended(ingress, lowered, merged)
        assert (merged.result, merged.left_out) == extend(ingress, _lower(fresh.table, world))
    assert incremental > 50  # the sequence did exercise the incremental path


def _built(routes: dict, services: dict):
    """A Gateway "gw" in namespace a with ``routes`` and ``services``, built and
    lowered in full with fresh caches; and the ``Sources`` reading those dicts
    (a test edits them, then applies the change incrementally)."""
    snapshot = GatewaySnapshot(gateway_classes=(gateway_class(),), gateways=(gateway("gw", "a"),),
                               http_routes=tuple(routes.values()), services=services)
    routes_cache, servers_cache = RouteCache(), LoweringCache()
    translation = build(snapshot, GatewayOptions(), NOW, cache=routes_cache)
    lowered = lower(translation.table, http_port=80, https_port=443, services=services, slices=lambda k: (),
                    secrets={}, now=NOW, cache=servers_cache)
    sources = inc.Sources(route=lambda kind, key: routes.get((kind, key)), services=services,
                          slices=lambda k: (), secrets={}, now=NOW)
    return translation, lowered, sources, routes_cache, servers_cache


def test_only_the_changed_route_and_the_readers_of_a_changed_service_are_translated(monkeypatch):
    from platformd.ingress import gateway_translate

    routes = {(HTTP_ROUTE, f"a/r{i}"): http_route(f"r{i}", "a", parents=[{"name": "gw", "namespace": "a"}],
                                                   hostnames=[f"h{i}.example"], rules=[rule(backend(f"svc-{i % 3}"))])
              for i in range(20)}
    services = {f"a/svc-{i}": service(f"svc-{i}", "a") for i in range(3)}
    translation, lowered, sources, routes_cache, servers_cache = _built(routes, services)
    calls = []
    real = gateway_translate.http_rule
    monkeypatch.setattr(gateway_translate, "http_rule", lambda *a: calls.append(a) or real(*a))
    routes[(HTTP_ROUTE, "a/r3")] = http_route("r3", "a", parents=[{"name": "gw", "namespace": "a"}],
                                              hostnames=["h3.example"], rules=[rule(backend("svc-2"))], generation=2)
    translation2, lowered2 = inc.apply(translation, lowered, inc.Changes(routes={(HTTP_ROUTE, "a/r3")}),
                                       GatewayOptions(), sources, routes_cache, servers_cache)
    assert len(calls) == 1
    # Only h3's Server is new; every other one is the very same object.
    new = [s for s in lowered2.servers if not any(s is old for old in lowered.servers)]
    assert [s.hostname for s in new] == ["h3.example"]
    calls.clear()
    services["a/svc-0"] = service("svc-0", "a", ports=(81,))
    translation3, _ = inc.apply(translation2, lowered2, inc.Changes(services={"a/svc-0"}), GatewayOptions(),
                                sources, routes_cache, servers_cache)
    assert len(calls) == 6  # r0, r6, r9, r12, r15, r18 name svc-0 (r3 no longer does)
    assert translation3 == build(GatewaySnapshot(gateway_classes=(gateway_class(),), gateways=(gateway("gw", "a"),),
                                                 http_routes=tuple(routes.values()), services=services),
                                 GatewayOptions(), NOW)
    # A Service nobody reads changes nothing: the same pair comes back.
    assert inc.apply(translation3, lowered2, inc.Changes(services={"a/other"}), GatewayOptions(), sources,
                     routes_cache, servers_cache)[0] is translation3


def test_a_deleted_route_is_relowered_not_lowered_in_full(monkeypatch):
    routes = {(HTTP_ROUTE, f"a/r{i}"): http_route(f"r{i}", "a", parents=[{"name": "gw", "namespace": "a"}],
                                                   hostnames=[f"h{i}.example"]) for i in range(5)}
    services = {"a/svc": service("svc", "a")}
    translation, lowered, sources, routes_cache, servers_cache = _built(routes, services)
    del routes[(HTTP_ROUTE, "a/r3")]
    monkeypatch.setattr(inc, "lower", lambda *a, **kw: pytest.fail("lowered in full"))
    _, after = inc.apply(translation, lowered, inc.Changes(routes={(HTTP_ROUTE, "a/r3")}), GatewayOptions(),
                         sources, routes_cache, servers_cache)
    assert [s.hostname for s in after.servers] == [s.hostname for s in lowered.servers if s.hostname != "h3.example"]
    assert all(any(s is old for old in lowered.servers) for s in after.servers)  # the others kept as they were


# --- the controller: route and endpoint changes take the incremental path -----------------------------


class _Inner:
    """The Ingress controller's data plane, as the GatewayPlane sees it: every submit succeeds."""

    def submit(self, config):
        return lambda superseded=None: None


def test_controller_applies_route_and_endpoint_changes_without_a_full_build(fake_api, monkeypatch, tmp_path):
    import threading

    from platformd.common import kubeclient, resources
    from platformd.common.apisource import ApiSource
    from platformd.common.informer import InformerFactory
    from platformd.common.store import index_endpointslice_by_service
    from platformd.ingress import gateway_controller
    from platformd.ingress.gateway_controller import GatewayController, Serving
    from platformd.ingress.gateway_dataplane import GatewayPlane
    from tests.helpers.waiting import wait_for
    from tests.ingress.test_gateway_controller import _clean
    from tests.ingress_e2e import objects as o

    certificate = self_signed("*.example", tmp_path)
    full = []
    real_build = gateway_controller.build
    monkeypatch.setattr(gateway_controller, "build", lambda *a, **k: full.append(1) or real_build(*a, **k))
    fake_api.create(_clean(gateway_class()))
    fake_api.create(_clean(gateway("gw", "default")))
    for name in ("web", "api"):
        fake_api.create(o.service(name, port=80))
        fake_api.create(o.endpoint_slice(name, ["10.0.0.1"], port=8080))
    fake_api.create(_clean(http_route("one", "default", hostnames=["one.example"], rules=[rule(backend("web"))])))
    api = kubeclient.load(str(fake_api.kubeconfig))
    source = ApiSource(api)
    ingress_factory, factory = InformerFactory(source), InformerFactory(source)
    plane = GatewayPlane(_Inner())
    controller = GatewayController(
        factory, GatewayOptions(), services=ingress_factory.informer(resources.SERVICES),
        secrets=ingress_factory.informer(resources.TLS_SECRETS), publish_addresses=lambda: ("192.0.2.1",),
        serving=Serving(plane, lambda: None, ingress_factory.informer(resources.ENDPOINT_SLICES)))
    ingress_factory.start()
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()

    def published():
        return plane._published[1]

    def fresh():
        translation = build(controller.snapshot(), GatewayOptions(publish_addresses=("192.0.2.1",)), NOW)
        slices = ingress_factory.informer(resources.ENDPOINT_SLICES).store
        return translation, lower(translation.table, http_port=80, https_port=443,
                                  services=controller.snapshot().services, secrets={}, now=NOW,
                                  slices=lambda key: tuple(s for s in slices.list()
                                                           if key in index_endpointslice_by_service(s)))
    try:
        wait_for(lambda: [s.hostname for s in published().servers] == ["one.example"], message="first sync")
        assert len(full) == 1
        fake_api.create(_clean(http_route("two", "default", hostnames=["two.example"], rules=[rule(backend("api"))])))
        wait_for(lambda: [s.hostname for s in published().servers] == ["one.example", "two.example"],
                 message="the new route")
        moved = fake_api.get("EndpointSlice", "default", "api-1")
        moved["endpoints"][0]["addresses"] = ["10.0.0.2"]
        fake_api.update(moved)
        wait_for(lambda: any(e.address == "10.0.0.2" for b in published().backends for e in b.endpoints),
                 message="the endpoint change")
        fake_api.delete("HTTPRoute", "default", "one")
        wait_for(lambda: [s.hostname for s in published().servers] == ["two.example"], message="the deletion")
        assert len(full) == 1  # none of these was a full build
        translation, lowered = fresh()
        assert controller._built[0] == translation and published() == lowered
        assert controller.translation.http_routes.keys() == {"default/two"}
        # A TLS Secret no Gateway names (an Ingress's, say) builds nothing; a route change after it
        # is still incremental.
        fake_api.create(tls_secret("other", *certificate, "default"))
        secrets = ingress_factory.informer(resources.TLS_SECRETS).store
        wait_for(lambda: secrets.get("default/other"), message="the Secret in the store")
        fake_api.create(_clean(http_route("three", "default", hostnames=["three.example"],
                                          rules=[rule(backend("api"))])))
        wait_for(lambda: "three.example" in [s.hostname for s in published().servers], message="route three")
        assert len(full) == 1
        # A Gateway change builds in full.
        fake_api.update({**fake_api.get("Gateway", "default", "gw"), "spec": {
            "gatewayClassName": "platform", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP",
                                                           "hostname": "*.other"}]}})
        wait_for(lambda: not published().servers, message="the Gateway change")
        assert len(full) == 2
        # So does a change of a Secret a Gateway names.
        fake_api.update({**fake_api.get("Gateway", "default", "gw"), "spec": {
            "gatewayClassName": "platform", "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP"},
                {"name": "https", "port": 443, "protocol": "HTTPS", "tls": {"certificateRefs": [{"name": "cert"}]}}]}})
        wait_for(lambda: len(full) == 3, message="the second Gateway change")
        fake_api.create(tls_secret("cert", *certificate, "default"))
        wait_for(lambda: len(full) == 4, message="the named Secret")
        wait_for(lambda: published().certificates, message="its certificate served")
    finally:
        stop.set()
        thread.join(5)
        ingress_factory.stop()
        api.close()


def test_an_update_that_fails_midway_leaves_nothing_to_update_from(monkeypatch):
    from platformd.ingress import gateway_translate

    route = http_route("r", "a", parents=[{"name": "gw", "namespace": "a"}], rules=[rule(backend("svc-0"))])
    snapshot = GatewaySnapshot(gateway_classes=(gateway_class(),), gateways=(gateway("gw", "a"),),
                               http_routes=(route,), services={"a/svc-0": service("svc-0", "a")})
    cache = RouteCache()
    translation = build(snapshot, GatewayOptions(), NOW, cache=cache)

    def fail(*_):
        raise RuntimeError("midway")
    monkeypatch.setattr(gateway_translate, "http_rule", fail)
    with pytest.raises(RuntimeError):
        gateway_translate.update(translation, {(HTTP_ROUTE, "a/r"): route}, snapshot.services, cache)
    monkeypatch.undo()
    # The table was taken apart: only a full build may follow.
    assert gateway_translate.update(translation, {(HTTP_ROUTE, "a/r"): route}, snapshot.services, cache) is None
