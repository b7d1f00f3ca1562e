"""tests/helpers/loopback_http.py: served at once, handler sees its owner, stop closes the port."""

from __future__ import annotations

import socket
from http.server import BaseHTTPRequestHandler

import httpx
import pytest

from tests.helpers.loopback_http import LoopbackHttp


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.server.backend.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_serves_on_loopback_with_its_owner_then_stops():
    http = LoopbackHttp(_Hello, owner="owner-a", name="hello")
    assert (http.endpoint.address, http.endpoint.port) == ("127.0.0.1", http.port)
    assert httpx.get(http.url + "/", timeout=5).text == "owner-a"
    http.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", http.port), timeout=2).close()
