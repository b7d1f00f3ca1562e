"""``platformd ingress --validating-webhook``: the webhook inside the real controller process.

The controller runs against the fake API server with its real informers and
nginx; the test is the API server's side of the call: it trusts only the CA
the controller injected into the ValidatingWebhookConfiguration and posts
AdmissionReviews to the Service's port.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import threading

import httpx
import pytest

from tests.helpers.backends import free_port
from tests.ingress.test_webhook_certs import CONFIG, empty_secret, webhook_configuration
from tests.ingress.test_webhook_server import answer, review
from tests.ingress.test_webhook_review import OLDER, web_ingress
from tests.ingress_e2e.conftest import NGINX, RunningController, wait_for


LATER = "2999-01-01T00:00:00Z"


@pytest.fixture
def controller(fake_api):
    if not os.path.exists(NGINX):
        pytest.skip("nginx is not installed")
    fake_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "platform"}})
    fake_api.create(webhook_configuration())
    fake_api.create(empty_secret())
    fake_api.create({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "platform"},
                     "spec": {"controller": "k8s.io/platform-ingress"}})
    port = free_port()
    # The fake API server calls the webhook like a real one: through the
    # configuration's Service (port 8443), which here leads to the controller.
    fake_api.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "webhook", "namespace": "platform"},
                     "spec": {"ports": [{"name": "webhook", "port": 8443, "targetPort": "webhook"}]}})
    fake_api.registry.admit.service_routes[("platform", "webhook", 8443)] = ("127.0.0.1", port)
    running = RunningController(["--kubeconfig", str(fake_api.kubeconfig), "--validating-webhook",
                                 f"127.0.0.1:{port}", "--webhook-service", "platform/webhook",
                                 "--webhook-secret", "platform/webhook-certificate",
                                 "--webhook-configuration", CONFIG])
    running.webhook_port = port
    try:
        running.wait_ready()
        yield running
    finally:
        running.close()


class ApiServerSide:
    """Calls the webhook as the API server does: trusting only the injected
    caBundle and checking the certificate for the Service's name
    (webhook.platform.svc, which here is 127.0.0.1)."""

    NAME = "webhook.platform.svc"

    def __init__(self, fake_api, port: int) -> None:
        config = fake_api.get("ValidatingWebhookConfiguration", None, CONFIG)
        bundle = base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"]).decode()
        self._client = httpx.Client(verify=ssl.create_default_context(cadata=bundle), timeout=5)
        self._url = f"https://127.0.0.1:{port}"

    def post(self, body: dict) -> httpx.Response:
        return self._client.post(self._url + "/validate", content=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Host": self.NAME},
                                 extensions={"sni_hostname": self.NAME})

    def get(self, path: str) -> httpx.Response:
        return self._client.get(self._url + path, extensions={"sni_hostname": self.NAME})


def test_webhook_in_the_controller_reviews_with_the_injected_ca(fake_api, controller):
    fake_api.create(web_ingress("old", created=OLDER))
    wait_for(lambda: controller.status().get("ingresses") == 1, message="controller serves the Ingress")
    client = ApiServerSide(fake_api, controller.webhook_port)
    assert client.get("/healthz").status_code == 200
    assert answer(client.post(review(web_ingress("fine", p="/fine"))))["allowed"] is True
    # The API server stamps creationTimestamp before admission: later than the stored one's.
    denied = answer(client.post(review(web_ingress("new", created=LATER))))
    assert denied["allowed"] is False and "default/old" in denied["status"]["message"]
    bad = answer(client.post(review(web_ingress("bad", p="/bad", annotations={"limit-rps": "lots"}))))
    assert bad["allowed"] is False and "limit-rps" in bad["status"]["message"]
    secret = fake_api.get("Secret", "platform", "webhook-certificate")
    assert secret["data"]["tls.crt"] and secret["data"]["ca.key"]
    assert controller.internal("/healthz").status_code == 200


def test_the_api_server_refuses_what_the_controller_would_not_serve(fake_api, controller):
    """kubectl's path: a write to the API server, which asks the controller before storing."""
    from tests.fakeapi import ApiError

    # The server stamps creationTimestamp (to the second): within one second
    # the name decides which is older, as in the controller.
    fake_api.create(web_ingress("a-first"))
    # The controller counts an Ingress it owns only after its informer (the
    # one the webhook's indexes live on) delivered it.
    wait_for(lambda: controller.status()["ingresses"] >= 1, message="informer has the Ingress")
    with pytest.raises(ApiError) as caught:
        fake_api.create(web_ingress("new"))
    assert caught.value.code == 400 and "denied the request: prefix path '/app' of host 'example.com' " \
        "is already served by Ingress default/a-first" in str(caught.value)
    with pytest.raises(ApiError, match="proxy-read-timeout"):
        fake_api.create(web_ingress("bad", p="/bad", annotations={"proxy-read-timeout": "1; lua"}))
    assert fake_api.get("Ingress", "default", "new") is None and fake_api.get("Ingress", "default", "bad") is None
    fake_api.create(web_ingress("fine", p="/fine"))
    assert any("Service 'default/web' not found" in w for w in fake_api.registry.admit.warnings)


def test_webhook_without_an_api_server_serves_a_certificate_of_its_own(tmp_path):
    if not os.path.exists(NGINX):
        pytest.skip("nginx is not installed")
    import yaml

    (tmp_path / "objects.yaml").write_text(yaml.safe_dump_all([
        {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "platform"},
         "spec": {"controller": "k8s.io/platform-ingress"}},
        {"apiVersion": "networking.k8s.io/v1", **web_ingress("old", created=OLDER)}]))
    port = free_port()
    running = RunningController(["--source", str(tmp_path), "--validating-webhook", f"127.0.0.1:{port}"])
    try:
        running.wait_ready()
        with httpx.Client(verify=False, timeout=5) as client:  # nothing to trust it by: no Secret, no caBundle
            response = client.post(f"https://127.0.0.1:{port}/validate", content=json.dumps(
                review(web_ingress("new", created=LATER))).encode(), headers={"Content-Type": "application/json"})
        denied = answer(response)
        assert denied["allowed"] is False and "default/old" in denied["status"]["message"]
    finally:
        running.close()


def test_a_bad_webhook_address_stops_the_start_with_one_line(tmp_path):
    from platformd.ingress import main as ingress_main

    args = ingress_main.build_parser().parse_args([
        "--source", str(tmp_path), "--state-dir", str(tmp_path / "state"), "--validating-webhook", "8443",
        "--healthz-port", str(free_port()), "--http-port", str(free_port()), "--https-port", str(free_port())])
    with pytest.raises(ingress_main.StartError, match="--validating-webhook: expected"):
        ingress_main.run(args, threading.Event())
