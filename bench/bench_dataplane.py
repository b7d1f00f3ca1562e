"""Data-plane benchmark: the Lua router and balancer against static nginx, and change latency.

Prints these figures (run from the repository root: ``.venv/bin/python bench/bench_dataplane.py``):

1. Requests per second through the Lua router and balancer (the catch-all
   ``location /``: rewrite_by_lua matching host and path from the route
   table, balancer_by_lua) vs the same nginx proxying to the same backend
   from a server of its own with a static ``upstream`` block, as nginx.conf
   rendered one per host before the router (``static``), and with a
   ``balancer_by_lua`` that only sets the one peer (``lua floor``). The
   bench host is a TLS host (the router decides ssl-redirect and HSTS per
   request) requested over plain HTTP. The static upstream has
   upstream_balancer's keepalive settings (checked, not assumed). On a machine with two or more CPUs the nginx worker is pinned
   to one and wrk and the backend to another, so the worker is the
   bottleneck and requests per second track its CPU time per request.
   Rounds run the paths in alternating order (ABBA) so drift hits all alike;
   the figures are medians of rounds with their spread. Target ratio >= 0.95.
   Also reported, for information: a backend that needs the access and log
   phases (EWMA), and the floor of any Lua balancer: a ``balancer_by_lua``
   that only sets the one peer.
2. Instructions per request of the same paths under callgrind
   (bench/instructions.py): the repeatable figure, unmoved by other load;
   the router path also with 10,000 more Ingresses (2 paths each) in the
   route table, and beside a Gateway table of its own port (lua/bound.lua).
   Skipped without valgrind.
3. Endpoint-change propagation: the backend's only endpoint moves between two
   servers, 200 times through ``DataPlane.apply``; after each, requests on
   fresh connections (any worker) are sent until one is answered by the new
   server. Latency is from the start of the apply (which POSTs to Lua and
   confirms the checksum) to that answer. Measured idle and under a
   concurrent wrk load. Target p99 < 50 ms (ingress-nginx polls its
   configuration once a second).
4. Route changes: 1,000 mixed route changes (new host, new path, exact
   path, rewrite-target, body size, canary, TLS host, ssl-redirect...)
   through ``DataPlane.apply``, each until its first request is served; the
   reload count and nginx's memory (master + workers) along the way: RSS and
   PSS from /proc, each process's Lua heap and the shared dicts' use from
   Lua (``Memory``). Growth is shown from before the first change and from
   after a warm-up of ``WARM_UP`` changes (the step in between is the
   one-time floor docs/architecture.md explains).
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
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402
import instructions  # noqa: E402

from platformd.ingress.model import Backend, BoundHosts, Configuration, Location, Server  # noqa: E402
from platformd.ingress.render import dynamic_sections  # noqa: E402
from tests.helpers.backends import NginxBackend  # noqa: E402
from tests.ingress.conftest import DataPlaneHarness, lua_ready  # noqa: E402

# Host names of one length, so every path hashes and copies the same bytes.
HOST = "lua.bench.example.com"  # plain backend: balancer_by_lua only
FULL_HOST = "log.bench.example.com"  # same backend server, access+log phases (EWMA)
STATIC_HOST = "fix.bench.example.com"  # the HOST server with a static upstream
FLOOR_HOST = "min.bench.example.com"  # the HOST server with a one-line balancer_by_lua


def config_for(*endpoints, extra_ingresses: int = 0) -> Configuration:
    """The bench hosts, plus ``extra_ingresses`` hosts of two paths each (the route table at size)."""
    eps = tuple(e.endpoint for e in endpoints)
    extra = tuple(Server(f"h{i}.bench.example", locations=(Location("/", backend="bench-svc"),
                                                            Location(f"/api{i}", backend="bench-svc")))
                  for i in range(extra_ingresses))
    return Configuration(
        servers=(
            Server(HOST, tls=True, locations=(Location("/", backend="bench-svc"),)),
            Server(FULL_HOST, locations=(Location("/", backend="bench-ewma"),)),
            *extra,
        ),
        backends=(Backend("bench-svc", endpoints=eps), Backend("bench-ewma", endpoints=eps, load_balance="ewma")),
    )


def _block(text: str, opening: str) -> str:
    """The block of ``text`` that starts with the line ``opening`` (4-space indented), through its ``}``."""
    start = text.index(opening)
    end = text.index("\n    }\n", start) + len("\n    }\n")
    return text[start:end]


@dataclass(frozen=True)
class Twin:
    """A server of its own for the bench host, proxying through another upstream."""

    host: str
    upstream: str
    peers: str  # the upstream's peer lines


def with_twins(rendered: str, backend: NginxBackend, http_port: int) -> str:
    """``rendered`` plus the static and floor servers: what nginx.conf had per
    host before the router (a server with a plain location: the upstream
    name set, global timeouts, inherited proxy headers). Their upstreams keep
    every line of upstream_balancer but the peer choice (same keepalive)."""
    balancer = _block(rendered, "    upstream upstream_balancer {")
    settings = [line for line in balancer.splitlines()[1:-1]
                if not line.strip().startswith(("server ", "balancer_by_lua"))]
    assert any(line.strip().startswith("keepalive ") for line in settings), balancer
    peer = f"{backend.address}:{backend.port}"
    floor_lua = f'require("ngx.balancer").set_current_peer("{backend.address}", {backend.port})'
    twins = (
        Twin(STATIC_HOST, "static_backend", f"        server {peer};"),
        Twin(FLOOR_HOST, "floor_balancer", f"        server 0.0.0.1;\n        balancer_by_lua_block {{ {floor_lua} }}"),
    )
    extra = ""
    for twin in twins:
        extra += (f"    upstream {twin.upstream} {{\n{twin.peers}\n" + "\n".join(settings) + "\n    }\n"
                  f"    server {{\n        server_name \"{twin.host}\";\n        listen {http_port};\n"
                  f"        location / {{\n            set $proxy_upstream_name \"bench-svc\";\n"
                  f"            client_max_body_size 1m;\n            proxy_buffering off;\n"
                  f"            proxy_pass http://{twin.upstream};\n        }}\n    }}\n")
    marker = "    # Configuration endpoint for the controller"
    assert marker in rendered
    return rendered.replace(marker, extra + marker, 1)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def pin(pids: list[int], cpu: int) -> None:
    for pid in pids:
        os.sched_setaffinity(pid, {cpu})


def prioritize(pids: list[int], sessions: list[int], nice: int) -> bool:
    """Give ``pids``, and the sessions of ``sessions``, niceness ``nice``; False without permission."""
    try:
        for pid in pids:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
        for pid in sessions:
            # With autogroup scheduling niceness only counts within a session;
            # between sessions (nginx, the backend and wrk each have one) the
            # session's own value does.
            autogroup = Path(f"/proc/{pid}/autogroup")
            if autogroup.exists():
                autogroup.write_text(str(nice))
    except PermissionError:
        return False
    return True


def wrk(url: str, seconds: int, connections: int, host: str, cpu: int | None = None, nice: int = 0) -> tuple[float, int]:
    """(requests per second, requests) of one wrk run; errors abort the bench."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-H", f"Host: {host}", url]
    if cpu is not None:
        command = ["taskset", "-c", str(cpu), *command]
    if nice:
        command = ["nice", "-n", str(nice), *command]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors", out)
    if errors:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return rps, int(re.search(r"(\d+) requests in", out).group(1))


