"""The applier against a real nginx with the real Lua, and its coalescing on fakes."""

from __future__ import annotations

import functools
import re
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from platformd.ingress.dataplane import DataPlane
from platformd.ingress.model import Backend, Configuration, Endpoint, Listen, Location, Logging, PathMatch, Server
from platformd.ingress.nginx import NginxFiles, ReloadError
from platformd.ingress.render import dynamic_sections
from platformd.ingress.view import RuntimePaths
from tests.helpers import waiting

HOST = "example.com"


def with_globals(config: Configuration, **settings) -> Configuration:
    """``config`` with other global settings (the only changes that reload)."""
    return replace(config, settings=replace(config.settings, **settings))


def config_for(*endpoints, extra_paths: int = 0, regex: str | None = None) -> Configuration:
    locations = [Location("/", backend="svc")]
    locations += [Location(f"/extra{i}", backend="svc") for i in range(extra_paths)]
    if regex is not None:
        locations.append(Location(regex, match=PathMatch.REGEX, backend="svc"))
    return Configuration(
        servers=(Server(HOST, locations=tuple(locations)),),
        backends=(Backend("svc", endpoints=tuple(e.endpoint for e in endpoints)),),
    )


def metric(plane_harness, name: str) -> float:
    value = plane_harness.registry.get_sample_value(f"nginx_ingress_controller_{name}")
    assert value is not None, name
    return value


wait_for = functools.partial(waiting.wait_for, ignore=(Exception,))


# --- real nginx ---------------------------------------------------------------


def test_endpoint_change_is_applied_without_reload(dataplane, backends):
    b0, b1, b2 = backends(3)
    result = dataplane.apply(config_for(b0))
    assert result.ok and result.kind == "start", (result, dataplane.error_log())
    assert dataplane.get("/", host=HOST).text == "b0"
    workers = dataplane.nginx.worker_pids()
    master = dataplane.nginx.master_pid()
    reloads = metric(dataplane, "success")

    for target in (b1, b2, b0, b1):
        result = dataplane.apply(config_for(target))
        assert result.ok and result.kind == "dynamic", result
        # Lua confirmed the checksum, so the very next request must land there
        # (two workers: check several requests).
        assert {dataplane.get("/", host=HOST).text for _ in range(6)} == {target.name}

    both = dataplane.apply(config_for(b0, b2))
    assert both.ok and both.kind == "dynamic"
    assert {dataplane.get("/", host=HOST).text for _ in range(20)} == {"b0", "b2"}
    assert dataplane.nginx.worker_pids() == workers
    assert dataplane.nginx.master_pid() == master
    assert metric(dataplane, "success") == reloads
    assert dataplane.apply(config_for(b0, b2)).kind == "noop"


def test_global_change_reloads_and_confirms_new_workers(dataplane, backends):
    (b0,) = backends(1)
    assert dataplane.apply(config_for(b0)).ok
    before = dataplane.nginx.worker_pids()
    result = dataplane.apply(with_globals(dataplane.localize(config_for(b0)), keepalive_timeout=10))
    assert result.ok and result.kind == "reload", result
    after = dataplane.nginx.worker_pids()
    assert after and not (after & before)
    assert dataplane.get("/", host=HOST).text == "b0"
    assert metric(dataplane, "config_last_reload_successful") == 1
    assert metric(dataplane, "success") == 2  # start + reload
    assert metric(dataplane, "config_last_reload_successful_timestamp_seconds") > 0
    assert metric(dataplane, "config_hash") > 0


