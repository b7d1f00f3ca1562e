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
request served, through a real nginx holding all N routes, K times each of:
a new HTTPRoute (a new hostname, a rule with a header match and a weighted
rule), a changed rule (its header value) and the route deleted. Each change
goes through the controller's sync as it runs it (``gateway_incremental.apply``
of the recorded change, then GatewayPlane's merge into the Ingress
Configuration, ``extended``) and
``DataPlane.apply``; the latency ends at the first request that shows it
(200 with the new header, 404 once deleted) and is reported from the start
of the Gateway sync and from the start of the apply (the data plane's part).
Also the reload count over all changes (target 0).

``--live``: the whole product path instead. The real ``platformd ingress``
runs in a child process (its own nginx) against the project's fake API server
(in this process), holding N HTTPRoutes, 2N Services and 2N EndpointSlices;
each change is written to the API and timed from that write to the first
request that shows it, and from the start of the Gateway sync that took it
(the child traces its syncs, ``BENCH_TRACE``). Also the controller's RSS when ready and at the end,
and its CPU time per change (all its threads; unlike the latencies, not
inflated by other load on the machine). ``BENCH_TRACE=file`` keeps the child's
trace (each Gateway sync, Ingress sync, status pass and garbage collection,
with wall-clock times), ``BENCH_PROFILE=dir`` a cProfile of each Ingress sync.
``--during-first-status``: the changes start as soon as the first route is
served, while the first status pass writes all N statuses (~10 s at 10,000).
"""

from __future__ import annotations

import argparse
import bisect
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_ingress

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
    p.add_argument("--live", action="store_true",
                   help="only the live run: the real controller against the fake API server")
    p.add_argument("--during-first-status", action="store_true",
                   help="live: start the changes at once, while the first status pass writes every route")
    args = p.parse_args()
    if args.live:
        live(args.routes, args.changes, settle=not args.during_first_status)
        return 0
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


def _new_route(i: int, header: str | None = None) -> dict:
    ns = "team-new"
    return {"apiVersion": f"{GROUP}/v1", "kind": "HTTPRoute", "metadata": _meta(f"new-{i}", ns, 3599),
            "spec": {"parentRefs": [{"group": GROUP, "kind": "Gateway", "name": "gw", "namespace": "infra"}],
                     "hostnames": [f"new-{i}.example.com"],
                     "rules": [
                         {"matches": [{"path": {"type": "PathPrefix", "value": "/"},
                                       "headers": [{"name": "x-change", "value": header or str(i)}]}],
                          "backendRefs": [{"name": "svc-0-a", "namespace": "team-0", "port": 80, "weight": 1}]},
                         {"matches": [{"path": {"type": "PathPrefix", "value": "/w"}}],
                          "backendRefs": [{"name": "svc-0-a", "namespace": "team-0", "port": 80, "weight": 3},
                                          {"name": "svc-0-b", "namespace": "team-0", "port": 80, "weight": 1}]}]}}


def _grant() -> dict:
    return {"apiVersion": f"{GROUP}/v1beta1", "kind": "ReferenceGrant", "metadata": _meta("all", "team-0"),
            "spec": {"from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": "team-new"}],
                     "to": [{"group": "", "kind": "Service"}]}}


#: The route changes timed, in this order on route new-<i>: (kind, the route
#: object after it (None: deleted), the x-change header of the probe, the
#: status that shows it is served).
def _change_steps(i: int) -> list[tuple[str, dict | None, str, int]]:
    return [("new route", _new_route(i), str(i), 200),
            ("changed rule", _new_route(i, header=f"{i}b"), f"{i}b", 200),
            ("deleted route", None, f"{i}b", 404)]


def _percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[max(0, int(round(len(ordered) * 0.99)) - 1)]
    return f"p50 {statistics.median(ordered):7.1f} ms   p99 {p99:7.1f} ms   max {ordered[-1]:7.1f} ms"


def _probe(port: int, host: str, header: str) -> int:
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/", headers={"Host": host, "x-change": header, "Connection": "close"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def bench_route_changes(snapshot: GatewaySnapshot, options: GatewayOptions, changes: int) -> None:
    """Route change -> first request served through nginx (see the module docstring)."""
    from dataclasses import replace

    from platformd.ingress import gateway_incremental as incremental
    from platformd.ingress.gateway_dataplane import extended
    from platformd.ingress.gateway_lowering import LoweringCache
    from platformd.ingress.model import Configuration
    from tests.helpers.backends import NginxBackend
    from tests.ingress.conftest import DataPlaneHarness, lua_ready

    if not lua_ready():
        print("route changes: lua/ modules or nginx missing; skipped")
        return
    snapshot = replace(snapshot, reference_grants=(_grant(),))
    backend = NginxBackend("fast")
    harness = DataPlaneHarness()

    # As GatewayController keeps them: unchanged routes are not translated
    # again, unchanged hosts keep their Server objects.
    routes_cache, servers_cache = RouteCache(), LoweringCache()
    routes = {("HTTPRoute", f"{r['metadata']['namespace']}/{r['metadata']['name']}"): r for r in snapshot.http_routes}

    def slices(key: str) -> tuple[dict, ...]:  # every Service: one ready endpoint, the bench backend
        namespace, _, name = key.partition("/")
        return ({"metadata": {"name": f"{name}-1", "namespace": namespace,
                              "labels": {"kubernetes.io/service-name": name}},
                 "addressType": "IPv4", "ports": [{"name": "", "port": backend.endpoint.port, "protocol": "TCP"}],
                 "endpoints": [{"addresses": [backend.endpoint.address], "conditions": {"ready": True}}]},)

    sources = incremental.Sources(route=lambda kind, key: routes.get((kind, key)), services=snapshot.services,
                                  slices=slices, secrets={}, now=time.time())
    try:
        started = time.perf_counter()
        translation = build(snapshot, options, time.time(), cache=routes_cache)
        lowered = lower(translation.table, http_port=80, https_port=443, services=snapshot.services, slices=slices,
                        secrets={}, now=time.time(), cache=servers_cache)
        ingress = Configuration()  # what the Ingress controller re-submits: the same object each time
        merged = extended(ingress, lowered)
        result = harness.apply(merged.result)
        assert result.ok, result.error
        print(f"route changes: first sync and apply of {len(snapshot.http_routes)} routes "
              f"{(time.perf_counter() - started):.1f} s")
        reloads = harness.registry.get_sample_value("nginx_ingress_controller_success")
        full, plane, sync = [], [], []
        by_kind: dict[str, list[float]] = {}
        for i in range(changes):
            for kind, route, header, expected in _change_steps(i):
                key = ("HTTPRoute", f"team-new/new-{i}")
                if route is None:
                    del routes[key]
                else:
                    routes[key] = route
                start = time.perf_counter()
                # The controller's sync for one recorded route change (gateway_controller.sync).
                translation, lowered = incremental.apply(translation, lowered, incremental.Changes(routes={key}),
                                                         options, sources, routes_cache, servers_cache)
                merged = extended(ingress, lowered, merged)  # GatewayPlane.submit's merge
                desired = merged.result
                applying = time.perf_counter()
                result = harness.apply(desired)
                assert result.ok and result.kind == "dynamic", result
                host = f"new-{i}.example.com"
                while _probe(harness.http_port, host, header) != expected:
                    if time.perf_counter() - start > 30:
                        raise RuntimeError(f"{kind} on {host} not served within 30 s")
                done = time.perf_counter()
                if route is not None:
                    assert _probe(harness.http_port, host, "other") == 404  # the header match holds
                full.append((done - start) * 1000)
                plane.append((done - applying) * 1000)
                sync.append((applying - start) * 1000)
                by_kind.setdefault(kind, []).append((done - start) * 1000)
        now = harness.registry.get_sample_value("nginx_ingress_controller_success")
        print(f"route change -> first request, {changes} x (new route, changed rule, deleted route) "
              f"on {len(snapshot.http_routes):,} HTTPRoutes:")
        print(f"  from the Gateway sync  {_percentiles(full)}")
        print(f"    of which the sync    {_percentiles(sync)}   (incremental translate + lower + merge)")
        print(f"  from the apply         {_percentiles(plane)}")
        for kind, values in by_kind.items():
            print(f"  {kind:<21}  {_percentiles(values)}")
        print(f"  reloads: {now - reloads:.0f}")
    finally:
        harness.close()
        backend.stop()


# --- live: the real controller against the fake API server ---------------------------------------


def _api_object(obj: dict, kind: str | None = None, api_version: str = "v1") -> dict:
    """``obj`` as a client creates it: kind and apiVersion set, no server-set metadata."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("creationTimestamp", "generation")}
    out = {**obj, "metadata": meta}
    if kind is not None:
        out = {"apiVersion": api_version, "kind": kind, **out}
    return out


def _slice(key: str, address: str, port: int) -> dict:
    namespace, _, name = key.partition("/")
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{name}-1", "namespace": namespace, "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": [{"name": "", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}]}


def _from_sync(trace: Path, writes: list[tuple[float, float]]) -> list[float]:
    """Each change's latency counted from the start of the first Gateway sync
    after its API write (the trace the child wrote; one wall clock)."""
    starts = sorted(float(line.split()[1]) for line in trace.read_text().splitlines()
                    if line.startswith("gateway-sync "))
    out = []
    for wall, latency in writes:
        at = bisect.bisect_left(starts, wall)
        if at < len(starts):
            out.append(wall * 1000 + latency - starts[at] * 1000)
    return out


def _settle(pid: int, quiet: float = 0.05, window: float = 1.0, limit: float = 300.0) -> float:
    """Wait until process ``pid`` uses less than ``quiet`` of a core over
    ``window`` seconds (at most ``limit``); how long that took."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        before = _cpu_seconds(pid)
        time.sleep(window)
        if _cpu_seconds(pid) - before < quiet * window:
            break
    return time.perf_counter() - start


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    import os
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def live(n: int, changes: int, settle: bool = True) -> None:
    """Route change -> first request through the real ``platformd ingress``
    (a child process, its own nginx) listing and watching the project's fake
    API server (in this process, seeded as bench_ingress.py's ``--source api``
    does): from the moment the change is written to the API."""
    import json
    import os
    import shutil
    import subprocess
    import tempfile

    from bench_ingress import _ApiServer, _get, _memory, _stop, _stop_nginx
    from tests.helpers.backends import NginxBackend, free_port

    work = Path(tempfile.mkdtemp(prefix="pdgw-"))
    backend = NginxBackend("fast")
    server = _ApiServer(work)
    child = None
    http_port, https_port, healthz = free_port(), free_port(), free_port()
    try:
        snapshot = objects(n)
        start = time.perf_counter()
        for ns in sorted({"infra", "team-new", *(f"team-{i % 100}" for i in range(n))}):
            server.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        server.seed([_api_object(snapshot.gateway_classes[0]), _api_object(snapshot.gateways[0]), _grant()])
        for key, service in snapshot.services.items():
            server.seed([_api_object(service, "Service"),
                          _slice(key, backend.endpoint.address, backend.endpoint.port)])
        server.seed([_api_object(r) for r in snapshot.http_routes])
        print(f"live: seeded {n} HTTPRoutes, {len(snapshot.services)} Services and EndpointSlices "
              f"in {time.perf_counter() - start:.0f} s", flush=True)
        del snapshot
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, __file__, "--child", *server.args(), "--state-dir", str(work / "state"),
             "--http-port", str(http_port), "--https-port", str(https_port), "--healthz-host", "127.0.0.1",
             "--healthz-port", str(healthz), "--publish-status-address", "192.0.2.1"],
            env={"BENCH_TRACE": str(work / "trace"), **os.environ,
                 "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
            stdout=subprocess.DEVNULL, stderr=open(work / "log", "w"))
        probe = "host-0.example.com"
        while _get(http_port, probe, "/api")[0] != 200:
            if child.poll() is not None:
                raise RuntimeError(f"controller exited; see {work / 'log'}")
            if time.perf_counter() - start > 900:
                raise RuntimeError("routes not served within 15 minutes")
            time.sleep(0.2)
        ready = time.perf_counter() - start
        status = json.loads(_get(healthz, "x", "/status")[1])
        rss, peak = _memory(child.pid)
        print(f"live: start to first route served {ready:.1f} s (the Ingress sync reports "
              f"{status.get('last_sync_duration_seconds') or 0:.2f} s); "
              f"controller RSS {rss:.0f} MB, peak {peak:.0f} MB")
        if settle:
            settled = _settle(child.pid)  # past the first status writes (10,000 PATCHes take seconds)
            print(f"live: the controller settled {settled:.1f} s after that (status written); "
                  f"RSS {_memory(child.pid)[0]:.0f} MB")
        else:
            print("live: changes start at once, while the first status pass writes every route")
        reloads = status["reload_count"]
        cpu = _cpu_seconds(child.pid)
        by_kind: dict[str, list[float]] = {}
        writes: list[tuple[float, float]] = []  # (wall clock of the API write, latency in ms)
        for i in range(changes):
            for kind, route, header, expected in _change_steps(i):
                time.sleep(0.2)  # one change at a time: the previous one's status writes are done
                host = f"new-{i}.example.com"
                start, wall = time.perf_counter(), time.time()
                if route is None:
                    server.api.delete("HTTPRoute", "team-new", f"new-{i}")
                elif kind == "new route":
                    server.api.create(_api_object(route))
                else:
                    current = server.api.get("HTTPRoute", "team-new", f"new-{i}")
                    server.api.update({**current, "spec": route["spec"]})
                while _probe(http_port, host, header) != expected:
                    if time.perf_counter() - start > 60:
                        raise RuntimeError(f"{kind} on {host} not served within 60 s; see {work / 'log'}")
                    time.sleep(0.002)
                by_kind.setdefault(kind, []).append((time.perf_counter() - start) * 1000)
                writes.append((wall, by_kind[kind][-1]))
                if os.environ.get("BENCH_TRACE"):
                    with open(os.environ["BENCH_TRACE"], "a") as trace:
                        trace.write(f"change {wall:.4f} {by_kind[kind][-1]:.1f}\n")
        every = [v for values in by_kind.values() for v in values]
        from_sync = _from_sync(Path(os.environ.get("BENCH_TRACE") or work / "trace"), writes)
        cpu = (_cpu_seconds(child.pid) - cpu) / len(every) * 1000
        status = json.loads(_get(healthz, "x", "/status")[1])
        rss, peak = _memory(child.pid)
        print(f"live: route change -> first request from the API write, {changes} x (new route, changed rule, "
              f"deleted route) on {n:,} HTTPRoutes:")
        print(f"  all                    {_percentiles(every)}")
        print(f"  from the Gateway sync  {_percentiles(from_sync)}   (its start, as the child's trace shows it)")
        for kind, values in by_kind.items():
            print(f"  {kind:<21}  {_percentiles(values)}")
        print(f"  reloads: {status['reload_count'] - reloads}; controller CPU per change {cpu:.1f} ms (all its "
              f"threads: informers, syncs, status writes; not load-bound like the latencies); "
              f"controller RSS {rss:.0f} MB, peak {peak:.0f} MB")
    finally:
        if _stop(child):
            _stop_nginx(work / "state")
        backend.stop()
        server.close()
        if not os.environ.get("BENCH_DEBUG"):
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"controller log: {work / 'log'}")


def _trace(path: Path) -> None:
    """BENCH_TRACE=file: the child appends one line per Gateway sync, Ingress
    sync, status write pass and garbage collection: name, wall-clock start,
    duration (ms); to lay beside the bench's own times."""
    import gc
    import threading

    from platformd.ingress.controller import Controller
    from platformd.ingress.gateway_controller import GatewayController
    from platformd.ingress.gateway_statuswriter import GatewayStatusWriter

    out, lock = open(path, "a", buffering=1), threading.Lock()

    def line(name: str, start: float, seconds: float) -> None:
        with lock:
            out.write(f"{name} {start:.4f} {seconds * 1000:.1f}\n")

    def timed(cls, method: str, name: str) -> None:
        plain = getattr(cls, method)

        def wrapper(self, *args, **kwargs):
            start, begun = time.time(), time.perf_counter()
            try:
                return plain(self, *args, **kwargs)
            finally:
                line(name, start, time.perf_counter() - begun)
        setattr(cls, method, wrapper)

    timed(GatewayController, "sync", "gateway-sync")
    timed(GatewayController, "_full", "gateway-full")  # a sync that built in full (else incremental)
    from platformd.ingress import gateway_incremental
    timed(gateway_incremental, "lower", "gateway-lower-full")  # an incremental sync that lowered in full
    timed(gateway_incremental, "update", "gateway-update")
    timed(gateway_incremental, "relower", "gateway-relower")
    timed(Controller, "sync", "ingress-sync")
    timed(GatewayStatusWriter, "sync", "status-writer")
    collecting: dict[str, float] = {}

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            collecting["start"], collecting["begun"] = time.time(), time.perf_counter()
        elif "begun" in collecting:
            line(f"gc{info.get('generation')}", collecting["start"], time.perf_counter() - collecting["begun"])
    gc.callbacks.append(on_gc)


def child_main(argv: list[str]) -> int:
    import os

    from platformd.ingress import main as ingress_main
    if os.environ.get("BENCH_TRACE"):
        _trace(Path(os.environ["BENCH_TRACE"]))
    if os.environ.get("BENCH_PROFILE"):  # a cProfile of each Ingress sync (the one that applies)
        from bench_ingress import _profile_syncs
        _profile_syncs(Path(os.environ["BENCH_PROFILE"]))
    return ingress_main.main(argv)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(child_main(sys.argv[2:]))
    sys.exit(main())
