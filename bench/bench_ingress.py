"""Ingress controller benchmark at 1,000 / 5,000 / 10,000 Ingresses.

Run from the repository root: ``.venv/bin/python bench/bench_ingress.py``
(``--sizes``, ``--live-size``, ``--trials`` to change the work; ``--skip-live``
for the offline figures only). Every Ingress has one host and two paths, each
to its own Service with three endpoints (so N Ingresses are 2N Services, 2N
EndpointSlices, 2N backends and 6N endpoints).

Offline, per size (one process, real nginx for the nginx figures):

* snapshot + translation (``translate.build``), the route table
  (``render.dynamic_sections``: what a route change encodes); both again
  with one more Ingress ("+1": what a full build after a new Ingress costs);
* "+1 sync": the translation step of the controller's sync after one new
  Ingress (the incremental path: its neighbourhood translated and spliced),
  the real ``Controller`` on informers fed in-process;
* nginx.conf: its size (the same at every size: routes are data), ``nginx -t``;
* start through ``DataPlane.apply``; one more Ingress through it (a push,
  no reload); a reload for a global setting (keepalive_timeout).

Live, at ``--live-size`` (the real ``platformd ingress`` in a child process on
a manifest folder, with its own nginx; backends on 127.0.0.1):

* cold start to ready (informers synced, first sync applied), the full sync
  duration the controller reports;
* memory (``VmRSS``, ``VmHWM`` of the controller process, nginx not
  included): RSS when ready, RSS at the end of the run (after the endpoint
  changes and the new Ingresses with their reloads), and the peak, which is
  reached during the cold start (parsing, first translation and render);
* EndpointSlice change → first request answered by the new endpoint
  (p50/p99 over ``--trials`` changes);
* route changes → first request served (p50/p99 over ``--trials`` each):
  a new Ingress (new host), then on each new Ingress a new path and an
  annotation change (``permanent-redirect``); the p99 over all three kinds,
  and the reload count across them (0). ``BENCH_PROFILE=dir`` writes a
  cProfile of each full sync of the controller after the first.

Two reference figures put the memory in proportion: the RSS of a process
that has only imported what the controller imports (the interpreter and
libraries, before any object), and what the same objects cost as plain
``json.loads`` of one JSON array (tracemalloc; keys shared, values not), the
floor for a process that keeps the objects in the usual form. The controller
keeps them interned (file and API sources intern strings as they parse),
which is below that floor.

``--source files`` (default): the live controller reads a folder, the
bulk of it one manifest (``--manifest yaml``, or ``json``: one JSON List,
which the file source parses ~25 times faster). The folder is polled every
20 ms instead of the default 500 ms, so the latencies are the controller's
and nginx's, not the poll period's (half of it, 10 ms, on average is in
every change figure); nothing else is changed. The file source serves the
objects the informers store (one copy), plus per object its id, owner and a
history entry (about 15 MB at 50,000 objects): that much of the memory
figure is the file source's, not the controller's.

``--source api``: the production path. The objects are seeded into the
project's fake API server (in this process; see ``_ApiServer`` for the two
shortcuts seeding takes) and the controller lists and watches it over HTTP
with the ``kubernetes`` client's configuration. Its first sync also sends
one "Sync" Event per Ingress (as ingress-nginx does), 10,000 POSTs over
several seconds that compete with the change trials unless ``--settle``
waits them out. ``--api-auth`` chooses how the controller finds the server:
``kubeconfig`` (default: a kubeconfig file, as when it runs outside the
cluster; this loads the ``kubernetes`` library's kubeconfig loader and what
it imports, oauthlib and requests among them) or ``in-cluster`` (as in a
pod: ``KUBERNETES_SERVICE_HOST``/``_PORT``, a service account token and CA
file; the fake API server then serves https).

Targets at 10,000 (issue #10): route change → first request p99 < 100 ms
with 0 reloads, cold start < 5 s, nginx.conf constant, ``nginx -t`` < 0.5 s,
reload < 1 s, controller RSS < 300 MB. (ingress-nginx users report 1.5-minute syncs
and 40-second reloads at 3,000 Ingresses.)
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NAMESPACE = "bench"
CLASS = {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "platform"},
         "spec": {"controller": "k8s.io/platform-ingress"}}


# --- objects --------------------------------------------------------------------------


def _ip(i: int, k: int) -> str:
    return f"10.{(i >> 8) & 255}.{i & 255}.{k + 1}"


def ingress(i: int, host: str | None = None, services: tuple[str, str] | None = None) -> dict:
    a, b = services or (f"s{i}-a", f"s{i}-b")
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": f"ing-{i}", "namespace": NAMESPACE, "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"ingressClassName": "platform", "rules": [{"host": host or f"h{i}.bench.example", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": a, "port": {"number": 80}}}},
                {"path": "/api", "pathType": "Prefix", "backend": {"service": {"name": b, "port": {"number": 80}}}},
            ]}}]}}


def service(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}


def endpoint_slice(name: str, endpoints: list[tuple[str, int]]) -> dict:
    port = endpoints[0][1] if endpoints else 8080
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{name}-1", "namespace": NAMESPACE,
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}} for address, _ in endpoints]}


def cluster(n: int):
    """(ingresses, services by key, slices by service key) for n Ingresses."""
    ingresses, services, slices = [], {}, {}
    for i in range(n):
        ingresses.append(ingress(i))
        for suffix in ("a", "b"):
            name = f"s{i}-{suffix}"
            services[f"{NAMESPACE}/{name}"] = service(name)
            slices[f"{NAMESPACE}/{name}"] = (endpoint_slice(name, [(_ip(i, k), 8080) for k in range(3)]),)
    return ingresses, services, slices


# --- offline ----------------------------------------------------------------------------


def offline(n: int) -> dict:
    from platformd.ingress.render import render_nginx_conf
    from platformd.ingress.snapshot import Snapshot
    from platformd.ingress.caches import Caches
    from platformd.ingress.translate import TranslateOptions, build
    from platformd.ingress.main import NGINX_TIMEOUTS
    from tests.ingress.conftest import DataPlaneHarness

    ingresses, services, slices = cluster(n)
    figures: dict = {"ingresses": n}
    start = time.perf_counter()
    snapshot = Snapshot(ingresses=tuple(ingresses), ingress_classes=(CLASS,), services=services,
                        endpoint_slices=slices)
    caches = Caches()  # as main gives the controller and its data plane
    translation = build(snapshot, TranslateOptions(), caches)
    figures["build_s"] = time.perf_counter() - start
    # What a sync after one new Ingress costs: the translator and the view
    # reuse what did not change (caches.Caches).
    start = time.perf_counter()
    bigger = build(Snapshot(ingresses=(*ingresses, ingress(n)), ingress_classes=(CLASS,),
                            services={**services, f"{NAMESPACE}/s{n}-a": service(f"s{n}-a"),
                                      f"{NAMESPACE}/s{n}-b": service(f"s{n}-b")},
                            endpoint_slices=slices), TranslateOptions(), caches)
    figures["rebuild_s"] = time.perf_counter() - start
    from dataclasses import replace

    from platformd.ingress.render import dynamic_sections

    start = time.perf_counter()
    sections = {sec.name: sec for sec in dynamic_sections(translation.configuration, caches)}
    figures["routes_s"] = time.perf_counter() - start
    figures["routes_mb"] = sum(len(sec.body) for name, sec in sections.items() if name.startswith("routes")) / 1e6
    start = time.perf_counter()
    dynamic_sections(bigger.configuration, caches)
    figures["reroutes_s"] = time.perf_counter() - start
    figures["sync_translate_s"], figures["sync_render_s"] = incremental_sync(n)
    harness = DataPlaneHarness()
    harness.nginx.timeouts = NGINX_TIMEOUTS
    try:
        config = harness.localize(translation.configuration)
        text = render_nginx_conf(config, harness.runtime)
        figures["conf_kb"] = len(text) / 1e3
        candidate = harness.state_dir / "bench.conf"
        harness.nginx.files.prepare()
        candidate.write_text(text)
        start = time.perf_counter()
        subprocess.run(["/usr/sbin/nginx", "-t", "-q", "-p", str(harness.state_dir), "-c", str(candidate)],
                       check=True, capture_output=True)
        figures["nginx_t_s"] = time.perf_counter() - start
        figures["start_s"] = figures["push_s"] = figures["reload_s"] = None
        try:
            start = time.perf_counter()
            result = harness.plane.apply(config)
            assert result.ok, result.error
            figures["start_s"] = time.perf_counter() - start
            start = time.perf_counter()
            result = harness.plane.apply(harness.localize(bigger.configuration))
            assert result.ok and result.kind == "dynamic", result
            figures["push_s"] = time.perf_counter() - start
            glob = harness.localize(bigger.configuration)
            glob = replace(glob, settings=replace(glob.settings, keepalive_timeout=30))
            start = time.perf_counter()
            result = harness.plane.apply(glob)
            assert result.ok and result.kind == "reload", result
            figures["reload_s"] = time.perf_counter() - start
        except (AssertionError, subprocess.TimeoutExpired) as exc:
            figures["error"] = " ".join(str(exc).split())[:160]
    finally:
        harness.close()
    return figures


def incremental_sync(n: int, changes: int = 5) -> tuple[float, float]:
    """(translation, render) seconds of the controller's sync after one new
    Ingress, median over ``changes``: the real ``Controller`` (handlers,
    indexes, the incremental translation) on informers fed in-process, its
    data plane replaced by ``render.dynamic_sections`` (what a push encodes)."""
    from platformd.common.informer import InformerFactory
    from platformd.ingress.caches import Caches
    from platformd.ingress.controller import Controller, ControllerOptions
    from platformd.ingress.dataplane import ApplyResult
    from platformd.ingress.render import dynamic_sections
    from tests.common.memsource import MemorySource

    caches, rendering = Caches(), []

    class Plane:
        running = None

        def submit(self, config):
            start = time.perf_counter()
            dynamic_sections(config, caches)
            rendering.append(time.perf_counter() - start)
            return lambda superseded=None: ApplyResult("dynamic")

    controller = Controller(InformerFactory(MemorySource()), Plane(), ControllerOptions(), caches=caches)
    ingresses, services, slices = cluster(n)
    controller.classes._dispatcher.add(CLASS)  # the informers' sinks, as a list or watch feeds them
    for obj in (*services.values(), *(s for group in slices.values() for s in group)):
        (controller.services if obj["kind"] == "Service" else controller.slices)._dispatcher.add(obj)
    for obj in ingresses:
        controller.ingresses._dispatcher.add(obj)
    controller.sync()
    totals = []
    for k in range(changes):
        controller.ingresses._dispatcher.add(ingress(n + 1 + k, host=f"new{k}.bench.example", services=("s0-a", "s0-b")))
        start = time.perf_counter()
        controller.sync()
        totals.append(time.perf_counter() - start)
    render = statistics.median(rendering[1:])
    return statistics.median(totals) - render, render


# --- live -------------------------------------------------------------------------------


def _dump(path: Path, docs: list[dict]) -> None:
    import yaml
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        yaml.dump_all(docs, f, Dumper=dumper)
    os.replace(tmp, path)  # the file source never sees half a file


def _get(port: int, host: str, path: str = "/") -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path, headers={"Host": host, "Connection": "close"})
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    except OSError:
        return 0, ""
    finally:
        conn.close()


def _stop(child: subprocess.Popen | None) -> bool:
    """Stop a controller child: gracefully, then killed after 60 s (a sync in
    progress finishes before a graceful stop; do not wait for it longer).
    Whether it was still running."""
    if child is None or child.poll() is not None:
        return False
    child.terminate()
    try:
        child.wait(60)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    return True


def _memory(pid: int) -> tuple[float, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def json_floor_mb(n: int) -> float:
    """What the live run's objects cost as one ``json.loads`` (tracemalloc, MB)."""
    import gc
    import json
    import tracemalloc
    ingresses, services, slices = cluster(n)
    text = json.dumps([CLASS, *ingresses, *services.values(), *(s for g in slices.values() for s in g)])
    del ingresses, services, slices
    gc.collect()
    tracemalloc.start()
    try:
        objects = json.loads(text)
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del objects
    return size / 1e6


