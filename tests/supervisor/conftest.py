"""Fixtures: a real supervisord with stand-in programs, and a stand-in component."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.helpers.loopback_http import LoopbackHttp
from tests.helpers.waiting import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandInComponent:
    """An HTTP server with a component's internal endpoints; health is switchable."""

    def __init__(self) -> None:
        self.healthy = True
        self.status = {"informers_synced": True, "last_sync_time": time.time(), "config_checksum": "abc123",
                       "reload_count": 3, "last_reload_result": "ok", "ingresses": 2, "backends": 2, "endpoints": 5}
        self.metrics = ("# HELP nginx_ingress_controller_success Reloads.\n"
                        "# TYPE nginx_ingress_controller_success counter\n"
                        "nginx_ingress_controller_success_total 3.0\n")
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path == "/healthz" or self.path == "/readyz":
                    code, body, ctype = (200 if outer.healthy else 500), "ok", "text/plain"
                elif self.path == "/status":
                    code, body, ctype = 200, json.dumps(outer.status), "application/json"
                elif self.path == "/metrics":
                    code, body, ctype = 200, outer.metrics, "text/plain"
                else:
                    code, body, ctype = 404, "", "text/plain"
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._http = LoopbackHttp(H)
        self.url = self._http.url

    def close(self) -> None:
        self._http.stop()


@pytest.fixture
def component():
    c = StandInComponent()
    yield c
    c.close()


class RealSupervisord:
    def __init__(self, state: Path, programs: dict[str, str]) -> None:
        self.state = state
        self.socket = state / "supervisor.sock"
        lines = [
            "[supervisord]", "nodaemon=true", f"logfile={state}/supervisord.log", f"pidfile={state}/sd.pid",
            "[unix_http_server]", f"file={self.socket}",
            "[rpcinterface:supervisor]",
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
        ]
        for name, command in programs.items():
            lines += [f"[program:{name}]", f"command={command}", "startsecs=0", "autorestart=true",
                      "startretries=100"]
        conf = state / "supervisord.conf"
        conf.write_text("\n".join(lines) + "\n")
        self.proc = subprocess.Popen([sys.executable, "-m", "supervisor.supervisord", "-c", str(conf)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self.socket.exists)

    def ctl(self, *args: str) -> str:
        return subprocess.run([sys.executable, "-m", "supervisor.supervisorctl", "-s", f"unix://{self.socket}", *args],
                              capture_output=True, text=True, timeout=20).stdout

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def supervisord_factory(tmp_path):
    started: list[RealSupervisord] = []

    def make(programs: dict[str, str]) -> RealSupervisord:
        sd = RealSupervisord(tmp_path, programs)
        started.append(sd)
        return sd

    yield make
    for sd in started:
        sd.stop()