def cpu_seconds(pid: int) -> float:
    """User+system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def same_answers(url: str, hosts: list[str]) -> None:
    """Every host answers the backend's body with the same response headers (but Date)."""
    seen = {}
    for host in hosts:
        response = httpx.get(url, headers={"Host": host})
        assert response.text == "fast", (host, response.status_code, response.text)
        seen[host] = sorted((k, v) for k, v in response.headers.items() if k.lower() != "date")
    first = seen[hosts[0]]
    for host in hosts[1:]:
        assert seen[host] == first, (host, seen[host], first)


def spread(values: list[float], fmt: str) -> str:
    return f"median {format(statistics.median(values), fmt)} (min {format(min(values), fmt)}, max {format(max(values), fmt)})"


PATHS = {  # name -> Host header, all on the http port
    "lua": HOST,
    "static": STATIC_HOST,
    "lua floor": FLOOR_HOST,
    "lua+access+log": FULL_HOST,
}


def bench_throughput(harness: DataPlaneHarness, backend: NginxBackend, rounds: int, seconds: int,
                     connections: int, nice: int = 0) -> None:
    url = f"{harness.http_url}/"
    same_answers(url, list(PATHS.values()))
    cpus = sorted(os.sched_getaffinity(0))
    nginx_cpu, load_cpu = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    (worker,) = harness.nginx.worker_pids()
    backend_pids = [backend._proc.pid, *_children(backend._proc.pid)]
    if nginx_cpu is not None:
        pin([worker, harness.nginx.master_pid()], nginx_cpu)
        pin([*backend_pids, os.getpid()], load_cpu)
    if nice and not prioritize([worker, *backend_pids], [worker, backend._proc.pid, os.getpid()], nice):
        print(f"(no permission for nice {nice}; running at the default priority)")
        nice = 0
    for host in PATHS.values():
        wrk(url, 1, connections, host, load_cpu, nice)  # warm up (LuaJIT traces, keepalive pools)
    rps: dict[str, list[float]] = {name: [] for name in PATHS}
    cpu_us: dict[str, list[float]] = {name: [] for name in PATHS}
    busy: dict[str, list[float]] = {name: [] for name in PATHS}
    names = list(PATHS)
    for index in range(rounds):
        for name in names if index % 2 == 0 else reversed(names):
            before, start = cpu_seconds(worker), time.monotonic()
            rate, requests = wrk(url, seconds, connections, PATHS[name], load_cpu, nice)
            used, elapsed = cpu_seconds(worker) - before, time.monotonic() - start
            rps[name].append(rate)
            cpu_us[name].append(used / requests * 1e6)
            busy[name].append(used / elapsed * 100)
    ratios = [x / y for x, y in zip(rps["lua"], rps["static"])]
    cpu_ratios = [s_ / l_ for s_, l_ in zip(cpu_us["static"], cpu_us["lua"])]
    floor = [f / l_ for f, l_ in zip(cpu_us["lua floor"], cpu_us["lua"])]
    pinned = (f"worker pinned to CPU {nginx_cpu}, wrk and backend to CPU {load_cpu}" if nginx_cpu is not None
              else "not pinned (one CPU)") + (f", all at nice {nice}" if nice else "")
    print(f"throughput, {rounds} rounds of {seconds}s in alternating order, wrk -t1 -c{connections},"
          f" 1 nginx worker, {pinned}:")
    for name in names:
        print(f"  {name:15} req/s {spread(rps[name], '.0f')};"
              f" worker CPU us/request {spread(cpu_us[name], '.1f')}; worker busy {statistics.median(busy[name]):.0f}%")
    print("  (worker busy near 100%: the worker set the pace, so req/s follows its CPU per request;"
          " well below: something else did, e.g. other load on the machine)")
    print(f"  ratio lua/static by req/s, per round: {spread(ratios, '.3f')}; of the medians"
          f" {statistics.median(rps['lua']) / statistics.median(rps['static']):.3f}  (target >= 0.95)")
    print(f"  ratio by worker CPU per request (static/lua), per round: {spread(cpu_ratios, '.3f')}")
    print(f"  lua vs the floor of balancer_by_lua by worker CPU (floor/lua), per round: {spread(floor, '.3f')}")
    os.sched_setaffinity(0, cpus)