def imports_rss_mb() -> float:
    """RSS of a fresh process that has imported what the controller imports."""
    code = ("import prometheus_client, yaml, jinja2, httpx\n"
            "from platformd.common import kubeclient\n"
            "from platformd.ingress import main, controller, dataplane, render, translate, view, server\n"
            "from platformd.common import filesource, apisource, informer\n"
            "for line in open('/proc/self/status'):\n"
            "    if line.startswith('VmRSS:'): print(int(line.split()[1]) / 1024)\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    return float(out.stdout.strip())


class _Folder:
    """The live run's objects as a manifest folder (``--source``)."""

    def __init__(self, directory: Path, manifest: str) -> None:
        self.directory, self.manifest = directory, manifest
        directory.mkdir()

    def seed(self, objects: list[dict]) -> None:
        if self.manifest == "json":
            # One JSON object (a List): the file source's JSON path.
            tmp = self.directory / ".bulk.tmp"
            tmp.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
            os.replace(tmp, self.directory / "bulk.json")
        else:
            _dump(self.directory / "bulk.yaml", objects)

    def put(self, name: str, docs: list[dict]) -> None:
        """Create or replace the objects of one file."""
        _dump(self.directory / f"{name}.yaml", docs)

    def args(self) -> list[str]:
        return ["--source", str(self.directory)]

    def env(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        pass


class _ApiServer:
    """The live run's objects in the project's fake API server (``--kubeconfig``):
    the production path, the real ``kubernetes`` client's configuration and
    our list/watch over HTTP. Two things differ from a real server: seeding
    skips reading all Services per Service create to allocate a cluster IP
    (quadratic: hours at 20,000; each Service is given its cluster IP), and
    EndpointSlices may hold 127.0.0.1, where the backends listen. Everything
    the controller sees goes through the server as usual."""

    def __init__(self, directory: Path, auth: str = "kubeconfig") -> None:
        from tests.fakeapi import FakeApiServer
        from tests.fakeapi import defaults, registry

        plain = registry.Registry._default

        def _default(self, rt, obj) -> None:
            if rt.plural == "services" and (obj.get("spec") or {}).get("clusterIP"):
                defaults.apply_defaults(rt, obj, [])  # nothing to allocate
            else:
                plain(self, rt, obj)

        registry.Registry._default = _default
        # The backends listen on 127.0.0.1 (tests send traffic to loopback
        # only), which a real API server refuses in an EndpointSlice.
        from tests.fakeapi import validation
        plain_address = validation._endpoint_address_errors
        validation._endpoint_address_errors = lambda field, address, kind: (
            [] if str(address).startswith("127.") else plain_address(field, address, kind))
        self.auth = auth
        self.api = FakeApiServer(history_limit=10_000, tls=auth == "in-cluster").start()
        self.kubeconfig = directory / "kubeconfig"
        self.api.write_kubeconfig(self.kubeconfig)
        self.service_account = directory / "serviceaccount"
        self.service_account.mkdir()
        (self.service_account / "token").write_text("bench-token")
        if self.api.ca_file:
            shutil.copy(self.api.ca_file, self.service_account / "ca.crt")
        self.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        self._ips = 0

    def _create(self, obj: dict) -> None:
        if obj["kind"] == "Service":
            self._ips += 1
            obj = {**obj, "spec": {**obj["spec"], "clusterIP": f"10.100.{self._ips >> 8}.{self._ips & 255}"}}
        self.api.create(obj)

    def seed(self, objects: list[dict]) -> None:
        for obj in objects:
            self._create(obj)

    def put(self, name: str, docs: list[dict]) -> None:
        for obj in docs:
            meta = obj["metadata"]
            if self.api.get(obj["kind"], meta.get("namespace"), meta["name"]) is None:
                self._create(obj)
            else:
                self.api.update(obj)

    def args(self) -> list[str]:
        return ["--kubeconfig", str(self.kubeconfig)] if self.auth == "kubeconfig" else []

    def env(self) -> dict[str, str]:
        if self.auth == "kubeconfig":
            return {}
        return {"KUBERNETES_SERVICE_HOST": self.api.host, "KUBERNETES_SERVICE_PORT": str(self.api.port),
                "BENCH_SERVICE_ACCOUNT": str(self.service_account)}

    def close(self) -> None:
        self.api.stop()


def live(n: int, trials: int, manifest: str = "yaml", source_kind: str = "files", settle: float = 0.0,
         api_auth: str = "kubeconfig") -> dict:
    from tests.helpers.backends import HttpBackend, free_port

    work = Path(tempfile.mkdtemp(prefix="pdbench-"))
    state = work / "state"
    a, b = HttpBackend("A"), HttpBackend("B")
    http_port, https_port, healthz = free_port(), free_port(), free_port()
    figures: dict = {"ingresses": n}
    child = None
    objects = _ApiServer(work, api_auth) if source_kind == "api" else _Folder(work / "manifests", manifest)
    try:
        ingresses, services, slices = cluster(n)
        moving = f"{NAMESPACE}/s0-a"
        static = [CLASS, *ingresses, *services.values(),
                  *(s for key, group in slices.items() if key != moving for s in group)]
        start = time.perf_counter()
        objects.seed(static)
        figures["seed_s"] = time.perf_counter() - start
        del ingresses, services, slices, static
        objects.put("change", [endpoint_slice("s0-a", [(a.address, a.port)])])
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env.update(PYTHONPATH=str(ROOT), **objects.env())
        if os.environ.get("BENCH_TRACEMALLOC"):
            env["PYTHONTRACEMALLOC"] = "1"
        if os.environ.get("BENCH_DEBUG"):
            env["PLATFORM_LOG_LEVEL"] = "DEBUG"
            print(f"controller log: {work / 'log'}", flush=True)
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, __file__, "--child", *objects.args(), "--state-dir", str(state),
             "--http-port", str(http_port), "--https-port", str(https_port), "--healthz-host", "127.0.0.1",
             "--healthz-port", str(healthz)], env=env, stdout=subprocess.DEVNULL, stderr=open(work / "log", "w"))
        host = "h0.bench.example"
        while _get(healthz, "x", "/readyz")[0] != 200:
            if child.poll() is not None:
                raise RuntimeError(f"controller exited; see {work / 'log'}")
            if time.perf_counter() - start > 1800:
                raise RuntimeError("controller not ready within 30 minutes")
            time.sleep(0.2)
        figures["ready_s"] = time.perf_counter() - start
        figures["full_sync_s"] = json.loads(_get(healthz, "x", "/status")[1])["last_sync_duration_seconds"]
        figures["rss_ready_mb"], figures["peak_ready_mb"] = _memory(child.pid)
        if os.environ.get("BENCH_TRACEMALLOC"):
            _tracemalloc_report(child.pid, Path(os.environ["BENCH_TRACEMALLOC"]))
        assert _get(http_port, host)[1] == "A", _get(http_port, host)
        time.sleep(settle)  # e.g. past the startup "Sync" Events (one per Ingress) to the API server
        latencies = []
        for trial in range(trials):
            target = b if trial % 2 == 0 else a
            start = time.perf_counter()
            objects.put("change", [endpoint_slice("s0-a", [(target.address, target.port)])])
            while _get(http_port, host)[1] != target.name:
                if time.perf_counter() - start > 60:
                    raise RuntimeError("endpoint change not served within 60 s")
            latencies.append(time.perf_counter() - start)
            time.sleep(0.2)
        figures["endpoint_p50_ms"] = statistics.median(latencies) * 1000
        figures["endpoint_p99_ms"] = _percentile(latencies, 0.99) * 1000
        figures["endpoint_max_ms"] = max(latencies) * 1000
        figures["endpoint_ms"] = [round(x * 1000) for x in latencies]  # in order: outliers show where
        reloads = json.loads(_get(healthz, "x", "/status")[1])["reload_count"]
        new_ingress = []
        for trial in range(trials):
            time.sleep(0.2)
            host_new = f"new{trial}.bench.example"
            start = time.perf_counter()
            objects.put(f"new-{trial}", [ingress(n + 1 + trial, host=host_new, services=("s0-a", "s0-b"))])
            while _get(http_port, host_new)[0] != 200:
                if time.perf_counter() - start > 600:
                    raise RuntimeError("new Ingress not served within 600 s")
                time.sleep(0.005)
            new_ingress.append(time.perf_counter() - start)
        figures["new_ingress_s"] = statistics.median(new_ingress)
        figures["new_ingress_p99_s"] = _percentile(new_ingress, 0.99)
        figures["new_ingress_max_s"] = max(new_ingress)
        figures["new_ingress_each_s"] = [round(t, 3) for t in new_ingress]
        # The other route changes, on the Ingresses just added (each in a file
        # of its own): a new path (Exact /p to a Service without endpoints:
        # served once it answers 503 where "/" answered 200) and an annotation
        # (permanent-redirect: served once "/" answers 301).
        changes: dict[str, list[float]] = {"new_path": [], "annotation": []}
        for trial in range(trials):
            host_new = f"new{trial}.bench.example"
            for kind, path, status in (("new_path", "/p", 503), ("annotation", "/", 301)):
                time.sleep(0.2)
                obj = ingress(n + 1 + trial, host=host_new, services=("s0-a", "s0-b"))
                paths = obj["spec"]["rules"][0]["http"]["paths"]
                paths.append({"path": "/p", "pathType": "Exact",
                              "backend": {"service": {"name": "absent", "port": {"number": 80}}}})
                if kind == "annotation":
                    obj["metadata"]["annotations"] = {
                        "nginx.ingress.kubernetes.io/permanent-redirect": f"https://moved.example/{trial}"}
                start = time.perf_counter()
                objects.put(f"new-{trial}", [obj])
                while _get(http_port, host_new, path)[0] != status:
                    if time.perf_counter() - start > 600:
                        raise RuntimeError(f"{kind} change not served within 600 s")
                    time.sleep(0.005)
                changes[kind].append(time.perf_counter() - start)
        for kind, values in changes.items():
            figures[f"{kind}_p50_s"] = statistics.median(values)
            figures[f"{kind}_p99_s"] = _percentile(values, 0.99)
        every = new_ingress + changes["new_path"] + changes["annotation"]
        figures["route_change_p99_s"] = _percentile(every, 0.99)
        figures["reloads_during"] = json.loads(_get(healthz, "x", "/status")[1])["reload_count"] - reloads
        figures["rss_end_mb"], figures["peak_rss_mb"] = _memory(child.pid)
    finally:
        if _stop(child):
            _stop_nginx(state)
        a.stop()
        b.stop()
        objects.close()
        if not os.environ.get("BENCH_DEBUG"):
            shutil.rmtree(work, ignore_errors=True)
    return figures


