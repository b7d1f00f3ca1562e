"""Secrets named by annotations are indexed (re-translation on change) and
reach the admission webhook's partial snapshot."""

from __future__ import annotations

import base64

from platformd.ingress.secret_refs import index_ingress_by_any_secret
from tests.helpers import pki
from tests.ingress.test_webhook_controller import ApiServerSide, controller  # noqa: F401  (fixture)
from tests.ingress.test_webhook_review import web_ingress
from tests.ingress.test_webhook_server import answer, review
from tests.ingress_e2e import objects as o


def test_index_lists_tls_and_annotation_secrets_of_the_namespace():
    obj = {"metadata": {"namespace": "team", "annotations": {
        "nginx.ingress.kubernetes.io/auth-tls-secret": "team/client-ca",
        "nginx.ingress.kubernetes.io/proxy-ssl-secret": "backend-ca",
    }}, "spec": {"tls": [{"secretName": "site"}]}}
    assert index_ingress_by_any_secret(obj) == ["team/backend-ca", "team/client-ca", "team/site"]
    obj["metadata"]["annotations"]["nginx.ingress.kubernetes.io/auth-tls-secret"] = "other/ca"
    assert "other/ca" not in index_ingress_by_any_secret(obj)  # refused anyway: never read


def test_webhook_sees_the_ca_secret(fake_api, controller):  # noqa: F811
    ca = pki.authority("CA")
    leaf = pki.leaf(ca, "x.example", server=True)
    secret = o.tls_secret("client-ca", leaf.cert_pem, leaf.key_pem)
    secret["data"]["ca.crt"] = base64.b64encode(ca.cert_pem.encode()).decode()
    fake_api.create(secret)
    client = ApiServerSide(fake_api, controller.webhook_port)
    present = web_ingress("a", annotations={"auth-tls-secret": "client-ca"})
    assert answer(client.post(review(present)))["allowed"] is True
    missing = web_ingress("b", p="/b", annotations={"auth-tls-secret": "nowhere"})
    denied = answer(client.post(review(missing)))
    assert denied["allowed"] is False and "auth-tls-secret" in denied["status"]["message"]