# Seconds after the warm-up before counting, for every path alike: the
# garbage collection each worker runs after a push (lua/platform.lua) is the
# change's work, not a request's; under callgrind it takes ~10 s at 10,000
# Ingresses.
SETTLE_S = 20.0


def bench_instructions(harness: DataPlaneHarness, backend: NginxBackend, text: str, requests: int,
                       large: int = 10000) -> None:
    if not instructions.available():
        print("instructions per request: skipped (no valgrind)")
        return
    harness.nginx.stop()

    def pusher(config):
        sections = dynamic_sections(harness.localize(config))

        def push() -> None:
            for section in sections:
                harness.lua.push_section(section)
        return push

    counts = {}
    for name, host in PATHS.items():
        target = instructions.Target(name, harness.http_port, host, b"fast")
        counts[name] = instructions.measure(text, harness.state_dir, target, harness.lua.healthy,
                                            pusher(config_for(backend)), requests=requests, warmup=requests,
                                            settle=SETTLE_S)
    # An Ingress request while Gateway tables of their own exist (lua/bound.lua: a
    # mapped listener port): what $server_port and the table lookup add.
    name = "lua beside gateway tables"
    target = instructions.Target(name, harness.http_port, HOST, b"fast")
    gateway = BoundHosts(None, 1, (Server("gw.bench.example", locations=(Location("/", backend="bench-svc"),)),))
    counts[name] = instructions.measure(text, harness.state_dir, target, harness.lua.healthy,
                                        pusher(replace(config_for(backend), bound=(gateway,))),
                                        requests=requests, warmup=requests, settle=SETTLE_S)
    name = f"lua at {large:,} ingresses"
    target = instructions.Target(name, harness.http_port, HOST, b"fast")
    counts[name] = instructions.measure(text, harness.state_dir, target, harness.lua.healthy,
                                        pusher(config_for(backend, extra_ingresses=large)),
                                        requests=requests, warmup=requests, settle=SETTLE_S)
    print(f"instructions per request (callgrind, user space only; one nginx process per path,"
          f" {requests} requests after as many to warm up):")
    print("  " + "   ".join(f"{name} {count:,.0f}" for name, count in counts.items()))
    print(f"  static/lua {counts['static'] / counts['lua']:.3f}   floor/lua {counts['lua floor'] / counts['lua']:.3f}"
          f"   lua - floor {counts['lua'] - counts['lua floor']:,.0f}   floor - static"
          f" {counts['lua floor'] - counts['static']:,.0f}")


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


