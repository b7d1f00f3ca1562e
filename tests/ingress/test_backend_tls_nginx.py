"""Backend TLS (proxy-ssl-*) through real nginx to real TLS backends: the
issue's example (a CA that does not sign the backend's certificate is 502,
the right one 200), the name verified and the SNI sent, a client
certificate to the backend, and idle connections never shared between a
verifying lane and another."""

from __future__ import annotations

import pytest

from platformd.ingress import backend_tls
from platformd.ingress.backend_tls import BackendTlsAsk
from platformd.ingress.model import Backend, BackendProtocol, Configuration, Location, ProxySettings, Server
from tests.helpers import pki
from tests.helpers.backends import backends  # noqa: F401  (fixture)
from tests.helpers.tlsclient import EchoBackend

HOST = "app.example.com"
BACKEND = "default.web.443"  # Service web in default: verified as web.default.svc by default


@pytest.fixture(scope="module")
def pkis():
    right, wrong, clients = pki.authority("Backend CA"), pki.authority("Wrong CA"), pki.authority("Clients CA")
    return {"right": right, "wrong": wrong, "clients": clients,
            "client": pki.leaf(clients, "ingress-client"),
            "server": pki.leaf(right, "web.default.svc", server=True)}


@pytest.fixture
def tls_backend(tmp_path, pkis):
    started = []

    def start(client_ca: bool = False) -> EchoBackend:
        files = pkis["server"].write(tmp_path, "server")
        ca_file = None
        if client_ca:
            ca_file = tmp_path / "clients-ca.crt"
            ca_file.write_text(pkis["clients"].cert_pem)
        backend = EchoBackend(tls=files, client_ca=ca_file)
        started.append(backend)
        return backend

    yield start
    for backend in started:
        backend.stop()


def _location(path: str, ask: BackendTlsAsk | None, material=None) -> Location:
    loc = Location(path, backend=BACKEND, proxy=ProxySettings(protocol=BackendProtocol.HTTPS), backend_tls=ask)
    if ask is None:
        return loc
    key = ("default", ask.secret)
    return backend_tls.apply((loc,), {key: material}, backend_tls.namespace_of)[0]


def _config(backend: EchoBackend, *locations: Location) -> Configuration:
    return Configuration(servers=(Server(HOST, locations=locations),),
                         backends=(Backend(BACKEND, endpoints=(backend.endpoint,)),))


def _apply(dataplane, config):
    result = dataplane.apply(config)
    assert result.ok, result.error


def _material(ca: str = "", cert: pki.Issued | None = None):
    return backend_tls._Material(ca, cert.cert_pem if cert else "", cert.key_pem if cert else "")


VERIFY = BackendTlsAsk(secret="default/backend-ca", verify=True)


def test_wrong_ca_is_502_and_right_ca_200(dataplane, tls_backend, pkis):
    backend = tls_backend()
    _apply(dataplane, _config(backend, _location("/", VERIFY, _material(pkis["wrong"].cert_pem))))
    assert dataplane.get("/", host=HOST).status_code == 502
    _apply(dataplane, _config(backend, _location("/", VERIFY, _material(pkis["right"].cert_pem))))
    assert dataplane.get("/", host=HOST).status_code == 200


def test_the_name_verified_and_the_sni_sent(dataplane, tls_backend, pkis):
    backend = tls_backend()
    right = _material(pkis["right"].cert_pem)
    other_name = BackendTlsAsk(secret="default/backend-ca", verify=True, name="other.example.com")
    _apply(dataplane, _config(backend, _location("/", other_name, right)))
    assert dataplane.get("/", host=HOST).status_code == 502  # the certificate names web.default.svc only
    with_sni = BackendTlsAsk(secret="default/backend-ca", verify=True, name="web.default.svc", server_name=True)
    _apply(dataplane, _config(backend, _location("/", with_sni, right)))
    backend.sni.clear()
    assert dataplane.get("/", host=HOST).status_code == 200
    assert backend.sni == ["web.default.svc"]
    without_sni = BackendTlsAsk(secret="default/backend-ca", verify=True, name="web.default.svc")
    _apply(dataplane, _config(backend, _location("/", without_sni, right)))
    backend.sni.clear()
    assert dataplane.get("/", host=HOST).status_code == 200
    assert backend.sni == [None]