def test_new_location_with_new_backend_is_served_without_a_reload(dataplane, backends):
    b0, b1 = backends(2)
    assert dataplane.apply(config_for(b0)).ok
    workers = dataplane.nginx.worker_pids()
    desired = Configuration(
        servers=(Server(HOST, locations=(Location("/", backend="svc"), Location("/new", backend="fresh"))),),
        backends=(Backend("svc", endpoints=(b0.endpoint,)), Backend("fresh", endpoints=(b1.endpoint,))),
    )
    result = dataplane.apply(desired)
    assert result.ok and result.kind == "dynamic"
    first = dataplane.get("/new", host=HOST)
    assert (first.status_code, first.text) == (200, "b1")
    # and back: the location and its backend go away together
    assert dataplane.apply(config_for(b0)).kind == "dynamic"
    assert dataplane.get("/new", host=HOST).text == "b0"  # now served by "/"
    assert "fresh" not in str(dataplane.lua.get("backends"))
    assert dataplane.nginx.worker_pids() == workers
    assert metric(dataplane, "success") == 1  # the start only


def test_without_start_permission_a_dead_nginx_is_reported(tmp_path):
    from platformd.ingress.luaclient import LuaClient
    from platformd.ingress.nginx import NginxProcess

    runtime = RuntimePaths(tmp_path, tmp_path / "lua", tmp_path / "c.crt", tmp_path / "c.key")
    lua = LuaClient(runtime.socket)
    plane = DataPlane(NginxProcess(NginxFiles(tmp_path)), lua, runtime, CollectorRegistry(), start_nginx=False,
                      external_master_wait=0.3)
    started = time.monotonic()
    result = plane.apply(Configuration())
    lua.close()
    assert not result.ok and "not running" in str(result.error)
    assert plane.running is None
    assert time.monotonic() - started >= 0.3  # it gave the supervisor's nginx its time


def test_without_start_permission_a_sync_waits_for_the_supervisors_nginx(tmp_path):
    class LateNginx(FakeNginx):
        """A master that its supervisor brings up a moment after the controller asks."""

        def __init__(self, state_dir):
            super().__init__(state_dir, reload_seconds=0)
            self.up_at = time.monotonic() + 0.3

        def master_pid(self):
            return 4242 if time.monotonic() >= self.up_at else None

    runtime = RuntimePaths(tmp_path, tmp_path / "lua", tmp_path / "c.crt", tmp_path / "c.key")
    nginx = LateNginx(tmp_path)
    plane = DataPlane(nginx, FakeLua(), runtime, CollectorRegistry(), start_nginx=False)
    result = plane.apply(config_for())
    assert result.ok and result.kind == "reload", result
    assert nginx.reloads == 1 and plane.running == config_for()


def test_a_master_already_running_the_rendered_file_reports_its_hash(tmp_path):
    """Under supervisord nginx starts from the file the controller renders:
    nothing to reload, but ``config_hash`` still says what runs (it stayed 0)."""
    runtime = RuntimePaths(tmp_path, tmp_path / "lua", tmp_path / "c.crt", tmp_path / "c.key")
    nginx = FakeNginx(tmp_path, reload_seconds=0)
    assert DataPlane(nginx, FakeLua(), runtime, CollectorRegistry(), start_nginx=False).apply(config_for()).ok
    registry = CollectorRegistry()
    restarted = DataPlane(nginx, FakeLua(), runtime, registry, start_nginx=False)
    assert restarted.apply(config_for()).ok
    assert nginx.reloads == 1  # the first controller's only
    assert registry.get_sample_value("nginx_ingress_controller_config_hash") not in (None, 0.0)


def test_global_settings_nginx_refuses_are_left_out_and_the_rest_applied(dataplane, backends, monkeypatch):
    (b0,) = backends(1)
    good = config_for(b0)
    assert dataplane.apply(good).ok
    live = dataplane.nginx.files.conf.read_text()
    workers = dataplane.nginx.worker_pids()

    # The validator refuses a log format naming an unknown variable; switched
    # off here, it stands for any gap between our checks and nginx: only
    # `nginx -t` can refuse it then. The same sync adds a path: that is applied.
    monkeypatch.setattr("platformd.ingress.validate.is_nginx_variable", lambda name: True)
    broken = with_globals(dataplane.localize(config_for(b0, extra_paths=1)),
                          logging=Logging(format="$remote_addr $hostX"))
    result = dataplane.apply(broken)

    assert result.ok, result
    ((kind, _, reason),) = result.refused
    assert kind == "settings" and "hostx" in reason.lower()
    assert dataplane.nginx.files.conf.read_text() == live
    assert not dataplane.nginx.files.candidate.exists()
    assert dataplane.nginx.worker_pids() == workers
    assert dataplane.get("/extra0", host=HOST).text == "b0"  # the route change went through
    assert metric(dataplane, "config_last_reload_successful") == 0
    assert metric(dataplane, "errors") == 1
    assert dataplane.plane.running.settings == dataplane.localize(good).settings

    fixed = dataplane.apply(with_globals(dataplane.localize(good), keepalive_timeout=10))
    assert fixed.ok and fixed.kind == "reload"
    assert metric(dataplane, "config_last_reload_successful") == 1