@dataclass(frozen=True)
class Memory:
    """nginx's memory at one moment (MB).

    Sums over master + workers, from /proc: ``rss`` (VmRSS) with its parts
    ``rss_anon`` (process heaps: the Lua VMs) and ``rss_shmem`` (shared-dict
    pages), and the same as PSS (smaps_rollup). RSS counts a shared page once
    per process that touched it (a dict page read by both workers counts
    twice, a page of the master's heap inherited by the workers three
    times); PSS splits it among them, so the PSS sum is the memory nginx
    really holds. From Lua (GET /memory, lua/memory.lua): each process's Lua
    heap (``lua``: master first, then the workers by id; garbage not yet
    collected included) and the bytes used in each shared dict (``dicts``:
    capacity minus whole free pages). ``maps``: per process (master, then the
    workers by pid order) its RSS by kind of mapping (_MAPPING_KINDS, from
    /proc/<pid>/smaps); ``traces``/``flushes``: JIT traces each worker
    compiled and whole-cache flushes, ``peaks`` the largest Lua heap each
    worker's ticks saw (lua/memory.lua: LuaJIT's allocator keeps the pages
    of that peak, so a worker's ``anon`` follows it, not ``lua``), so a rise of
    ``mcode`` or of the trace count tells re-recorded code apart from data.
    """

    rss: float
    rss_anon: float
    rss_shmem: float
    pss: float
    pss_anon: float
    pss_shmem: float
    lua: tuple[float, ...]
    dicts: dict[str, float]
    maps: tuple[dict[str, float], ...] = ()
    traces: tuple[tuple[int, int], ...] = ()
    peaks: tuple[float, ...] = ()

    def row(self) -> str:
        heaps = " ".join(f"{mb:.1f}" for mb in self.lua)
        used = " ".join(f"{name.removeprefix('platform_')} {mb:.1f}" for name, mb in self.dicts.items() if mb >= 0.05)
        maps = " | ".join(" ".join(f"{kind} {proc.get(kind, 0):.2f}" for kind in _MAPPING_KINDS if kind != "file")
                          for proc in self.maps)
        jit = " ".join(f"{n}/{f}" for n, f in self.traces)
        peaks = " ".join(f"{mb:.1f}" for mb in self.peaks)
        return (f"RSS {self.rss:.1f} (anon {self.rss_anon:.1f}, shmem {self.rss_shmem:.1f})  "
                f"PSS {self.pss:.1f} (anon {self.pss_anon:.1f}, shmem {self.pss_shmem:.1f})  "
                f"Lua heaps [master workers] {heaps}  dict used {used} MB\n"
                f"      RSS by mapping [master | workers] {maps} MB  Lua heap peaks {peaks}  traces/flushes [workers] {jit}")


