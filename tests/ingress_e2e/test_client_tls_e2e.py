"""Client certificates end to end: the controller with the fake API server
and real nginx. An Ingress whose CA Secret does not exist is not served
(fail closed, an Event naming the annotation); once the Secret appears the
controller translates again (the Secret is indexed from the annotation) and
the host asks for and verifies client certificates."""

from __future__ import annotations

import base64

from tests.helpers import pki
from tests.helpers.tlsclient import request
from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for
from tests.ingress_e2e.test_problems import _base, _has_event


def test_ca_secret_appearing_later_turns_client_certificates_on(fake_api, ingress_controller, netns_backends,
                                                                 tmp_path):
    backends = netns_backends(["web"])
    _base(fake_api, backends)
    host = "secure.example"
    ca = pki.authority("Client CA")
    server = pki.leaf(pki.authority("Server CA"), host, server=True)
    client = pki.leaf(ca, "alice").write(tmp_path, "alice")
    fake_api.create(o.tls_secret("secure-tls", server.cert_pem, server.key_pem))
    fake_api.create(o.ingress("secure", host, [("/", "web", 80)], tls=[{"hosts": [host], "secretName": "secure-tls"}],
                              annotations={"nginx.ingress.kubernetes.io/auth-tls-secret": "default/client-ca"}))
    running = ingress_controller()
    running.wait_ready()
    wait_for(lambda: _has_event(fake_api, "secure", "InvalidAnnotation"), 15, message="InvalidAnnotation event")
    assert request(running.https_port, host, host, cert=client).status == 404  # not served: fail closed
    # The CA arrives in a kubernetes.io/tls Secret (the type the controller watches; cert-manager adds ca.crt).
    ca_secret = o.tls_secret("client-ca", server.cert_pem, server.key_pem)
    ca_secret["data"]["ca.crt"] = base64.b64encode(ca.cert_pem.encode()).decode()
    fake_api.create(ca_secret)
    wait_for(lambda: request(running.https_port, host, host, cert=client).status == 200, 15,
             message="served with client certificates once the CA Secret exists")
    assert request(running.https_port, host, host, cert=client).body == b"web"
    answer = request(running.https_port, host, host)
    assert answer.status == 400 and b"No required SSL certificate was sent" in answer.body