def _stop_nginx(state: Path) -> None:
    """Stop an nginx the killed controller left behind (found by its pid file)."""
    from platformd.ingress.nginx import NginxFiles, NginxProcess
    NginxProcess(NginxFiles(state)).stop()


def child_main(argv: list[str]) -> int:
    """The controller for the live part: ``platformd ingress`` with a 20 ms folder poll."""
    from platformd.common import filesource
    from platformd.ingress import main as ingress_main

    filesource.FileSource.__init__.__kwdefaults__["poll_interval"] = 0.02
    if os.environ.get("BENCH_SERVICE_ACCOUNT"):  # --api-auth in-cluster: the pod's files are here
        from platformd.common import kubeclient
        kubeclient.SERVICE_ACCOUNT_TOKEN = os.path.join(os.environ["BENCH_SERVICE_ACCOUNT"], "token")
        kubeclient.SERVICE_ACCOUNT_CA = os.path.join(os.environ["BENCH_SERVICE_ACCOUNT"], "ca.crt")
    if os.environ.get("BENCH_TRACEMALLOC"):
        _tracemalloc_on_signal(Path(os.environ["BENCH_TRACEMALLOC"]))
    if os.environ.get("BENCH_PROFILE"):
        _profile_syncs(Path(os.environ["BENCH_PROFILE"]))
    return ingress_main.main(argv)


