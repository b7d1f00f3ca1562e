"""ssl-ciphers and ssl-prefer-server-ciphers per host, through real nginx:
applied at ClientHello for the SNI name only (another host keeps the
global list), and no session resumed across hosts with other settings."""

from __future__ import annotations

import socket
import ssl

import pytest

from platformd.ingress.host_tls import HostTls
from platformd.ingress.model import Backend, Certificate, Configuration, Location, Server
from tests.helpers import pki
from tests.helpers.backends import backends  # noqa: F401

STRICT = "strict.example.com"
OTHER = "other.example.com"
AES128 = "ECDHE-ECDSA-AES128-GCM-SHA256"
AES256 = "ECDHE-ECDSA-AES256-GCM-SHA384"


def _config(b0, host_tls: HostTls) -> Configuration:
    ca = pki.authority("CA")
    certs = tuple(Certificate(n, leaf.cert_pem, leaf.key_pem, hostnames=(n,))
                  for n, leaf in ((STRICT, pki.leaf(ca, STRICT, server=True)), (OTHER, pki.leaf(ca, OTHER, server=True))))
    return Configuration(
        servers=(Server(STRICT, tls_certificate=STRICT, tls=True, host_tls=host_tls, locations=(Location("/", backend="b"),)),
                 Server(OTHER, tls_certificate=OTHER, tls=True, locations=(Location("/", backend="b"),))),
        backends=(Backend("b", endpoints=(b0.endpoint,)),),
        certificates=certs,
    )


def _context(ciphers: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.maximum_version = ssl.TLSVersion.TLSv1_2  # the list governs TLSv1.2 and older, as nginx's ssl_ciphers
    context.set_ciphers(ciphers)
    return context


def _cipher(port: int, sni: str, ciphers: str, session=None, context=None):
    context = context or _context(ciphers)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=sni, session=session) as tls:
            return tls.cipher()[0], tls.session, tls.session_reused


def test_cipher_list_per_host(dataplane, backends):
    (b0,) = backends(1)
    assert dataplane.apply(_config(b0, HostTls(ciphers=AES256))).ok
    port = dataplane.https_port
    with pytest.raises(ssl.SSLError):
        _cipher(port, STRICT, AES128)
    assert _cipher(port, STRICT, f"{AES128}:{AES256}")[0] == AES256
    assert _cipher(port, OTHER, AES128)[0] == AES128  # the global list for other hosts


def test_server_preference_per_host(dataplane, backends):
    (b0,) = backends(1)
    both = f"{AES128}:{AES256}"
    assert dataplane.apply(_config(b0, HostTls(ciphers=both, prefer_server_ciphers=False))).ok
    port = dataplane.https_port
    assert _cipher(port, STRICT, f"{AES256}:{AES128}")[0] == AES256  # the client's order
    assert dataplane.apply(_config(b0, HostTls(ciphers=both, prefer_server_ciphers=True))).ok
    assert _cipher(port, STRICT, f"{AES256}:{AES128}")[0] == AES128  # ours


def test_no_session_resumed_into_a_host_with_other_ciphers(dataplane, backends):
    (b0,) = backends(1)
    assert dataplane.apply(_config(b0, HostTls(ciphers=f"{AES256}:{AES128}"))).ok
    port = dataplane.https_port
    context = _context(AES128)
    _, session, _ = _cipher(port, OTHER, AES128, context=context)
    assert _cipher(port, OTHER, AES128, session, context)[2]  # resumption works for the same host
    assert _cipher(port, STRICT, AES128, session, context)[2] is False
