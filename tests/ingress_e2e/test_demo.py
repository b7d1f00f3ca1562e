"""`make demo` starts (supervisord: nginx + controller + health), serves, and stops cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.backends import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not os.path.exists("/usr/sbin/nginx"), reason="nginx is not installed")
def test_demo_starts_and_serves():
    http, https, health, internal = free_port(), free_port(), free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "platformd.demo", "--duration", "15", "--http-port", str(http), "--https-port",
         str(https), "--health-port", str(health), "--internal-port", str(internal)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl-C stops the demo" in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(60), "".join(lines[-30:])
        output = "".join(lines)
        assert "supervisord: nginx + controller + health" in output  # not the fallback
        assert f"curl -H 'Host: demo.local' http://127.0.0.1:{http}/" in output
        with httpx.Client(base_url=f"http://127.0.0.1:{http}", headers={"Host": "demo.local"}, timeout=5) as c:
            assert c.get("/", headers={"X-Canary": "never"}).text.startswith("web:")  # weight sends 20% to the canary
            assert c.get("/api/items").text.startswith("api:")
            assert c.get("/", headers={"X-Canary": "always"}).text.startswith("web-canary:")
            # The HTTPRoute beside the Ingresses: the Gateway loop's first table asks the
            # Ingress controller for a sync, which may wait out --sync-rate-limit.
            gateway_host = {"Host": "gateway.demo.local"}
            deadline = time.monotonic() + 15
            while not c.get("/api/items", headers=gateway_host).text.startswith("api:"):
                assert time.monotonic() < deadline, "gateway.demo.local never served"
                time.sleep(0.2)
            assert c.get("/", headers=gateway_host).text.startswith("web:")
        status = httpx.get(f"http://127.0.0.1:{internal}/status", timeout=5).json()
        assert status["ingresses"] == 2 and status["last_reload_result"] == "ok"
        # Serving can now come before supervisord's startsecs has passed (no
        # reload on the way): healthy once every program counts as RUNNING.
        deadline = time.monotonic() + 15
        while (healthz := httpx.get(f"http://127.0.0.1:{health}/healthz", timeout=5)).status_code != 200:
            assert time.monotonic() < deadline, healthz.text
            time.sleep(0.2)
        assert proc.wait(60) == 0, "".join(lines[-30:])
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
    # Everything it started is gone: nothing listens on the demo port any more.
    time.sleep(0.5)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{http}/", timeout=2)
