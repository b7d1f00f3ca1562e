"""`platformd --role ingress` end to end: real supervisord, nginx, controller,
health server, real HTTP backends; programs killed and the whole thing stopped.

The controller reads a folder of manifests (file source), so the backends may
live on loopback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.helpers.backends import HttpBackend
from tests.helpers.waiting import wait_for
from tests.supervisor.conftest import free_port

HOST = "role.test"


def _manifests(directory: Path, backends: list[HttpBackend]) -> None:
    docs = [
        {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "platform"},
         "spec": {"controller": "k8s.io/platform-ingress"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
         "spec": {"ports": [{"name": "http", "port": 80, "targetPort": "http"}], "selector": {"app": "web"}}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web", "namespace": "default"},
         "spec": {"ingressClassName": "platform", "rules": [{"host": HOST, "http": {"paths": [
             {"path": "/", "pathType": "Prefix",
              "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}},
    ]
    # One slice per backend: they share the address 127.0.0.1, so each slice
    # carries its own port for the port name "http".
    for b in backends:
        docs.append({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"web-{b.name}", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": b.port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [b.address], "conditions": {"ready": True}}],
        })
    (directory / "all.yaml").write_text(yaml.safe_dump_all(docs))


class Role:
    """A running `platformd --role ingress` and what the tests need to poke it."""

    def __init__(self, tmp: Path, backends: list[HttpBackend]) -> None:
        self.manifests = tmp / "manifests"
        self.manifests.mkdir()
        _manifests(self.manifests, backends)
        self.state = Path(f"/tmp/pr-{os.getpid()}-{free_port()}")
        self.http_port, self.https_port = free_port(), free_port()
        self.health_port, self.internal_port = free_port(), free_port()
        self.log = (tmp / "platformd.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "platformd.cli", "--role", "ingress", "--source", str(self.manifests),
             "--state-dir", str(self.state), "--health-port", str(self.health_port), "--health-address", "127.0.0.1",
             "--ingress-internal-port", str(self.internal_port),
             "--http-port", str(self.http_port), "--https-port", str(self.https_port)],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.http_port}/"
        self.client = httpx.Client(headers={"Host": HOST}, timeout=5.0)

    def get(self) -> httpx.Response:
        return self.client.get(self.url)

    def serving(self, names: set[str]) -> bool:
        seen = set()
        try:
            for _ in range(len(names) * 4):
                r = self.get()
                if r.status_code != 200:
                    return False
                seen.add(r.text)
        except httpx.HTTPError:
            return False
        return seen == names

    def healthy(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def program(self, name: str) -> dict:
        from platformd.health import supervisor_proxy

        return supervisor_proxy(self.state / "supervisor.sock").supervisor.getProcessInfo(name)

    def nginx_master(self) -> int:
        return int((self.state / "ingress" / "nginx.pid").read_text().strip())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.client.close()
        self.log.close()
        subprocess.run(["rm", "-rf", str(self.state)])


@pytest.fixture
def role(tmp_path):
    backends = [HttpBackend("b0"), HttpBackend("b1")]
    r = Role(tmp_path, backends)
    r.backends = backends
    try:
        wait_for(lambda: r.serving({"b0", "b1"}) and r.healthy(), timeout=60, interval=0.2)
        yield r
    finally:
        r.stop()
        for b in backends:
            b.stop()


def _children(pid: int) -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2:].split()[1]) == pid:
                out.add(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def test_kill_9_of_the_nginx_master_restores_traffic_within_3_seconds(role):
    old_master = role.nginx_master()
    old_workers = _children(old_master)
    assert old_workers
    os.kill(old_master, signal.SIGKILL)
    killed = time.monotonic()

    def restored():
        try:
            master = role.nginx_master()
        except (OSError, ValueError):
            return False
        # A new master, the orphaned workers gone (they would otherwise keep
        # serving stale state), and both backends served through it.
        return (master != old_master and _alive(master) and not any(_alive(w) for w in old_workers)
                and role.serving({"b0", "b1"}))

    wait_for(restored, timeout=15, interval=0.05)
    took = time.monotonic() - killed
    assert took < 3.0, f"traffic back through a new master after {took:.2f}s"
    wait_for(role.healthy, timeout=15)
    assert role.program("nginx")["statename"] == "RUNNING"


def test_killing_the_controller_fails_no_request(role):
    old_pid = role.program("ingress")["pid"]
    failures: list[str] = []
    served = 0
    stop = threading.Event()

    def load():
        nonlocal served
        with httpx.Client(headers={"Host": HOST}, timeout=5.0) as client:
            while not stop.is_set():
                try:
                    r = client.get(role.url)
                    if r.status_code != 200 or r.text not in ("b0", "b1"):
                        failures.append(f"{r.status_code} {r.text[:40]}")
                    served += 1
                except httpx.HTTPError as exc:
                    failures.append(repr(exc))

    worker = threading.Thread(target=load)
    worker.start()
    try:
        time.sleep(0.5)
        os.kill(old_pid, signal.SIGKILL)
        wait_for(lambda: role.program("ingress")["statename"] == "RUNNING" and role.program("ingress")["pid"] != old_pid,
                 timeout=30)
        wait_for(role.healthy, timeout=30)
        time.sleep(1.0)  # the new controller's first sync has been applied meanwhile
    finally:
        stop.set()
        worker.join()
    assert served > 20
    assert failures == []


def test_sigterm_finishes_in_flight_requests_and_exits_0_within_the_bound(role):
    slow = HttpBackend("slow", delay=2.0)
    try:
        _manifests(role.manifests, [slow])
        wait_for(lambda: role.get().text == "slow", timeout=20, interval=0.2)
        result: dict = {}

        def request():
            started = time.monotonic()
            try:
                r = httpx.get(role.url, headers={"Host": HOST}, timeout=10)
                result["status"], result["body"] = r.status_code, r.text
            except httpx.HTTPError as exc:
                result["error"] = repr(exc)
            result["took"] = time.monotonic() - started

        t = threading.Thread(target=request)
        t.start()
        time.sleep(0.5)  # the request is now waiting on the slow backend
        stopping = time.monotonic()
        role.proc.send_signal(signal.SIGTERM)
        t.join(timeout=15)
        assert result.get("status") == 200 and result.get("body") == "slow", result
        role.proc.wait(timeout=40)
        took = time.monotonic() - stopping
        assert role.proc.returncode == 0
        from platformd.supervise import STOP_BOUND_SECONDS

        assert took < STOP_BOUND_SECONDS
    finally:
        slow.stop()


def test_combined_health_status_and_metrics_cover_programs_and_ingress(role):
    base = f"http://127.0.0.1:{role.health_port}"
    doc = httpx.get(base + "/status", timeout=5).json()
    programs = {p["name"]: p for p in doc["programs"]}
    assert {"nginx", "ingress", "health"} <= set(programs)
    assert all(programs[n]["state"] == "RUNNING" and programs[n]["pid"] for n in ("nginx", "ingress", "health"))
    ingress = doc["components"]["ingress"]["status"]
    assert ingress["informers_synced"] is True
    assert ingress["backends"] >= 1 and ingress["endpoints"] == 2
    assert ingress["config_checksum"]
    metrics = httpx.get(base + "/metrics", timeout=5).text
    assert 'nginx_ingress_controller_config_last_reload_successful{program="ingress"} 1.0' in metrics
    assert 'platform_program_up{program="nginx"} 1' in metrics

    # A restart shows up in the program's restart count.
    os.kill(role.nginx_master(), signal.SIGKILL)
    wait_for(lambda: httpx.get(base + "/status", timeout=5).json()["healthy"]
             and {p["name"]: p for p in httpx.get(base + "/status", timeout=5).json()["programs"]}["nginx"]["restarts"] == 1,
             timeout=20, interval=0.2)
    table = subprocess.run([sys.executable, "-m", "platformd.ctl", "status", "--url", base],
                           capture_output=True, text=True, timeout=30)
    assert table.returncode == 0, table.stdout + table.stderr
    assert "informers synced: yes" in table.stdout


def test_platformctl_backends_and_conf_read_the_running_node(role):
    def ctl(*args):
        return subprocess.run([sys.executable, "-m", "platformd.ctl", *args, "--state-dir", str(role.state)],
                               capture_output=True, text=True, timeout=30)

    backends = ctl("backends")
    assert backends.returncode == 0, backends.stderr
    endpoints = {f"{b.address}:{b.port}" for b in role.backends}
    row = next(line for line in backends.stdout.splitlines() if line.startswith("default.web.80"))
    assert "round_robin" in row and all(e in row for e in endpoints)
    as_json = json.loads(ctl("backends", "-o", "json").stdout)
    assert as_json["checksum"] and as_json["data"][0]["name"] == "default.web.80"
    conf = ctl("conf")
    # Hosts are routes (Lua data), not nginx.conf: the file is the same for any Ingress.
    assert conf.returncode == 0 and "upstream_balancer" in conf.stdout and "role.test" not in conf.stdout
    missing = subprocess.run([sys.executable, "-m", "platformd.ctl", "conf", "--state-dir", "/nonexistent"],
                             capture_output=True, text=True, timeout=30)
    assert missing.returncode == 2 and missing.stderr.startswith("platformctl: cannot read")


def test_platformctl_finds_the_running_role_with_no_flags(role):
    """platformd records itself (platformd.localrun); platformctl needs no --url or --state-dir."""

    def ctl(*args):
        return subprocess.run([sys.executable, "-m", "platformd.ctl", *args],
                              capture_output=True, text=True, timeout=30)

    status = ctl("status")
    assert status.returncode == 0, status.stderr
    assert "informers synced: yes" in status.stdout
    backends = ctl("backends")
    assert backends.returncode == 0 and "default.web.80" in backends.stdout, backends.stderr
    conf = ctl("conf")
    assert conf.returncode == 0 and "upstream_balancer" in conf.stdout
    # Stopped: the pointer goes with the run.
    role.stop()
    assert not Path(os.environ["PLATFORM_POINTER"]).exists()
