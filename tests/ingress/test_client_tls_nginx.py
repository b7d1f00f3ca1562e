"""Client certificates (auth-tls-*) through real nginx with real TLS clients:
each verify mode, depth, a certificate of another CA, the error page, the
headers the upstream gets, match-cn, and HTTP/2-style connection reuse
across hosts (a request for another host than the SNI name is 421)."""

from __future__ import annotations

import socket
import ssl
import urllib.parse

import pytest

from platformd.ingress.client_tls import ClientTls
from platformd.ingress.model import Backend, Certificate, Configuration, Location, Server
from tests.helpers import pki
from tests.helpers.tlsclient import EchoBackend, exchange, request

HOST = "secure.example.com"
OTHER = "open.example.com"


@pytest.fixture(scope="module")
def ca():
    return pki.authority("Client CA")


@pytest.fixture
def echo():
    backend = EchoBackend()
    yield backend
    backend.stop()


@pytest.fixture
def files(tmp_path, ca):
    """Client certificates: of our CA, of another CA, expired, and one two levels down."""
    other = pki.authority("Other CA")
    # Two intermediates: OpenSSL's depth (nginx's ssl_verify_depth) counts
    # the CA certificates between the leaf and the trust anchor.
    first = pki.authority("Intermediate CA 1", parent=ca)
    second = pki.authority("Intermediate CA 2", parent=first)
    deep = pki.leaf(second, "deep-client")
    deep_chain = pki.Issued(deep.cert_pem + second.cert_pem + first.cert_pem, deep.key_pem, deep.cert, deep.key)
    return {
        "good": pki.leaf(ca, "good-client").write(tmp_path, "good"),
        "other": pki.leaf(other, "good-client").write(tmp_path, "other"),
        "expired": pki.leaf(ca, "good-client", expired=True).write(tmp_path, "expired"),
        "deep": deep_chain.write(tmp_path, "deep"),
        "admin": pki.leaf(ca, "admin").write(tmp_path, "admin"),
    }


def _config(echo, ca, **policy) -> Configuration:
    server_ca = pki.authority("Server CA")
    certs = tuple(Certificate(name, leaf.cert_pem, leaf.key_pem, hostnames=(name,))
                  for name, leaf in ((HOST, pki.leaf(server_ca, HOST, server=True)),
                                     (OTHER, pki.leaf(server_ca, OTHER, server=True))))
    client_tls = ClientTls(ca.cert_pem, **policy)
    return Configuration(
        servers=(
            Server(HOST, tls_certificate=HOST, tls=True, client_tls=client_tls,
                   locations=(Location("/", backend="echo"),)),
            Server(OTHER, tls_certificate=OTHER, tls=True, locations=(Location("/", backend="echo"),)),
        ),
        backends=(Backend("echo", endpoints=(echo.endpoint,)),),
        certificates=certs,
    )


def _apply(dataplane, config):
    result = dataplane.apply(config)
    assert result.ok, result.error


def test_on_requires_a_certificate_of_the_ca(dataplane, echo, ca, files):
    _apply(dataplane, _config(echo, ca))
    port = dataplane.https_port
    none = request(port, HOST, HOST)
    assert none.status == 400 and b"No required SSL certificate was sent" in none.body
    wrong = request(port, HOST, HOST, cert=files["other"])
    assert wrong.status == 400 and b"The SSL certificate error" in wrong.body
    expired = request(port, HOST, HOST, cert=files["expired"])
    assert expired.status == 400
    good = request(port, HOST, HOST, cert=files["good"])
    assert good.status == 200
    headers = good.json()
    assert headers["ssl-client-verify"] == "SUCCESS"
    assert headers["ssl-client-subject-dn"] == "CN=good-client"
    assert headers["ssl-client-issuer-dn"] == "CN=Client CA"
    assert "ssl-client-cert" not in headers  # pass-certificate-to-upstream is off
    # A host without a policy is not asked for a certificate.
    assert request(port, OTHER, OTHER).status == 200


def test_depth(dataplane, echo, ca, files):
    _apply(dataplane, _config(echo, ca, depth=1))
    assert request(dataplane.https_port, HOST, HOST, cert=files["deep"]).status == 400
    _apply(dataplane, _config(echo, ca, depth=2))
    assert request(dataplane.https_port, HOST, HOST, cert=files["deep"]).status == 200