def _tracemalloc_on_signal(path: Path) -> None:
    """BENCH_TRACEMALLOC=file (the child runs with PYTHONTRACEMALLOC=1): on
    SIGUSR1 the controller writes its live allocations grouped by line there."""
    import signal
    import tracemalloc

    def dump(signum, frame) -> None:
        snapshot = tracemalloc.take_snapshot()
        stats = snapshot.statistics("lineno")
        total = sum(s.size for s in stats)
        lines = [f"total {total / 2**20:.1f} MiB traced"]
        lines += [f"{s.size / 2**20:8.2f} MiB {s.count:9d} {s.traceback}" for s in stats[:60]]
        lines.append("by file:")
        lines += [f"{s.size / 2**20:8.2f} MiB {s.count:9d} {s.traceback}"
                  for s in snapshot.statistics("filename")[:30]]
        packages: dict[str, int] = {}
        for name in list(sys.modules):
            packages[name.partition(".")[0]] = packages.get(name.partition(".")[0], 0) + 1
        lines.append(f"{len(sys.modules)} modules imported; by top-level package: " + ", ".join(
            f"{name} {count}" for name, count in sorted(packages.items(), key=lambda x: (-x[1], x[0]))))
        tmp = path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, path)

    signal.signal(signal.SIGUSR1, dump)


