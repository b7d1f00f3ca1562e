"""A real HTTP backend whose answer the request path chooses, for traffic tests.

* ``/status/<code>``: answers ``<code>`` with the body ``<name> <code>``.
* ``/redirect``: 302 with ``Location: http://internal.example:8080/app/next``
  and ``Set-Cookie: s=1; Domain=internal.example; Path=/app``.
* ``.../bytes/<n>``: ``n`` bytes of ``x``.
* anything else: 200 and a JSON body ``{"name", "path", "version",
  "method", "headers": {lower-case name: value}}``.

``fail_with`` set: that status for every path.

Every answer carries ``X-Backend: <name>``; ``hits`` counts requests and
``seen`` keeps (method, path, headers, version) of each; ``kill()`` makes it
refuse connections, open keep-alive ones included.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler

from tests.helpers.loopback_http import LoopbackHttp


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        backend: ScriptedBackend = self.server.backend  # type: ignore[attr-defined]
        with backend.lock:
            backend.connections.append(self.connection)

    def _answer(self) -> None:
        backend: ScriptedBackend = self.server.backend  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        headers = {k.lower(): v for k, v in self.headers.items()}
        with backend.lock:
            backend.hits += 1
            backend.seen.append((self.command, self.path, headers, self.request_version))
        status, extra, body = 200, [], b""
        if backend.fail_with is not None:
            status, body = backend.fail_with, f"{backend.name} {backend.fail_with}".encode()
        elif self.path.startswith("/status/"):
            status = int(self.path.split("/")[2])
            body = f"{backend.name} {status}".encode()
        elif self.path == "/redirect":
            status = 302
            extra = [("Location", "http://internal.example:8080/app/next"),
                     ("Set-Cookie", "s=1; Domain=internal.example; Path=/app")]
        elif "/bytes/" in self.path:
            body = b"x" * int(self.path.rsplit("/", 1)[1])
        else:
            body = json.dumps({"name": backend.name, "path": self.path, "version": self.request_version,
                               "method": self.command, "headers": headers}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Backend", backend.name)
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


class ScriptedBackend(LoopbackHttp):
    def __init__(self, name: str) -> None:
        self.name = name
        self.hits = 0
        self.fail_with: int | None = None  # answer this status to everything
        self.seen: list[tuple[str, str, dict[str, str], str]] = []
        self.connections: list[socket.socket] = []
        self.lock = threading.Lock()
        super().__init__(_Handler, owner=self, name=f"scripted-{name}")

    def kill(self) -> None:
        """Stop and close every open connection too (keep-alive ones included):
        from now on connections to it are refused."""
        self.stop()
        with self.lock:
            for conn in self.connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