def test_reload_that_nginx_cannot_apply_is_reported(dataplane, backends):
    """nginx -t passes, but the master cannot bind the new port: it keeps
    the old workers; we notice, report, and restore the file they run."""
    (b0,) = backends(1)
    dataplane.plane.reload_timeout = 4.0
    assert dataplane.apply(config_for(b0)).ok
    live = dataplane.nginx.files.conf.read_text()
    workers = dataplane.nginx.worker_pids()
    with socket.socket() as blocker:
        blocker.bind(("0.0.0.0", 0))
        blocker.listen(1)
        taken = blocker.getsockname()[1]
        config = dataplane.localize(config_for(b0))
        config = replace(config, settings=replace(config.settings, listen=Listen(taken, dataplane.https_port)))
        result = dataplane.plane.apply(config)
    assert isinstance(result.error, ReloadError), result
    assert dataplane.nginx.files.conf.read_text() == live
    assert dataplane.nginx.worker_pids() == workers
    assert dataplane.get("/", host=HOST).text == "b0"
    assert metric(dataplane, "config_last_reload_successful") == 0


def _wrk_errors(output: str) -> tuple[int, int, int]:
    """(requests, non-2xx/3xx responses, socket errors) from wrk's summary."""
    requests = int(re.search(r"(\d+) requests in", output).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    socket_errors = sum(int(n) for n in sock.groups()) if sock else 0
    return requests, int(non2xx.group(1)) if non2xx else 0, socket_errors


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_twenty_reloads_under_load_lose_no_request(dataplane, backends):
    """Every change is global (a reload); wrk counts failed requests.

    wrk sends ``Connection: close``: an HTTP/1.1 keep-alive client whose idle
    connection an old worker closes at shutdown sees a reset and must retry
    (RFC 9112 9.3.1), which wrk does not do and counts as an error. That is
    an nginx property independent of our reload path; with one request per
    connection, every accepted connection must be answered.
    """
    (fast,) = backends(1, kind="nginx")
    assert dataplane.apply(config_for(fast)).ok
    wrk = subprocess.Popen(
        ["wrk", "-t1", "-c8", "-d12s", "-H", "Connection: close", "-H", f"Host: {HOST}", dataplane.http_url + "/"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        time.sleep(1.0)
        reloads = 0
        for i in range(1, 21):
            result = dataplane.apply(with_globals(dataplane.localize(config_for(fast)), keepalive_requests=1000 + i))
            assert result.ok and result.kind == "reload", result
            reloads += 1
            time.sleep(0.25)
        output, _ = wrk.communicate(timeout=30)
    finally:
        if wrk.poll() is None:
            wrk.kill()
    requests, non2xx, socket_errors = _wrk_errors(output)
    assert reloads == 20
    assert requests > 1000, output
    assert (non2xx, socket_errors) == (0, 0), output


def test_master_killed_and_restarted_gets_state_pushed_again(dataplane, backends):
    b0, b1 = backends(2)
    assert dataplane.apply(config_for(b0)).ok
    assert dataplane.apply(config_for(b1)).kind == "dynamic"
    assert dataplane.get("/", host=HOST).text == "b1"
    dataplane.watch(interval=0.05)

    assert dataplane.plane.in_sync()
    old = dataplane.nginx.kill_master()
    new = dataplane.nginx.start()  # what supervisord does
    assert new != old
    # A fresh master has empty shared dicts until the watcher pushes again.
    assert wait_for(lambda: dataplane.get("/", host=HOST).text == "b1", timeout=10), dataplane.error_log()
    assert wait_for(dataplane.plane.in_sync)
    backends_section = dynamic_sections(dataplane.plane.running)[0]
    assert dataplane.lua.checksum("backends") == backends_section.checksum
    assert dataplane.apply(config_for(b0)).kind == "dynamic"
    assert {dataplane.get("/", host=HOST).text for _ in range(6)} == {"b0"}


def test_a_master_started_after_kill_9_serves_the_last_configuration_from_its_first_request(dataplane, backends):
    """No watcher here: nothing pushes to the new master; it loads the sections
    the controller last had confirmed (configuration.restore in init_by_lua)."""
    b0, b1 = backends(2)
    tls_host = Server("secure.example", tls=True, locations=(Location("/", backend="svc"),))
    config = replace(config_for(b1), servers=(*config_for(b1).servers, tls_host))
    assert dataplane.apply(config_for(b0)).ok
    assert dataplane.apply(config).kind == "dynamic"
    assert dataplane.plane.state_files.flush()
    assert oct((dataplane.runtime.lua_state / "certificates.json").stat().st_mode & 0o777) == "0o600"
    dataplane.nginx.kill_master()
    dataplane.nginx.start()  # what supervisord does
    first = dataplane.get("/", host=HOST)
    assert (first.status_code, first.text) == (200, "b1")
    assert dataplane.get("/", host="secure.example").text == "b1"
    assert dataplane.lua.checksum("routes") == dynamic_sections(dataplane.plane.running)[2].checksum


# --- coalescing, on fakes -------------------------------------------------------


class FakeNginx:
    """Stands in for NginxProcess: reloads take ``reload_seconds``."""

    def __init__(self, state_dir: Path, reload_seconds: float) -> None:
        self.files = NginxFiles(state_dir)
        self.files.prepare()
        self.reload_seconds = reload_seconds
        self.reloads = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def master_pid(self):
        return 4242

    def bound_error_log(self, limit: int) -> bool:
        return False

    def install(self, text: str) -> None:
        self.files.conf.write_text(text)

    def reload(self, timeout: float = 10.0):
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        time.sleep(self.reload_seconds)
        with self._lock:
            self.in_flight -= 1
            self.reloads += 1
        return {1}


class FakeLua:
    def __init__(self) -> None:
        self.pushes: list[tuple[str, str]] = []

    def push_section(self, section):
        self.pushes.append((section.name, section.checksum))
        return section.checksum

    def push_delta(self, delta):
        self.pushes.append(("backends", delta.checksum))
        return delta.checksum


def test_changes_arriving_during_a_reload_coalesce(tmp_path):
    """Nine global changes handed over while the first reload runs: one more
    reload applies the newest, and every waiter gets its result. Synchronised
    on events (the reload blocks until released), not on sleeps."""
    started, release = threading.Event(), threading.Event()

    class BlockingNginx(FakeNginx):
        def reload(self, timeout: float = 10.0):
            if self.reloads == 0:
                started.set()
                assert release.wait(10)
            return super().reload(timeout)

    nginx, lua = BlockingNginx(tmp_path, reload_seconds=0), FakeLua()
    runtime = RuntimePaths(tmp_path, tmp_path / "lua", tmp_path / "c.crt", tmp_path / "c.key")
    plane = DataPlane(nginx, lua, runtime, CollectorRegistry())
    base = Configuration(servers=(Server(HOST, locations=(Location("/", backend="svc"),)),))
    plane._running = base  # as if started; the next global change reloads
    plane._pushed_to_master = 4242

    configs = [with_globals(base, keepalive_requests=1001 + i) for i in range(10)]
    results = [None] * len(configs)
    first = threading.Thread(target=lambda: results.__setitem__(0, plane.apply(configs[0])))
    first.start()
    assert started.wait(10)  # the first reload is in flight
    waiters = [plane.submit(config) for config in configs[1:]]  # handed over, in order
    others = [threading.Thread(target=lambda i=i, w=w: results.__setitem__(i, w()))
              for i, w in enumerate(waiters, start=1)]
    for t in others:
        t.start()
    release.set()
    for t in [first, *others]:
        t.join(timeout=10)

    assert all(r is not None and r.ok for r in results)
    assert nginx.max_in_flight == 1
    assert nginx.reloads == 2  # the first, then one for everything that queued behind it
    assert plane.running == configs[-1]


def test_reloads_are_rate_limited_and_the_rest_is_served_meanwhile(tmp_path):
    """--sync-rate-limit bounds reloads only: a global change too soon after the
    last reload is deferred, while the routes of the same configuration go at once."""
    from platformd.common.clock import FakeClock

    clock = FakeClock()
    nginx, lua = FakeNginx(tmp_path, reload_seconds=0), FakeLua()
    runtime = RuntimePaths(tmp_path, tmp_path / "lua", tmp_path / "c.crt", tmp_path / "c.key")
    plane = DataPlane(nginx, lua, runtime, CollectorRegistry(), clock=clock, min_reload_interval=3.0)
    base = Configuration(servers=(Server(HOST, locations=(Location("/", backend="svc"),)),))
    plane._running, plane._pushed_to_master = base, 4242
    assert plane.apply(with_globals(base, keepalive_timeout=10)).kind == "reload"
    assert nginx.reloads == 1

    clock.advance(1.0)
    soon = replace(with_globals(base, keepalive_timeout=20),
                   servers=(Server(HOST, locations=(Location("/", backend="svc"), Location("/new", backend="svc"))),))
    result = plane.apply(soon)
    assert result.ok and result.kind == "dynamic" and result.reload_in == pytest.approx(2.0)
    assert nginx.reloads == 1
    assert lua.pushes[-1][0].startswith("routes_")  # the new path is served already
    clock.advance(2.0)
    again = plane.apply(soon)
    assert again.ok and again.kind == "reload" and again.reload_in == 0
    assert nginx.reloads == 2 and plane.running == soon


def test_a_foreign_change_to_lua_is_repaired(tmp_path):
    """Someone else POSTs to the configuration socket: check() reads the
    checksums back and pushes what the controller confirmed again."""
    from platformd.common.clock import FakeClock

    class Readback(FakeLua):
        def __init__(self):
            super().__init__()
            self.held: dict[str, str] = {}

        def push_section(self, section):
            self.held[section.name] = section.checksum
            return super().push_section(section)

        def push_delta(self, delta):
            self.held["backends"] = delta.checksum
            return super().push_delta(delta)

        def checksums(self):
            return dict(self.held)

    clock = FakeClock()
    lua = Readback()
    runtime = RuntimePaths(tmp_path, tmp_path / "lua", tmp_path / "c.crt", tmp_path / "c.key")
    plane = DataPlane(FakeNginx(tmp_path, reload_seconds=0), lua, runtime, CollectorRegistry(), clock=clock)
    config = hosts_site("a.example")
    assert plane.apply(config).ok
    clock.advance(5)
    assert plane.check() is False  # nothing foreign
    lua.held["routes"] = "f" * 64  # a foreign POST
    clock.advance(5)
    assert plane.check() is True
    assert lua.held["routes"] == dynamic_sections(config)[2].checksum


def hosts_site(*hosts: str, port: int = 80) -> Configuration:
    """One plain host per name, each with a backend of its own name."""
    return Configuration(servers=tuple(Server(h, locations=(Location("/", backend=h),)) for h in hosts),
                         backends=tuple(Backend(h, endpoints=(Endpoint("10.0.0.1", port),)) for h in hosts))


# --- Lua client: retries, confirmation, refusal (fake transport) ---------------


class ScriptedLua:
    """An httpx transport answering like configuration.lua, with faults."""

    def __init__(self, post_failures: int = 0, stale_gets: int = 0, refuse: int | None = None,
                 stale_posts: int = 0, lost_answers: int = 0) -> None:
        self.post_failures, self.stale_gets, self.refuse = post_failures, stale_gets, refuse
        self.stale_posts = stale_posts  # 201 answers naming another checksum in force
        self.lost_answers = lost_answers  # POSTs stored whose answer never arrives
        self.stored: dict[str, str] = {}
        self.posts = 0
        self.gets = 0

    def __call__(self, request):
        import json

        import httpx

        if request.method == "POST":
            self.posts += 1
            if self.refuse is not None:
                return httpx.Response(self.refuse, text="bad payload")
            if self.post_failures:
                self.post_failures -= 1
                raise httpx.ConnectError("connection refused", request=request)
            body = json.loads(request.content)
            self.stored[request.url.path.rsplit("/", 1)[1]] = body["checksum"]
            if self.lost_answers:
                self.lost_answers -= 1
                raise httpx.ReadError("connection reset", request=request)
            in_force = body["checksum"]
            if self.stale_posts:
                self.stale_posts -= 1
                in_force = "old"
            return httpx.Response(201, json={"checksum": in_force, "version": self.posts})
        self.gets += 1
        summary = {name: {"checksum": self.stored.get(name), "version": 1} for name in ("backends", "certificates", "routes")}
        if self.stale_gets:
            self.stale_gets -= 1
            summary["backends"]["checksum"] = "old"
        return httpx.Response(200, json=summary)


def lua_client(script: ScriptedLua, deadline: float = 2.0):
    import httpx

    from platformd.ingress.luaclient import LuaClient

    return LuaClient(Path("/nonexistent.sock"), transport=httpx.MockTransport(script), deadline=deadline)


def test_lua_push_retries_until_the_checksum_is_confirmed():
    from platformd.ingress.render import backends_checksum as checksum

    script = ScriptedLua(post_failures=2, stale_posts=1, stale_gets=3)
    client = lua_client(script)
    data = [{"name": "svc", "endpoints": []}]
    assert client.push("backends", data) == checksum(data)
    assert script.posts == 4  # two refused connections, one stale confirmation, then done
    assert script.stored["backends"] == checksum(data)


def test_lua_push_confirms_from_the_post_answer_alone():
    from platformd.ingress.render import backends_checksum as checksum

    script = ScriptedLua()
    data = [{"name": "svc", "endpoints": []}]
    assert lua_client(script).push("backends", data) == checksum(data)
    assert (script.posts, script.gets) == (1, 0)


def test_lua_push_after_a_lost_answer_confirms_by_get_without_posting_again():
    from platformd.ingress.render import backends_checksum as checksum

    script = ScriptedLua(lost_answers=1)
    data = [{"name": "svc", "endpoints": []}]
    assert lua_client(script).push("backends", data) == checksum(data)
    assert (script.posts, script.gets) == (1, 1)


def test_lua_push_does_not_retry_a_payload_too_large_for_the_shared_dict():
    from platformd.ingress.luaclient import LuaRejected, LuaTooLarge

    script = ScriptedLua(refuse=507)
    with pytest.raises(LuaTooLarge) as err:
        lua_client(script).push("backends", [])
    assert isinstance(err.value, LuaRejected) and err.value.status == 507 and script.posts == 1


def test_lua_push_stops_at_once_on_refusal_and_gives_up_after_the_deadline():
    from platformd.ingress.luaclient import LuaRejected, LuaUnavailable

    refusing = ScriptedLua(refuse=400)
    with pytest.raises(LuaRejected) as err:
        lua_client(refusing).push("backends", [])
    assert err.value.status == 400 and refusing.posts == 1

    down = ScriptedLua(post_failures=10**6)
    started = time.monotonic()
    with pytest.raises(LuaUnavailable, match="ConnectError"):
        lua_client(down, deadline=0.3).push("backends", [])
    assert time.monotonic() - started < 1.5