# Kinds of mapping in /proc/<pid>/smaps: glibc malloc's main arena (nginx's
# pools, cjson's buffers), anonymous private memory (LuaJIT's allocator maps
# its arenas itself; glibc's big chunks and thread arenas), executable
# anonymous memory (LuaJIT's machine code areas), shared zones (nginx maps
# its shared dicts as /dev/zero), everything else (files, stack).
_MAPPING_KINDS = ("heap", "anon", "mcode", "shm", "file")


def _mapping_kind(name: str, perms: str) -> str:
    if name == "[heap]":
        return "heap"
    if name.startswith("/dev/zero") or name.startswith("/SYSV"):
        return "shm"
    if name == "":
        return "mcode" if "x" in perms else "anon"
    return "file"


def mappings_mb(pid: int) -> dict[str, float]:
    """A process's RSS by kind of mapping (MB)."""
    found = dict.fromkeys(_MAPPING_KINDS, 0.0)
    kind = "file"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(None, 5)
        if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            kind = _mapping_kind(head[5].strip() if len(head) > 5 else "", head[1])
        elif head[0] == "Rss:":
            found[kind] += int(head[1]) / 1024
    return found


def _kb_fields(path: Path, names: dict[str, str]) -> dict[str, int]:
    found = dict.fromkeys(names.values(), 0)
    for line in path.read_text().splitlines():
        field = line.split(":", 1)[0]
        if field in names:
            found[names[field]] += int(line.split()[1])
    return found


def nginx_memory(harness: DataPlaneHarness) -> Memory:
    pids = [harness.nginx.master_pid(), *harness.nginx.worker_pids()]
    kb: dict[str, int] = {}
    for pid in pids:
        for name, value in (_kb_fields(Path(f"/proc/{pid}/status"),
                                       {"VmRSS": "rss", "RssAnon": "rss_anon", "RssShmem": "rss_shmem"})
                            | _kb_fields(Path(f"/proc/{pid}/smaps_rollup"),
                                         {"Pss": "pss", "Pss_Anon": "pss_anon", "Pss_Shmem": "pss_shmem"})).items():
            kb[name] = kb.get(name, 0) + value
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(harness.runtime.socket)), timeout=5) as client:
        report = client.get("http://nginx/memory").raise_for_status().json()
    heaps = [report["master"], *sorted(report["workers"], key=lambda w: w["id"])]
    return Memory(**{name: value / 1024 for name, value in kb.items()},
                  maps=tuple(mappings_mb(pid) for pid in pids),
                  traces=tuple((w.get("traces", 0), w.get("flushes", 0)) for w in heaps[1:]),
                  peaks=tuple((w.get("peak_kb") or 0) / 1024 for w in heaps[1:]),
                  lua=tuple(h["lua_kb"] / 1024 for h in heaps if h),
                  dicts={name: (d["capacity"] - d["free"]) / 2**20 for name, d in sorted(report["dicts"].items())})


