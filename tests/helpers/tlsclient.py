"""One HTTP/1.1 request over TLS to 127.0.0.1 with a chosen SNI name, Host
header and (optionally) client certificate; and an echo backend that
answers with the request headers it got, as JSON."""

from __future__ import annotations

import json
import socket
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from platformd.ingress.model import Endpoint


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


def request(port: int, sni: str | None, host: str, path: str = "/", *, cert: tuple[Path, Path] | None = None,
            context: ssl.SSLContext | None = None, timeout: float = 10.0) -> Answer:
    """GET ``path`` with ``Host: host`` over TLS (SNI ``sni``); ``cert`` is
    a (certificate file, key file) pair to present when asked."""
    if context is None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        if cert is not None:
            context.load_cert_chain(str(cert[0]), str(cert[1]))
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with context.wrap_socket(raw, server_hostname=sni) as tls:
            return exchange(tls, host, path)


def exchange(tls: socket.socket, host: str, path: str = "/") -> Answer:
    """One request on an open connection (``Connection: close``)."""
    tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while True:
        try:
            chunk = tls.recv(65536)
        except (ssl.SSLError, ConnectionResetError):
            break
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2:]
        body = out
    return Answer(status, headers, body)


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802
        body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class EchoBackend:
    """A plain-HTTP (or, with ``tls=(cert, key)``, HTTPS) server on
    127.0.0.1 answering every GET with its request headers as JSON; with
    ``tls``, ``sni`` records the server names clients sent, and
    ``client_ca`` makes it require a client certificate that CA signed."""

    def __init__(self, tls: tuple[Path, Path] | None = None, client_ca: Path | None = None) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
        self.server.daemon_threads = True
        self.sni: list[str | None] = []
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            if client_ca is not None:  # require a client certificate of this CA
                context.verify_mode = ssl.CERT_REQUIRED
                context.load_verify_locations(str(client_ca))
            context.sni_callback = lambda sock, name, ctx: self.sni.append(name)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.endpoint = Endpoint("127.0.0.1", self.port)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
