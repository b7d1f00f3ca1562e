"""Data-plane benchmark: Lua balancer throughput and endpoint-change latency.

Prints two figures (run from the repository root: ``.venv/bin/python bench/bench_dataplane.py``):

1. Requests per second through the Lua balancer vs the same nginx proxying
   to the same backend through a static ``upstream`` block. All paths live
   in one nginx with one worker (one rendered configuration plus one extra
   server whose location is the rendered one with a static upstream, keepalive
   320 like upstream_balancer), measured in interleaved rounds whose order
   alternates (ABBA) so drift and machine noise hit all alike. Target ratio
   >= 0.95, by requests/s and by the worker's CPU time per request (the
   steadier figure on a shared machine). A third path, a backend that needs
   the access and log phases (EWMA), is reported for information, and so is
   the floor of any Lua balancer: a ``balancer_by_lua`` that only sets the
   one peer (the rendered plain path should cost about that).
2. Endpoint-change propagation: the backend's only endpoint moves between two
   servers, 200 times through ``DataPlane.apply``; after each, requests on
   fresh connections (any worker) are sent until one is answered by the new
   server. Latency is from the start of the apply (which POSTs to Lua and
   confirms the checksum) to that answer. Measured idle and under a
   concurrent wrk load. Target p99 < 50 ms (ingress-nginx polls its
   configuration once a second).
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from platformd.ingress.model import Backend, Configuration, Location, Server  # noqa: E402
from tests.helpers.backends import NginxBackend, free_port  # noqa: E402
from tests.ingress.conftest import DataPlaneHarness, lua_ready  # noqa: E402

HOST = "bench.example.com"
FULL_HOST = "ewma.bench.example.com"  # same backend server, access+log phases


def config_for(*endpoints) -> Configuration:
    eps = tuple(e.endpoint for e in endpoints)
    return Configuration(
        servers=(
            Server(HOST, locations=(Location("/", backend="bench-svc"),)),
            Server(FULL_HOST, locations=(Location("/", backend="bench-ewma"),)),
        ),
        backends=(Backend("bench-svc", endpoints=eps), Backend("bench-ewma", endpoints=eps, load_balance="ewma")),
    )


def static_twin(rendered: str, backend: NginxBackend, port: int, *, floor_port: int | None = None) -> str:
    """``rendered`` plus a server on ``port`` whose location is the bench
    location (which has no Lua hooks: a plain backend) with a static upstream
    instead of upstream_balancer.

    With ``floor_port``, also a server whose upstream's ``balancer_by_lua``
    does nothing but set the one peer: the least any Lua balancer can cost.
    """
    server = rendered.split(f'server_name "{HOST}";')[1]
    location = server[server.index('        location "/" {') :]
    location = location[: location.index("\n        }\n") + len("\n        }\n")]
    assert "_by_lua_block" not in location, "the bench location should be a plain one"
    peer = f"{backend.address}:{backend.port}"
    floor_lua = f'require("ngx.balancer").set_current_peer("{backend.address}", {backend.port})'
    variants = [("static_backend", port, f"server {peer};")]
    if floor_port is not None:
        variants.append(("floor_balancer", floor_port, f"server 0.0.0.1;\n        balancer_by_lua_block {{ {floor_lua} }}"))
    extra = ""
    for upstream, listen, servers in variants:
        extra += (
            f"    upstream {upstream} {{\n"
            f"        {servers}\n"
            "        keepalive 320;\n"
            "    }\n"
            "    server {\n"
            f"        listen 127.0.0.1:{listen};\n"
            f'        server_name "{HOST}";\n'
            f"{location.replace('upstream_balancer', upstream)}"
            "    }\n"
        )
    marker = "    # Configuration endpoint for the controller"
    return rendered.replace(marker, extra + marker, 1)


def wrk(url: str, seconds: int, connections: int, host: str = HOST) -> tuple[float, int]:
    """(requests per second, requests) of one wrk run; errors abort the bench."""
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-H", f"Host: {host}", url],
        capture_output=True, text=True, check=True,
    ).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors", out)
    if errors:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return rps, int(re.search(r"(\d+) requests in", out).group(1))


def cpu_seconds(pid: int) -> float:
    """User+system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_throughput(harness: DataPlaneHarness, rounds: int, seconds: int, connections: int) -> None:
    (backend,) = [NginxBackend("fast")]
    try:
        result = harness.apply(config_for(backend))
        assert result.ok, result.error
        port, floor_port = free_port(), free_port()
        text = static_twin(harness.nginx.files.conf.read_text(), backend, port, floor_port=floor_port)
        harness.nginx.install(text)
        harness.nginx.reload()
        paths = {  # name -> (url, Host header)
            "lua": (f"{harness.http_url}/", HOST),
            "static": (f"http://127.0.0.1:{port}/", HOST),
            "lua+access+log": (f"{harness.http_url}/", FULL_HOST),
            "lua floor": (f"http://127.0.0.1:{floor_port}/", HOST),
        }
        for url, host in paths.values():  # all answer, from the same backend
            assert httpx.get(url, headers={"Host": host}).text == "fast"
            wrk(url, 1, connections, host)  # warm up
        (worker,) = harness.nginx.worker_pids()
        rps: dict[str, list[float]] = {name: [] for name in paths}
        cpu_us: dict[str, list[float]] = {name: [] for name in paths}
        names = list(paths)
        for index in range(rounds):
            for name in names if index % 2 == 0 else reversed(names):
                url, host = paths[name]
                before = cpu_seconds(worker)
                rate, requests = wrk(url, seconds, connections, host)
                rps[name].append(rate)
                cpu_us[name].append((cpu_seconds(worker) - before) / requests * 1e6)
        # The machine is shared, so throughput drifts between rounds; the
        # ratio within each round cancels part of that drift. The worker's
        # CPU time per request is what throughput is the inverse of when
        # nginx is the bottleneck, and other load barely moves it.
        ratios = [x / y for x, y in zip(rps["lua"], rps["static"])]
        cpu_ratios = [s_ / l_ for s_, l_ in zip(cpu_us["static"], cpu_us["lua"])]
        print(f"throughput, {rounds} rounds of {seconds}s in alternating order, wrk -t1 -c{connections}, 1 nginx worker:")
        for name in names:
            print(f"  {name:15} {statistics.median(rps[name]):8.0f} req/s median"
                  f" (rounds: {', '.join(f'{r:.0f}' for r in rps[name])});"
                  f" worker CPU {statistics.median(cpu_us[name]):.1f} us/request median")
        print(f"  ratio lua/static by req/s: median of rounds {statistics.median(ratios):.3f}"
              f" (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
        print(f"  ratio by worker CPU per request (static/lua): median of rounds {statistics.median(cpu_ratios):.3f}"
              f" (rounds: {', '.join(f'{r:.2f}' for r in cpu_ratios)}); of medians"
              f" {statistics.median(cpu_us['static']) / statistics.median(cpu_us['lua']):.3f}  (target >= 0.95)")
        floor = [f / l_ for f, l_ in zip(cpu_us["lua floor"], cpu_us["lua"])]
        print(f"  lua vs the floor of balancer_by_lua by worker CPU (floor/lua): median of rounds {statistics.median(floor):.3f}")
    finally:
        backend.stop()


def probe(port: int) -> str:
    """One request on a fresh connection (so it may reach any worker).

    Plain http.client: building an httpx client per probe (SSL context,
    CA bundle) would cost more than what is measured.
    """
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/", headers={"Host": HOST, "Connection": "close"})
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def measure_changes(harness: DataPlaneHarness, a: NginxBackend, b: NginxBackend, changes: int) -> list[float]:
    latencies, current = [], a
    apply_ms = []
    for _ in range(changes):
        target = b if current is a else a
        start = time.perf_counter()
        result = harness.apply(config_for(target))  # decide, POST, GET-confirm the checksum
        assert result.ok and result.kind == "dynamic", result
        apply_ms.append((time.perf_counter() - start) * 1000)
        while probe(harness.http_port) != target.name:
            if time.perf_counter() - start > 5:
                raise RuntimeError("a change did not land within 5 s")
        latencies.append((time.perf_counter() - start) * 1000)
        current = target
    measure_changes.apply_p50 = statistics.median(apply_ms)  # type: ignore[attr-defined]
    return sorted(latencies)


def summary(latencies: list[float]) -> str:
    p50 = statistics.median(latencies)
    p99 = latencies[max(0, int(round(len(latencies) * 0.99)) - 1)]
    return f"p50 {p50:.2f} ms   p99 {p99:.2f} ms   max {latencies[-1]:.2f} ms"


def bench_propagation(harness: DataPlaneHarness, changes: int, connections: int) -> None:
    a, b = NginxBackend("a"), NginxBackend("b")
    try:
        assert harness.apply(config_for(a)).ok
        workers = harness.nginx.worker_pids()
        print(f"endpoint-change propagation, {changes} changes, 2 nginx workers"
              " (start of apply = POST, to the first request answered by the new endpoint; target p99 < 50 ms):")
        print(f"  idle:           {summary(measure_changes(harness, a, b, changes))}"
              f"   (apply alone p50 {measure_changes.apply_p50:.2f} ms)")
        load = subprocess.Popen(
            ["wrk", "-t1", f"-c{connections}", "-d600s", "-H", f"Host: {HOST}", harness.http_url + "/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.5)
            print(f"  under wrk -c{connections}: {summary(measure_changes(harness, a, b, changes))}"
                  f"   (apply alone p50 {measure_changes.apply_p50:.2f} ms)")
        finally:
            load.terminate()
            load.wait(timeout=10)
        reloads = harness.registry.get_sample_value("nginx_ingress_controller_success")
        same = harness.nginx.worker_pids() == workers
        print(f"  nginx reloads during the runs: {reloads - 1:.0f}; worker pids unchanged: {same}")
    finally:
        a.stop()
        b.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--changes", type=int, default=200)
    args = parser.parse_args()
    if not lua_ready():
        print("lua/ modules missing; nothing to benchmark", file=sys.stderr)
        return 1
    from dataclasses import replace

    harness = DataPlaneHarness()
    # One worker for the throughput run, so the two paths compete for the
    # same single event loop and the comparison is not about scheduling.
    original = harness.localize
    harness.localize = lambda c: original(  # type: ignore[method-assign]
        replace(c, settings=replace(c.settings, workers=replace(c.settings.workers, processes=1)))
    )
    try:
        bench_throughput(harness, args.rounds, args.seconds, args.connections)
    finally:
        harness.close()
    harness = DataPlaneHarness()  # two workers: a change must reach both
    try:
        bench_propagation(harness, args.changes, args.connections)
    finally:
        harness.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
