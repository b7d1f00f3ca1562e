"""Real HTTP backends on 127.0.0.1 for data-plane tests and benchmarks.

Two kinds, same surface (``name``, ``address``, ``port``, ``endpoint``,
``stop()``):

* ``HttpBackend``: a threaded Python server. Every response has the body
  ``<name>`` and the header ``X-Backend: <name>``; it echoes the request path in
  ``X-Path``, the Host header in ``X-Host`` and the HTTP version in ``X-Request-Version``, can delay each answer
  (``delay`` seconds) and counts requests (``hits``). Good for behaviour tests.
* ``NginxBackend``: a bare nginx answering ``<name>`` from memory, tens of
  thousands of requests per second on one core. For load tests and
  benchmarks, where a Python server would be the bottleneck.

The pytest fixture ``backends`` is a factory: ``backends(3)`` starts three
Python backends named ``b0``..``b2``; ``backends(1, kind="nginx")`` a fast one.
All are stopped at the end of the test.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from platformd.ingress.model import Endpoint
from tests.helpers.loopback_http import LoopbackHttp
from tests.helpers.waiting import wait_for

__all__ = ["HttpBackend", "NginxBackend", "backends", "free_port"]


def free_port() -> int:
    """A TCP port that was free a moment ago (bind to 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as nginx's upstream keepalive expects
    # Head and body go out in one write (a buffered wfile, flushed after each
    # request by BaseHTTPRequestHandler), without Nagle: before, the body
    # waited for the client's delayed ACK of the head, ~40 ms per answer.
    disable_nagle_algorithm = True
    wbufsize = 64 * 1024

    def _answer(self) -> None:
        backend: HttpBackend = self.server.backend  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        with backend._lock:
            backend.hits += 1
        if backend.delay:
            time.sleep(backend.delay)
        body = backend.name.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Backend", backend.name)
        self.send_header("X-Path", self.path)
        self.send_header("X-Host", self.headers.get("Host", ""))
        self.send_header("X-Request-Version", self.request_version)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _answer

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024


class HttpBackend(LoopbackHttp):
    def __init__(self, name: str, delay: float = 0.0) -> None:
        self.name = name
        self.delay = delay
        self.hits = 0
        self._lock = threading.Lock()
        super().__init__(_Handler, owner=self, name=f"backend-{name}", server_class=_Server)


class NginxBackend:
    """A static nginx answering its name; its own master in its own tmp dir."""

    def __init__(self, name: str, workers: int = 1, tls: tuple[Path, Path] | None = None) -> None:
        """``tls``: (certificate file, key file): serve HTTPS and HTTP/2 (gRPCS-style) instead."""
        self.name = name
        self.address = "127.0.0.1"
        self.port = free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="pd-be-"))
        user = "user root;\n" if os.geteuid() == 0 else ""
        (self._dir / "nginx.conf").write_text(
            f"{user}worker_processes {workers};\npid {self._dir}/nginx.pid;\nerror_log {self._dir}/error.log;\n"
            "events { worker_connections 4096; }\n"
            "http {\n access_log off;\n"
            f" client_body_temp_path {self._dir}/body; proxy_temp_path {self._dir}/proxy;\n"
            f" fastcgi_temp_path {self._dir}/fcgi; uwsgi_temp_path {self._dir}/uwsgi; scgi_temp_path {self._dir}/scgi;\n"
            " keepalive_requests 100000;\n"
            f" server {{ listen 127.0.0.1:{self.port}{' ssl http2' if tls else ''} backlog=4096;\n"
            + (f"  ssl_certificate {tls[0]}; ssl_certificate_key {tls[1]};\n" if tls else "")
            + f"  location / {{ add_header X-Backend {name}; return 200 \"{name}\"; }} }}\n}}\n"
        )
        self._proc = subprocess.Popen(
            ["/usr/sbin/nginx", "-p", str(self._dir), "-c", str(self._dir / "nginx.conf"), "-e",
             str(self._dir / "error.log"), "-g", "daemon off;"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        def listening() -> bool:
            if self._proc.poll() is not None:
                raise RuntimeError(f"nginx backend {name} exited with {self._proc.returncode}")
            with socket.create_connection((self.address, self.port), timeout=0.2):
                return True

        try:
            wait_for(listening, timeout=10, ignore=(OSError,), message=f"nginx backend {name} listening")
        except (AssertionError, RuntimeError):
            self.stop()
            raise

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.address, self.port)

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGQUIT)
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(timeout=5)
        shutil.rmtree(self._dir, ignore_errors=True)


@pytest.fixture
def backends():
    started: list = []

    def make(count: int = 1, *, kind: str = "python", delay: float = 0.0, prefix: str = "b"):
        made = []
        for index in range(count):
            name = f"{prefix}{len(started)}"
            backend = HttpBackend(name, delay) if kind == "python" else NginxBackend(name)
            started.append(backend)
            made.append(backend)
        return made

    yield make
    for backend in started:
        backend.stop()
