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

Not measured here: push to the data plane and route change -> first request
(they are the Ingress controller's sync with the lowered Servers merged in;
meaningful once the reload-free router is merged, see docs/gateway-api.md).
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
from platformd.ingress.gateway_translate import build  # noqa: E402

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