def test_optional_modes(dataplane, echo, ca, files):
    _apply(dataplane, _config(echo, ca, verify="optional"))
    port = dataplane.https_port
    none = request(port, HOST, HOST)
    assert none.status == 200 and none.json()["ssl-client-verify"] == "NONE"
    assert request(port, HOST, HOST, cert=files["other"]).status == 400
    assert request(port, HOST, HOST, cert=files["good"]).status == 200
    _apply(dataplane, _config(echo, ca, verify="optional_no_ca"))
    other = request(port, HOST, HOST, cert=files["other"])
    assert other.status == 200 and other.json()["ssl-client-verify"].startswith("FAILED:")
    assert request(port, HOST, HOST).status == 200


def test_error_page_redirects(dataplane, echo, ca, files):
    _apply(dataplane, _config(echo, ca, error_page="https://errors.example.com/cert.html"))
    answer = request(dataplane.https_port, HOST, HOST, cert=files["other"])
    assert answer.status == 302 and answer.headers["location"] == "https://errors.example.com/cert.html"


def test_pass_certificate_and_spoofed_headers(dataplane, echo, ca, files):
    _apply(dataplane, _config(echo, ca, pass_certificate=True))
    port = dataplane.https_port
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.load_cert_chain(str(files["good"][0]), str(files["good"][1]))
    with socket.create_connection(("127.0.0.1", port)) as raw, context.wrap_socket(raw, server_hostname=HOST) as tls:
        tls.sendall(f"GET / HTTP/1.1\r\nHost: {HOST}\r\nssl-client-verify: forged\r\n"
                    "ssl-client-subject-dn: CN=admin\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    headers = __import__("json").loads(data.partition(b"\r\n\r\n")[2])
    assert headers["ssl-client-verify"] == "SUCCESS"
    assert headers["ssl-client-subject-dn"] == "CN=good-client"
    assert urllib.parse.unquote(headers["ssl-client-cert"]).strip() == files["good"][0].read_text().strip()


def test_match_cn(dataplane, echo, ca, files):
    _apply(dataplane, _config(echo, ca, match_cn="CN=(admin|root)"))
    port = dataplane.https_port
    refused = request(port, HOST, HOST, cert=files["good"])
    assert refused.status == 403 and refused.body == b"client certificate unauthorized"
    assert request(port, HOST, HOST, cert=files["admin"]).status == 200


def test_connection_verified_for_another_host_is_misdirected(dataplane, echo, ca, files):
    """A connection whose handshake (SNI) skipped or used another policy
    cannot serve a host that needs a client certificate: 421, as nginx's
    own SNI/Host check answers."""
    _apply(dataplane, _config(echo, ca))
    port = dataplane.https_port
    # Handshake for the open host (no certificate asked), request for the secure one.
    assert request(port, OTHER, HOST, cert=files["good"]).status == 421
    assert request(port, None, HOST, cert=files["good"]).status == 421
    # The open host stays reachable on a connection made for the secure one.
    assert request(port, HOST, OTHER, cert=files["good"]).status == 200


def test_plain_http_is_refused_unless_redirected(dataplane, echo, ca):
    _apply(dataplane, _config(echo, ca))
    # ssl-redirect is not set on these locations: "on" refuses plain HTTP.
    answer = dataplane.get("/", host=HOST)
    assert answer.status_code == 400


def test_session_of_another_policy_is_not_resumed(dataplane, echo, ca, files):
    """A TLS session made for the open host must not resume into the secure
    one (its verification result would come along)."""
    _apply(dataplane, _config(echo, ca))
    port = dataplane.https_port
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.maximum_version = ssl.TLSVersion.TLSv1_2  # session ids: resumption visible to the client
    with socket.create_connection(("127.0.0.1", port)) as raw, context.wrap_socket(raw, server_hostname=OTHER) as tls:
        assert exchange(tls, OTHER).status == 200
        session = tls.session
    with socket.create_connection(("127.0.0.1", port)) as raw, context.wrap_socket(
            raw, server_hostname=OTHER, session=session) as tls:
        assert tls.session_reused  # the cache works for the same host
        exchange(tls, OTHER)
    with socket.create_connection(("127.0.0.1", port)) as raw, context.wrap_socket(
            raw, server_hostname=HOST, session=session) as tls:
        assert not tls.session_reused
        assert exchange(tls, HOST).status == 400
