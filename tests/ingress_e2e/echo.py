"""A tiny HTTP echo server for e2e backends: ``python -m tests.ingress_e2e.echo IP:PORT=NAME ...``.

Runs inside a network namespace (see ``netns.py``); every listener answers any
request with the body ``NAME`` and the headers ``X-Backend: NAME``,
``X-Path`` (the request target) and ``X-Host`` (the Host header), ``X-Seen-Forwarded-Port``, after ``X-Echo-Delay`` seconds if asked. Prints
``ready`` once all listeners are bound.
"""

from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        delay = self.headers.get("X-Echo-Delay")
        if delay:  # a slow backend, for timeout tests
            time.sleep(min(float(delay), 30.0))
        body = self.server.name.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Backend", self.server.name)  # type: ignore[attr-defined]
        self.send_header("X-Path", self.path)
        self.send_header("X-Host", self.headers.get("Host", ""))
        self.send_header("X-Seen-Forwarded-Port", self.headers.get("X-Forwarded-Port", ""))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name (getfqdn), which in a
        # namespace without DNS waits for the resolver to time out.
        import socketserver
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


def main(specs: list[str]) -> None:
    for spec in specs:
        address, _, name = spec.partition("=")
        host, _, port = address.rpartition(":")
        server = _Server((host, int(port)), _Handler)
        server.name = name  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()  # until the parent closes our stdin (or dies)


if __name__ == "__main__":
    main(sys.argv[1:])