def test_client_certificate_to_the_backend(dataplane, tls_backend, pkis):
    backend = tls_backend(client_ca=True)
    _apply(dataplane, _config(backend, _location("/", VERIFY, _material(pkis["right"].cert_pem))))
    assert dataplane.get("/", host=HOST).status_code == 502  # no client certificate: the backend refuses
    _apply(dataplane, _config(backend, _location("/", VERIFY, _material(pkis["right"].cert_pem, pkis["client"]))))
    assert dataplane.get("/", host=HOST).status_code == 200


def test_idle_connections_are_not_shared_with_a_verifying_lane(dataplane, tls_backend, pkis):
    """An unverified HTTPS route leaves an idle TLS connection to the backend;
    a route that verifies with a CA that does not sign it must not ride on it."""
    backend = tls_backend()
    _apply(dataplane, _config(backend, _location("/open", None),
                              _location("/verified", VERIFY, _material(pkis["wrong"].cert_pem))))
    for _ in range(3):
        assert dataplane.get("/open", host=HOST).status_code == 200
        assert dataplane.get("/verified", host=HOST).status_code == 502


def test_protocols_and_ciphers_are_applied(dataplane, tls_backend, pkis):
    backend = tls_backend()
    right = _material(pkis["right"].cert_pem)
    tls12 = BackendTlsAsk(secret="default/backend-ca", verify=True, protocols="TLSv1.2",
                          ciphers="ECDHE-ECDSA-AES128-GCM-SHA256")
    _apply(dataplane, _config(backend, _location("/", tls12, right)))
    assert dataplane.get("/", host=HOST).status_code == 200
    # A cipher the backend's EC key cannot use: no handshake, 502.
    rsa_only = BackendTlsAsk(secret="default/backend-ca", verify=True, protocols="TLSv1.2",
                             ciphers="ECDHE-RSA-AES128-GCM-SHA256")
    _apply(dataplane, _config(backend, _location("/", rsa_only, right)))
    assert dataplane.get("/", host=HOST).status_code == 502


def test_grpcs_backend_is_verified(dataplane, tmp_path, pkis):
    """GRPCS goes through grpc_pass (HTTP/2 over TLS): grpc_ssl_* verify it."""
    from tests.helpers.backends import NginxBackend

    backend = NginxBackend("h2", tls=pkis["server"].write(tmp_path, "h2"))
    try:
        def config(ca: str) -> Configuration:
            loc = Location("/", backend=BACKEND, proxy=ProxySettings(protocol=BackendProtocol.GRPCS), backend_tls=VERIFY)
            loc = backend_tls.apply((loc,), {("default", VERIFY.secret): _material(ca)}, backend_tls.namespace_of)[0]
            assert dict(loc.lane_directives)["grpc_ssl_verify"] == "on"
            return Configuration(servers=(Server(HOST, locations=(loc,)),),
                                 backends=(Backend(BACKEND, endpoints=(backend.endpoint,)),))

        _apply(dataplane, config(pkis["wrong"].cert_pem))
        assert dataplane.get("/", host=HOST).status_code == 502
        _apply(dataplane, config(pkis["right"].cert_pem))
        answer = dataplane.get("/", host=HOST)
        assert answer.status_code == 200 and answer.text == "h2"
    finally:
        backend.stop()


def test_auto_http_proxies_with_the_clients_scheme(dataplane, tls_backend, backends):
    """backend-protocol AUTO_HTTP: HTTP requests go over HTTP, HTTPS ones over HTTPS."""
    (plain,) = backends(1)
    tls = tls_backend()

    def config(backend) -> Configuration:
        loc = Location("/", backend=BACKEND, proxy=ProxySettings(protocol=BackendProtocol.AUTO_HTTP))
        return Configuration(servers=(Server(HOST, locations=(loc,)),),
                             backends=(Backend(BACKEND, endpoints=(backend.endpoint,)),))

    _apply(dataplane, config(plain))
    assert dataplane.get("/", host=HOST).text == "b0"
    assert dataplane.get("/", host=HOST, https=True).status_code == 502  # TLS to a plain backend
    _apply(dataplane, config(tls))
    for _ in range(2):  # either order: HTTP and HTTPS never share an idle connection
        assert dataplane.get("/", host=HOST, https=True).status_code == 200
        assert dataplane.get("/", host=HOST).status_code == 502  # plain HTTP to a TLS backend
    _apply(dataplane, config(plain))
    for _ in range(2):
        assert dataplane.get("/", host=HOST).text == "b0"
        assert dataplane.get("/", host=HOST, https=True).status_code == 502  # never over the plain connection
