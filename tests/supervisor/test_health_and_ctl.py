"""The combined health server and `platformctl status` against a real supervisord."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from tests.helpers.waiting import wait_for
from tests.supervisor.conftest import free_port

SLEEP = "sleep 1000"


@pytest.fixture
def health_server(supervisord_factory, component):
    sd = supervisord_factory({"nginx": SLEEP, "ingress": SLEEP, "health": SLEEP})
    wait_for(lambda: sd.ctl("status").count("RUNNING") == 3)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "platformd.cli", "health", "--role", "ingress", "--address", "127.0.0.1",
         "--port", str(port), "--supervisor-socket", str(sd.socket), "--ingress-url", component.url],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def up():
        try:
            return httpx.get(url + "/status", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up)
    yield url, sd, component
    proc.terminate()
    proc.wait(timeout=10)


def _ctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "platformd.ctl", *args], capture_output=True, text=True, timeout=30)


def test_healthy_when_all_programs_run_and_component_is_healthy(health_server):
    url, sd, component = health_server
    assert httpx.get(url + "/healthz").status_code == 200
    assert httpx.get(url + "/readyz").status_code == 200
    doc = httpx.get(url + "/status").json()
    assert doc["healthy"] and doc["role"] == "ingress"
    states = {p["name"]: p for p in doc["programs"]}
    assert {n: p["state"] for n, p in states.items()} == {"nginx": "RUNNING", "ingress": "RUNNING", "health": "RUNNING"}
    assert all(p["pid"] for p in states.values())
    assert doc["components"]["ingress"]["status"]["config_checksum"] == "abc123"


def test_unhealthy_when_a_program_is_stopped_or_component_fails(health_server):
    url, sd, component = health_server
    sd.ctl("stop", "nginx")
    resp = httpx.get(url + "/healthz")
    assert resp.status_code == 503 and "program nginx is STOPPED" in resp.text
    sd.ctl("start", "nginx")
    wait_for(lambda: httpx.get(url + "/healthz").status_code == 200)
    component.healthy = False
    resp = httpx.get(url + "/healthz")
    assert resp.status_code == 503 and "component ingress unhealthy" in resp.text
    assert httpx.get(url + "/readyz").status_code == 503


def test_metrics_combine_components_with_program_label(health_server):
    url, sd, component = health_server
    text = httpx.get(url + "/metrics").text
    assert 'platform_program_up{program="nginx"} 1' in text
    assert 'nginx_ingress_controller_success_total{program="ingress"} 3.0' in text
    from prometheus_client.parser import text_string_to_metric_families

    names = [f.name for f in text_string_to_metric_families(text)]
    assert len(names) == len(set(names)), "each family exposed once"


def test_platformctl_status_table_and_json_healthy(health_server):
    url, _, _ = health_server
    table = _ctl("status", "--url", url)
    assert table.returncode == 0, table.stderr
    assert "healthy: yes" in table.stdout
    assert "PROGRAM" in table.stdout and "nginx" in table.stdout and "RUNNING" in table.stdout
    assert "config checksum:  abc123" in table.stdout
    js = _ctl("status", "--url", url, "--output", "json")
    assert js.returncode == 0
    assert json.loads(js.stdout)["healthy"] is True


def test_platformctl_status_unhealthy_exits_1_and_names_the_problem(health_server):
    url, sd, _ = health_server
    sd.ctl("stop", "ingress")
    table = _ctl("status", "--url", url)
    assert table.returncode == 1
    assert "healthy: NO" in table.stdout and "program ingress is STOPPED" in table.stdout
    js = _ctl("status", "--url", url, "-o", "json")
    assert js.returncode == 1 and json.loads(js.stdout)["healthy"] is False


def test_platformctl_status_unreachable_gives_one_line_and_exit_2():
    port = free_port()
    result = _ctl("status", "--url", f"http://127.0.0.1:{port}")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "not reachable" in result.stderr
