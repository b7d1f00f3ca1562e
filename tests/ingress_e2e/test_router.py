"""The Lua router serves every host from data (real nginx): new hosts,
new TLS hosts with their certificate, and settings that used to need a
directive, all without a reload."""

from __future__ import annotations

import socket
import ssl
import subprocess
from pathlib import Path

from platformd.ingress.model import (
    Backend,
    Certificate,
    Configuration,
    Location,
    PathMatch,
    Redirect,
    Server,
)
from platformd.ingress.render import dynamic_sections
from tests.helpers.certs import self_signed
from tests.ingress.conftest import backends, dataplane  # noqa: F401  (fixtures)


def _https_get(port: int, host: str, path: str) -> tuple[str, str, str]:
    """(status line, body, certificate subject) of one request with SNI ``host``."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := tls.recv(65536):
                data += chunk
            der = tls.getpeercert(binary_form=True)
    head, _, body = data.decode(errors="replace").partition("\r\n\r\n")
    subject = subprocess.run(["openssl", "x509", "-noout", "-subject"], input=ssl.DER_cert_to_PEM_cert(der),
                             capture_output=True, text=True).stdout
    return head.splitlines()[0], body, subject


def test_new_hosts_are_served_without_a_reload(dataplane, backends, tmp_path):  # noqa: F811
    b0, b1 = backends(2)
    old = Server("old.example", locations=(Location("/", backend="old"),))
    running = Configuration(servers=(old,), backends=(Backend("old", endpoints=(b0.endpoint,)),))
    assert dataplane.apply(running).ok

    cert, key = self_signed("secure.example", tmp_path)
    desired = dataplane.localize(Configuration(
        servers=(
            old,
            Server("new.example", locations=(
                Location("/", backend="root"),
                Location("/api", backend="api"),
                Location("/exact", match=PathMatch.EXACT, backend="api"),
            )),
            Server("secure.example", tls=True, tls_certificate="ns/secure",
                   locations=(Location("/", backend="api", ssl_redirect=True),)),
            # Used to need a rendered directive.
            Server("rewrite.example", locations=(Location("/", backend="root", rewrite_target="/x"),)),
        ),
        backends=(Backend("old", endpoints=(b0.endpoint,)), Backend("root", endpoints=(b0.endpoint,)),
                  Backend("api", endpoints=(b1.endpoint,))),
        certificates=(Certificate("ns/secure", cert, key, hostnames=("secure.example",)),),
    ))
    conf = dataplane.nginx.files.conf.read_text()
    workers = dataplane.nginx.worker_pids()
    assert dataplane.apply(desired).kind == "dynamic"
    assert dataplane.nginx.files.conf.read_text() == conf
    assert dataplane.nginx.worker_pids() == workers

    # Plain host: Exact beats Prefix, the longest Prefix wins, element-wise.
    assert dataplane.get("/", host="new.example").text == "b0"
    assert dataplane.get("/api", host="new.example").text == "b1"
    assert dataplane.get("/api/v1", host="new.example").text == "b1"
    assert dataplane.get("/apiv1", host="new.example").text == "b0"
    assert dataplane.get("/exact", host="new.example").text == "b1"

    # TLS host: through the https catch-all by SNI, with its own certificate;
    # plain HTTP redirects as its rendered location would.
    status, body, subject = _https_get(dataplane.https_port, "secure.example", "/any")
    assert status.split()[1] == "200" and body == "b1" and "secure.example" in subject
    redirect = dataplane.get("/any?q=1", host="secure.example")
    assert redirect.status_code == 308
    assert redirect.headers["location"] == f"https://secure.example:{dataplane.https_port}/any?q=1"
    hsts = dataplane.get("/any", host="secure.example", https=True)
    assert hsts.text == "b1" and "max-age=" in hsts.headers["strict-transport-security"]

    assert dataplane.get("/", host="rewrite.example").text == "b0"
    # Unknown: the catch-all (no default backend: 404).
    assert dataplane.get("/", host="unknown.example").status_code == 404
    assert dataplane.get("/", host="old.example").text == "b0"
    assert dataplane.nginx.worker_pids() == workers


def test_a_host_without_prefix_root_answers_404_for_other_paths(dataplane, backends):  # noqa: F811
    (b0,) = backends(1)
    # A host-less rule whose location answers by itself (`return`): the
    # router must act before it does.
    catch_all = (Location("/api", redirect=Redirect("https://elsewhere.example/")),)
    assert dataplane.apply(Configuration(backends=(Backend("fallback", endpoints=(b0.endpoint,)),),
                                         default_backend="fallback", default_server_locations=catch_all)).ok
    desired = dataplane.localize(Configuration(
        servers=(Server("api.example", locations=(Location("/api", backend="api"),)),),
        backends=(Backend("api", endpoints=(b0.endpoint,)), Backend("fallback", endpoints=(b0.endpoint,))),
        default_backend="fallback", default_server_locations=catch_all,
    ))
    for section in dynamic_sections(desired):
        dataplane.lua.push_section(section)
    assert dataplane.get("/api/x", host="api.example").text == "b0"
    assert dataplane.get("/api/x", host="unknown.example").status_code == 302
    # A routed host's other paths are its own 404, not the default backend.
    assert dataplane.get("/other", host="api.example").status_code == 404
    # Unknown hosts still get the default backend.
    assert dataplane.get("/other", host="unknown.example").text == "b0"
