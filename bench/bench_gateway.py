"""Gateway API translation benchmark: 10,000 HTTPRoutes, each one hostname and two rules.

Run from the repository root: ``.venv/bin/python bench/bench_gateway.py``
(``--routes N``, ``--trials K``). One Gateway (one HTTP listener, routes
from all namespaces), N HTTPRoutes in 100 namespaces, each with one hostname
and two rules (an Exact path and a PathPrefix to two Services), 2N Services.

Prints, per step, the median and worst of ``--trials`` runs:

* ``build``: ``gateway_translate.build`` of the whole snapshot (what a full
  Gateway sync costs);
* ``lower``: ``gateway_lowering.lower`` of that table onto the data plane
  model (the other part of a Gateway sync; endpoints left empty);
* ``render``: the status bodies of every route and the Gateway
  (``gateway_status.render_*`` against objects without status: the first
  sync after a start);
* ``render (unchanged)``: the same against objects that already show it
  (every later sync; the writer then PATCHes nothing);
* memory: RSS after building the objects, and the peak (``VmHWM``).

With ``--changes K`` (needs nginx; ``0`` skips it): route change -> first
request served, through a real nginx holding all N routes (lowered and merged
into a Configuration as the Ingress controller does, applied with
``DataPlane.apply``). Each change creates one more HTTPRoute (a new hostname,
a rule with a header match and a weighted rule); the latency ends at the
first request to it answered 200 and is reported twice: from the start of
the Gateway sync (``build`` + ``lower`` + merge + apply: what the controller
does for every change today) and from the start of the apply (the data
plane's part). Also the reload count over all changes (target 0) and the
per-change payload.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from platformd.ingress import gateway_status as st  # noqa: E402
from platformd.ingress.gateway_input import GatewayOptions, GatewaySnapshot  # noqa: E402
from platformd.ingress.gateway_lowering import lower  # noqa: E402
from platformd.ingress.gateway_translate import RouteCache, build  # noqa: E402

GROUP = "gateway.networking.k8s.io"
CONTROLLER = "platform.io/gateway-controller"


def _meta(name, namespace=None, i=0):
    meta = {"name": name, "generation": 1, "creationTimestamp": f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z"}
    if namespace:
        meta["namespace"] = namespace
    return meta


def objects(n: int) -> GatewaySnapshot:
    routes, services = [], {}
    for i in range(n):
        ns = f"team-{i % 100}"
        for suffix in ("a", "b"):
            services[f"{ns}/svc-{i}-{suffix}"] = {"metadata": _meta(f"svc-{i}-{suffix}", ns),
                                                  "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}}
        routes.append({"apiVersion": f"{GROUP}/v1", "kind": "HTTPRoute", "metadata": _meta(f"route-{i}", ns, i),
                       "spec": {"parentRefs": [{"group": GROUP, "kind": "Gateway", "name": "gw", "namespace": "infra"}],
                                "hostnames": [f"host-{i}.example.com"],
                                "rules": [
                                    {"matches": [{"path": {"type": "Exact", "value": "/api"}}],
                                     "backendRefs": [{"group": "", "kind": "Service", "name": f"svc-{i}-a",
                                                      "port": 80, "weight": 1}]},
                                    {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                                     "backendRefs": [{"group": "", "kind": "Service", "name": f"svc-{i}-b",
                                                      "port": 80, "weight": 1}]}]}})
    gateway = {"apiVersion": f"{GROUP}/v1", "kind": "Gateway", "metadata": _meta("gw", "infra"),
               "spec": {"gatewayClassName": "platform", "listeners": [
                   {"name": "http", "port": 80, "protocol": "HTTP",
                    "allowedRoutes": {"namespaces": {"from": "All"}}}]}}
    cls = {"apiVersion": f"{GROUP}/v1", "kind": "GatewayClass", "metadata": _meta("platform"),
           "spec": {"controllerName": CONTROLLER}}
    return GatewaySnapshot(gateway_classes=(cls,), gateways=(gateway,), http_routes=tuple(routes), services=services)


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _timed(fn, trials: int) -> tuple[float, float, object]:
    times, result = [], None
    for _ in range(trials):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), max(times), result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--routes", type=int, default=10_000)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--changes", type=int, default=50, help="route changes to time through nginx (0: skip)")
    args = p.parse_args()
    snapshot = objects(args.routes)
    rss_objects = _status_kb("VmRSS") / 1024
    options = GatewayOptions(publish_addresses=("192.0.2.1",))
    med, worst, translation = _timed(lambda: build(snapshot, options, time.time()), args.trials)
    hosts = len(translation.table.hosts)
    entries = sum(len(h.entries) for h in translation.table.hosts)
    print(f"HTTPRoutes {args.routes}: {hosts} hosts, {entries} entries")
    print(f"build               median {med * 1000:8.1f} ms   worst {worst * 1000:8.1f} ms")
    med, worst, lowered = _timed(lambda: lower(translation.table, http_port=80, https_port=443,
                                              services=snapshot.services, slices=lambda key: (), secrets={},
                                              now=time.time()), args.trials)
    print(f"lower               median {med * 1000:8.1f} ms   worst {worst * 1000:8.1f} ms   "
          f"{len(lowered.servers)} servers, {len(lowered.skipped)} hosts left out")
    now = "2026-11-24T00:00:00Z"
    by_key = {f"{r['metadata']['namespace']}/{r['metadata']['name']}": r for r in snapshot.http_routes}

    def render(objs):
        return {k: st.render_route(s, objs[k], CONTROLLER, now) for k, s in translation.http_routes.items()}
    med, worst, bodies = _timed(lambda: render(by_key), args.trials)
    print(f"render              median {med * 1000:8.1f} ms   worst {worst * 1000:8.1f} ms")
    shown = {k: {**r, "status": bodies[k]} for k, r in by_key.items()}
    med, worst, again = _timed(lambda: render(shown), args.trials)
    unchanged = sum(again[k] == shown[k]["status"] for k in shown)
    print(f"render (unchanged)  median {med * 1000:8.1f} ms   worst {worst * 1000:8.1f} ms   "
          f"{unchanged}/{len(shown)} equal (no PATCH)")
    print(f"memory: RSS with objects {rss_objects:.0f} MB, peak {_status_kb('VmHWM') / 1024:.0f} MB")
    if args.changes:
        bench_route_changes(snapshot, options, args.changes)
    return 0


def _new_route(i: int) -> dict:
    ns = "team-new"
    return {"apiVersion": f"{GROUP}/v1", "kind": "HTTPRoute", "metadata": _meta(f"new-{i}", ns, 3599),
            "spec": {"parentRefs": [{"group": GROUP, "kind": "Gateway", "name": "gw", "namespace": "infra"}],
                     "hostnames": [f"new-{i}.example.com"],
                     "rules": [
                         {"matches": [{"path": {"type": "PathPrefix", "value": "/"},
                                       "headers": [{"name": "x-change", "value": str(i)}]}],
                          "backendRefs": [{"name": "svc-0-a", "namespace": "team-0", "port": 80, "weight": 1}]},
                         {"matches": [{"path": {"type": "PathPrefix", "value": "/w"}}],
                          "backendRefs": [{"name": "svc-0-a", "namespace": "team-0", "port": 80, "weight": 3},
                                          {"name": "svc-0-b", "namespace": "team-0", "port": 80, "weight": 1}]}]}}


def _percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[max(0, int(round(len(ordered) * 0.99)) - 1)]
    return f"p50 {statistics.median(ordered):7.1f} ms   p99 {p99:7.1f} ms   max {ordered[-1]:7.1f} ms"


def bench_route_changes(snapshot: GatewaySnapshot, options: GatewayOptions, changes: int) -> None:
    """Route change -> first request served through nginx (see the module docstring)."""
    import http.client
    from dataclasses import replace

    from platformd.ingress.gateway_dataplane import extend
    from platformd.ingress.gateway_lowering import LoweringCache
    from platformd.ingress.model import Configuration
    from tests.helpers.backends import NginxBackend
    from tests.ingress.conftest import DataPlaneHarness, lua_ready

    if not lua_ready():
        print("route changes: lua/ modules or nginx missing; skipped")
        return
    grant = {"apiVersion": f"{GROUP}/v1beta1", "kind": "ReferenceGrant", "metadata": _meta("all", "team-0"),
             "spec": {"from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": "team-new"}],
                      "to": [{"group": "", "kind": "Service"}]}}
    snapshot = replace(snapshot, reference_grants=(grant,))
    backend = NginxBackend("fast")
    harness = DataPlaneHarness()

    cache = LoweringCache()  # as GatewayController keeps it: unchanged hosts keep their Server objects
    routes_cache = RouteCache()  # as GatewayController keeps it: unchanged routes are not translated again

    def configuration(snap: GatewaySnapshot) -> Configuration:
        table = build(snap, options, time.time(), cache=routes_cache).table
        lowered = lower(table, http_port=80, https_port=443, services=snap.services, slices=slices,
                        secrets={}, now=time.time(), cache=cache)
        return extend(Configuration(), lowered)[0]

    def slices(key: str) -> tuple[dict, ...]:  # every Service: one ready endpoint, the bench backend
        namespace, _, name = key.partition("/")
        return ({"metadata": {"name": f"{name}-1", "namespace": namespace,
                              "labels": {"kubernetes.io/service-name": name}},
                 "addressType": "IPv4", "ports": [{"name": "", "port": backend.endpoint.port, "protocol": "TCP"}],
                 "endpoints": [{"addresses": [backend.endpoint.address], "conditions": {"ready": True}}]},)

    def status(host: str, header: str) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", harness.http_port, timeout=5)
        try:
            conn.request("GET", "/", headers={"Host": host, "x-change": header, "Connection": "close"})
            response = conn.getresponse()
            response.read()
            return response.status
        finally:
            conn.close()

    try:
        started = time.perf_counter()
        result = harness.apply(configuration(snapshot))
        assert result.ok, result.error
        print(f"route changes: first apply of {len(snapshot.http_routes)} routes "
              f"{(time.perf_counter() - started):.1f} s")
        reloads = harness.registry.get_sample_value("nginx_ingress_controller_success")
        full, plane, sync = [], [], []
        routes = snapshot.http_routes
        for i in range(changes):
            routes = (*routes, _new_route(i))
            start = time.perf_counter()
            desired = configuration(replace(snapshot, http_routes=routes))
            applying = time.perf_counter()
            result = harness.apply(desired)
            assert result.ok and result.kind == "dynamic", result
            host = f"new-{i}.example.com"
            while status(host, str(i)) != 200:
                if time.perf_counter() - start > 30:
                    raise RuntimeError(f"{host} not served within 30 s")
            done = time.perf_counter()
            assert status(host, "other") == 404  # the header match holds
            full.append((done - start) * 1000)
            plane.append((done - applying) * 1000)
            sync.append((applying - start) * 1000)
        now = harness.registry.get_sample_value("nginx_ingress_controller_success")
        print(f"route change -> first request, {changes} new HTTPRoutes on {len(snapshot.http_routes):,}:")
        print(f"  from the Gateway sync  {_percentiles(full)}   (of which build+lower+merge {_percentiles(sync)})")
        print(f"  from the apply         {_percentiles(plane)}")
        print(f"  reloads: {now - reloads:.0f}")
    finally:
        harness.close()
        backend.stop()


if __name__ == "__main__":
    sys.exit(main())