def mb(values) -> str:
    return " ".join(f"{v:.1f}" for v in values)


def anon(memory: Memory) -> str:
    """Each worker's anonymous RSS with its machine code (MB)."""
    return mb(p["anon"] + p["mcode"] for p in memory.maps[1:])


def _growth(start: Memory, end: Memory) -> str:
    """RSS (the issue's figure) and PSS of anon + shmem: what nginx itself holds.

    File-backed PSS (nginx, libluajit, libc) is left out of the PSS figure:
    its share moves whenever another program maps the same libraries."""
    own_start, own_end = start.pss_anon + start.pss_shmem, end.pss_anon + end.pss_shmem
    return (f"RSS {start.rss:.1f} -> {end.rss:.1f} MB ({(end.rss / start.rss - 1) * 100:+.1f}%),"
            f" PSS anon+shmem {own_start:.1f} -> {own_end:.1f} MB ({(own_end / own_start - 1) * 100:+.1f}%)")


def bench_route_changes(harness: DataPlaneHarness, changes: int, size: int) -> None:
    """Mixed route changes on a table of ``size`` Ingresses: latency to the
    first request served, reloads, nginx memory along the way (Memory)."""
    from tests.ingress.test_decide import ROUTE_CHANGES

    backend = NginxBackend("fast")
    try:
        base = config_for(backend, extra_ingresses=size)
        assert harness.apply(base).ok
        reloads = harness.registry.get_sample_value("nginx_ingress_controller_success")
        for _ in range(20):
            probe(harness.http_port)
        time.sleep(0.5)  # a warm-up tick of each worker records its heap (lua/memory.lua)
        before = nginx_memory(harness)
        print(f"  before any change: {before.row()}", flush=True)
        kinds = sorted(ROUTE_CHANGES)
        latencies = []
        warm = None  # the memory once the warm-up is over (after WARM_UP changes)
        for i in range(changes):
            host = f"new{i}.bench.example"
            # Every change adds a host (so its first request shows it landed)
            # and applies one kind of route change to the test host.
            kind = kinds[i % len(kinds)]
            changed = ROUTE_CHANGES[kind](_decide_base(backend))
            desired = replace(base, servers=(*base.servers, *changed.servers,
                                             Server(host, locations=(Location("/", backend="bench-svc"),))),
                              backends=(*base.backends, *(b for b in changed.backends)))
            start = time.perf_counter()
            result = harness.apply(desired)
            assert result.ok and result.kind == "dynamic", (kind, result)
            while _get_host(harness.http_port, host) != 200:
                if time.perf_counter() - start > 10:
                    raise RuntimeError(f"{kind}: not served within 10 s")
            latencies.append((time.perf_counter() - start) * 1000)
            if i + 1 == WARM_UP or (i + 1) % max(1, changes // 10) == 0 or i + 1 in _EARLY:
                parts = nginx_memory(harness)
                if i + 1 == WARM_UP:
                    warm = parts
                print(f"  after {i + 1} changes: {parts.row()}", flush=True)
        time.sleep(0.5)
        after = nginx_memory(harness)
        now = harness.registry.get_sample_value("nginx_ingress_controller_success")
        print(f"route changes, {changes} mixed kinds on {size:,} Ingresses, each to its first request served"
              f" (2 workers): {summary(sorted(latencies))}")
        print(f"  reloads: {now - reloads:.0f}; nginx (master + workers) before -> after: {_growth(before, after)}")
        if warm is not None:
            print(f"  after the warm-up ({WARM_UP} changes) -> after {changes}: {_growth(warm, after)}")
            print(f"  the step over the first {WARM_UP} changes is a one-time floor, not growth: each worker's Lua"
                  f" heap peak (live table + one change's garbage in flight; LuaJIT's allocator keeps the pages"
                  f" of its peak) {mb(before.peaks)} -> {mb(warm.peaks)} -> {mb(after.peaks)} MB, its anonymous"
                  f" RSS with machine code {anon(before)} -> {anon(warm)} -> {anon(after)} MB, JIT traces"
                  f" {mb(n for n, _ in before.traces)} -> {mb(n for n, _ in warm.traces)} ->"
                  f" {mb(n for n, _ in after.traces)} (flushes {sum(f for _, f in after.traces)}); each section's"
                  f" second version touches its dict pages once (RssShmem {before.rss_shmem:.1f} ->"
                  f" {warm.rss_shmem:.1f} -> {after.rss_shmem:.1f} MB)")
    finally:
        backend.stop()


# Memory is also shown after these changes: where a one-time step (a
# shared dict's pages touched first, the Lua heaps growing to their working
# size) shows, apart from growth.
_EARLY = (1, 2, 5, 10, 20, 30, 50, 100, 250, 500, 1000, 2500)
# Changes after which the Lua heaps have reached their working size: each
# worker's heap holds the live tables plus the garbage of replaced versions
# until a GC cycle ends, and LuaJIT's allocator keeps the pages of that peak
# for reuse; measured flat from here on (the first ~30 changes step up).
WARM_UP = 50


def _decide_base(backend) -> Configuration:
    """test_decide's base configuration, with real endpoints and no certificates."""
    from tests.ingress.test_decide import base

    config = base()
    return replace(config, certificates=(), backends=tuple(replace(b, endpoints=(backend.endpoint,))
                                                           for b in config.backends))


def _get_host(port: int, host: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/", headers={"Host": host, "Connection": "close"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--route-changes", type=int, default=1000)
    parser.add_argument("--route-table", type=int, default=10000, help="Ingresses in the table for route changes")
    parser.add_argument("--instruction-requests", type=int, default=2000)
    # On a machine shared with other work, a negative nice value (root only)
    # keeps that work from setting the pace; every path gets the same.
    parser.add_argument("--nice", type=int, default=-10, help="niceness of the worker, backend and wrk (0: leave)")
    parser.add_argument("--skip", action="append", default=[], choices=["throughput", "instructions", "propagation", "routes"])
    args = parser.parse_args()
    if not lua_ready():
        print("lua/ modules missing; nothing to benchmark", file=sys.stderr)
        return 1
    if {"throughput", "instructions"} - set(args.skip):
        harness = DataPlaneHarness()
        # One worker for the throughput run, so the paths compete for the
        # same single event loop and the comparison is not about scheduling.
        original = harness.localize
        harness.localize = lambda c: original(  # type: ignore[method-assign]
            replace(c, settings=replace(c.settings, workers=replace(c.settings.workers, processes=1)))
        )
        backend = NginxBackend("fast")
        try:
            result = harness.apply(config_for(backend))
            assert result.ok, result.error
            text = with_twins(harness.nginx.files.conf.read_text(), backend, harness.http_port)
            harness.nginx.install(text)
            harness.nginx.reload()
            if "throughput" not in args.skip:
                bench_throughput(harness, backend, args.rounds, args.seconds, args.connections, args.nice)
            if "instructions" not in args.skip:
                bench_instructions(harness, backend, text, args.instruction_requests)
        finally:
            backend.stop()
            harness.close()
    if "routes" not in args.skip:
        harness = DataPlaneHarness()
        try:
            bench_route_changes(harness, args.route_changes, args.route_table)
        finally:
            harness.close()
    if "propagation" not in args.skip:
        harness = DataPlaneHarness()  # two workers: a change must reach both
        try:
            bench_propagation(harness, args.changes, args.connections)
        finally:
            harness.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