def _tracemalloc_report(pid: int, path: Path) -> None:
    import signal

    path.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    for _ in range(600):
        if path.exists():
            return
        time.sleep(0.1)


def _profile_syncs(directory: Path) -> None:
    """BENCH_PROFILE=dir: a cProfile of each full sync after the first, as dir/sync-N.prof."""
    import cProfile

    from platformd.ingress.controller import Controller

    directory.mkdir(parents=True, exist_ok=True)
    plain, count = Controller.sync, [0]

    def profiled(self) -> None:
        count[0] += 1
        if count[0] == 1:
            return plain(self)
        profile = cProfile.Profile()
        try:
            return profile.runcall(plain, self)
        finally:
            profile.dump_stats(directory / f"sync-{count[0]}.prof")

    Controller.sync = profiled


def _cell(value: float | None) -> str:
    return f"{value:>8.2f}" if value is not None else f"{'failed':>8}"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child_main(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "--offline-child":
        print(json.dumps(offline(int(sys.argv[2]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--live-size", type=int, default=10000)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--skip-offline", action="store_true")
    parser.add_argument("--source", choices=("files", "api"), default="files",
                        help="live run: a manifest folder, or the fake API server (the production path)")
    parser.add_argument("--api-auth", choices=("kubeconfig", "in-cluster"), default="kubeconfig",
                        help="--source api: how the controller finds the server (a kubeconfig, or as in a pod)")
    parser.add_argument("--settle", type=float, default=0.0,
                        help="seconds to wait after ready before the change trials")
    parser.add_argument("--manifest", choices=("yaml", "json"), default="yaml",
                        help="format of the live run's bulk manifest (the file source parses JSON ~25x faster)")
    args = parser.parse_args()
    if not args.skip_offline:
        print(f"{'ingresses':>9} {'build s':>8} {'routes s':>8} {'+1 build':>8} {'+1 rout.':>8} {'+1 sync':>8} "
              f"{'routesMB':>8} {'conf KB':>8} {'nginx -t s':>10} {'start s':>8} {'+1 push s':>9} {'reload s':>8}",
              flush=True)
        for n in (int(s) for s in args.sizes.split(",") if s):
            # Each size in a process of its own: sizes would otherwise share
            # caches and the garbage collector's state, and a size's figures
            # would depend on what ran before it.
            run = subprocess.run([sys.executable, __file__, "--offline-child", str(n)],
                                 check=True, stdout=subprocess.PIPE, text=True)
            f = json.loads(run.stdout.strip().splitlines()[-1])
            print(f"{f['ingresses']:>9} {f['build_s']:>8.2f} {f['routes_s']:>8.2f} {f['rebuild_s']:>8.2f} "
                  f"{f['reroutes_s']:>8.2f} {f['sync_translate_s']:>8.3f} {f['routes_mb']:>8.1f} {f['conf_kb']:>8.1f} "
                  f"{f['nginx_t_s']:>10.2f} {_cell(f['start_s'])} {_cell(f['push_s']):>9} {_cell(f['reload_s'])}",
                  flush=True)
            if f.get("error"):
                print(f"{'':>9} data plane failed: {f['error']}", flush=True)
    if not args.skip_live:
        f = live(args.live_size, args.trials, args.manifest, args.source, args.settle, args.api_auth)
        objects = 1 + 5 * args.live_size
        where = (f"the fake API server, {args.api_auth}" if args.source == "api"
                 else f"a {args.manifest} manifest folder")
        print(f"\nlive controller with {f['ingresses']} Ingresses ({objects} objects from {where}; "
              f"seeded in {f['seed_s']:.1f} s):")
        print(f"  cold start to ready          {f['ready_s']:8.2f} s (the last sync before it took {f['full_sync_s']:.2f} s)")
        print(f"  memory RSS when ready        {f['rss_ready_mb']:8.0f} MB (peak so far {f['peak_ready_mb']:.0f} MB)")
        print(f"  memory RSS at the end        {f['rss_end_mb']:8.0f} MB (peak {f['peak_rss_mb']:.0f} MB)")
        print(f"    for reference: a process with the controller's imports only {imports_rss_mb():.0f} MB RSS;")
        print(f"    the same objects as plain json.loads {json_floor_mb(args.live_size):.0f} MB (tracemalloc)")
        print(f"  endpoint change -> traffic   p50 {f['endpoint_p50_ms']:.0f} ms, p99 {f['endpoint_p99_ms']:.0f} ms, "
              f"max {f['endpoint_max_ms']:.0f} ms ({args.trials} changes)")
        print(f"    each, in order (ms): {' '.join(map(str, f['endpoint_ms']))}")
        print(f"  new Ingress -> first request p50 {f['new_ingress_s'] * 1000:.0f} ms, p99 "
              f"{f['new_ingress_p99_s'] * 1000:.0f} ms, max {f['new_ingress_max_s'] * 1000:.0f} ms"
              f" ({args.trials} new Ingresses)")
        print(f"    each, in order (s): {' '.join(map(str, f['new_ingress_each_s']))}")
        print(f"  new path -> first request    p50 {f['new_path_p50_s'] * 1000:.0f} ms, p99 "
              f"{f['new_path_p99_s'] * 1000:.0f} ms; annotation change p50 {f['annotation_p50_s'] * 1000:.0f} ms, "
              f"p99 {f['annotation_p99_s'] * 1000:.0f} ms")
        print(f"  route change (all three kinds, {3 * args.trials}) p99 {f['route_change_p99_s'] * 1000:.0f} ms "
              f"(reloads meanwhile: {f['reloads_during']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
