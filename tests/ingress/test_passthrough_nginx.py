"""ssl-passthrough through real nginx (stream module): the backend sees the
client's own TLS handshake (its certificate is what the client gets), other
hosts are still terminated by the http server and keep the client's
address (PROXY protocol), and a change of the passthrough table reloads."""

from __future__ import annotations

import hashlib
import socket
import ssl
from pathlib import Path

import pytest

from platformd.ingress.model import Backend, Certificate, Configuration, GlobalSettings, Listen, Location, Server
from platformd.ingress.passthrough import Passthrough
from tests.helpers import pki
from tests.helpers.certs import served_certificate
from tests.helpers.tlsclient import EchoBackend, request

STREAM = Path("/usr/lib/nginx/modules/ngx_stream_module.so")
pytestmark = pytest.mark.skipif(not STREAM.exists(), reason="nginx stream module not installed (libnginx-mod-stream)")

PASS = "pass.example.com"
TERMINATED = "web.example.com"


@pytest.fixture
def world(tmp_path):
    ca = pki.authority("Test CA")
    backend_cert = pki.leaf(ca, PASS, server=True)
    tls_backend = EchoBackend(tls=backend_cert.write(tmp_path, "pass"))
    echo = EchoBackend()
    ours = pki.leaf(ca, TERMINATED, server=True)
    yield {"tls": tls_backend, "echo": echo, "backend_cert": backend_cert, "ours": ours}
    tls_backend.stop()
    echo.stop()


def _config(world, passthrough=(), forwarded=False) -> Configuration:
    return Configuration(
        servers=(Server(TERMINATED, tls_certificate=TERMINATED, tls=True, locations=(Location("/", backend="echo"),)),
                 Server(PASS, locations=(Location("/", backend="echo"),))),
        backends=(Backend("echo", endpoints=(world["echo"].endpoint,)),),
        certificates=(Certificate(TERMINATED, world["ours"].cert_pem, world["ours"].key_pem, hostnames=(TERMINATED,)),),
        settings=GlobalSettings(listen=Listen(ssl_passthrough=True), use_forwarded_headers=forwarded),
        passthrough=tuple(passthrough),
    )


def _der(pem: pki.Issued) -> bytes:
    return pem.cert.public_bytes(__import__("cryptography.hazmat.primitives.serialization",
                                            fromlist=["Encoding"]).Encoding.DER)


def test_passthrough_end_to_end(dataplane, world):
    entry = Passthrough(PASS, "127.0.0.1", world["tls"].port)
    result = dataplane.apply(_config(world, [entry]))
    assert result.ok, result.error
    port = dataplane.https_port
    # The passthrough host: the backend's own certificate, its own HTTP answer.
    assert served_certificate(port, PASS) == _der(world["backend_cert"])
    answer = request(port, PASS, PASS)
    assert answer.status == 200 and answer.json()["host"] == PASS
    assert world["tls"].sni[-1] == PASS
    # Any other name: terminated here, routed, the client's address kept.
    assert served_certificate(port, TERMINATED) == _der(world["ours"])
    answer = request(port, TERMINATED, TERMINATED)
    assert answer.status == 200
    assert answer.json()["x-real-ip"] == "127.0.0.1"
    assert answer.json()["x-forwarded-port"] == str(port)
    # Plain HTTP for the passthrough host is served by the router as before.
    assert dataplane.get("/", host=PASS).status_code == 200


def test_wildcard_covers_one_label(dataplane, world):
    entry = Passthrough("*.example.org", "127.0.0.1", world["tls"].port)
    assert dataplane.apply(_config(world, [entry])).ok
    port = dataplane.https_port
    assert served_certificate(port, "a.example.org") == _der(world["backend_cert"])
    assert served_certificate(port, "A.EXAMPLE.ORG") == _der(world["backend_cert"])
    assert served_certificate(port, "b.a.example.org") != _der(world["backend_cert"])


def test_a_new_passthrough_host_reloads_and_takes_effect(dataplane, world):
    assert dataplane.apply(_config(world)).ok
    port = dataplane.https_port
    assert served_certificate(port, PASS) != _der(world["backend_cert"])  # terminated here (default certificate)
    pid = dataplane.nginx.master_pid()
    result = dataplane.apply(_config(world, [Passthrough(PASS, "127.0.0.1", world["tls"].port)]))
    assert result.ok, result.error
    assert dataplane.nginx.master_pid() == pid  # a reload, not a restart
    assert served_certificate(port, PASS) == _der(world["backend_cert"])


def test_forwarded_headers_mode_keeps_the_port(dataplane, world):
    assert dataplane.apply(_config(world, forwarded=True)).ok
    answer = request(dataplane.https_port, TERMINATED, TERMINATED)
    assert answer.status == 200 and answer.json()["x-forwarded-port"] == str(dataplane.https_port)
