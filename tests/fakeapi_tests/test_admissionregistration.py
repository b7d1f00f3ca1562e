"""ValidatingWebhookConfigurations: stored, listed, and refused when not callable."""

from __future__ import annotations

import copy

import pytest

from tests.fakeapi import ApiError

from .helpers import raw

PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def _config(**hook_fields) -> dict:
    hook = {"name": "ingress.validate.platform.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"service": {"namespace": "platform", "name": "webhook", "path": "/validate",
                                         "port": 443}},
            "rules": [{"apiGroups": ["networking.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["ingresses"]}]}
    hook.update(hook_fields)
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "platform"}, "webhooks": [hook]}


def test_stored_and_served_over_http(fake_api):
    status, body, _ = raw(fake_api, "POST", PATH, _config())
    assert status == 201, body
    status, listed, _ = raw(fake_api, "GET", PATH)
    assert status == 200 and [o["metadata"]["name"] for o in listed["items"]] == ["platform"]


def test_ca_bundle_update_keeps_the_rest(fake_api):
    stored = fake_api.create(_config())
    changed = copy.deepcopy(stored)
    changed["webhooks"][0]["clientConfig"]["caBundle"] = "Y2E="
    updated = fake_api.update(changed)
    assert updated["webhooks"][0]["clientConfig"]["caBundle"] == "Y2E="
    assert updated["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"]


@pytest.mark.parametrize("fields, field", [
    ({"name": "short.name"}, "webhooks[0].name"),
    ({"sideEffects": None}, "webhooks[0].sideEffects"),
    ({"sideEffects": "Some"}, "webhooks[0].sideEffects"),
    ({"admissionReviewVersions": ["v2"]}, "webhooks[0].admissionReviewVersions"),
    ({"failurePolicy": "Maybe"}, "webhooks[0].failurePolicy"),
    ({"timeoutSeconds": 31}, "webhooks[0].timeoutSeconds"),
    ({"clientConfig": {"url": "https://x", "service": {"namespace": "a", "name": "b"}}}, "webhooks[0].clientConfig"),
    ({"clientConfig": {"service": {"namespace": "a", "name": "b", "path": "validate"}}},
     "webhooks[0].clientConfig.service.path"),
    ({"clientConfig": {"service": {"namespace": "a", "name": "b"}, "caBundle": "not base64!"}},
     "webhooks[0].clientConfig.caBundle"),
])
def test_invalid_configurations_are_refused(fake_api, fields, field):
    with pytest.raises(ApiError) as caught:
        fake_api.create(_config(**fields))
    assert caught.value.code == 422 and field in str(caught.value)


def test_webhook_names_are_unique(fake_api):
    config = _config()
    config["webhooks"].append(copy.deepcopy(config["webhooks"][0]))
    with pytest.raises(ApiError, match="Duplicate"):
        fake_api.create(config)


# --- the admission call path -----------------------------------------------------------

import base64  # noqa: E402
import datetime  # noqa: E402

from platformd.ingress import webhook_certs  # noqa: E402
from platformd.ingress.webhook_admission import Verdict  # noqa: E402
from platformd.ingress.webhook_server import WebhookServer  # noqa: E402


class Scripted:
    """A reviewer that records requests and denies names starting with "bad"."""

    def __init__(self):
        self.requests = []

    def review(self, request):
        self.requests.append(request)
        name = request.name
        return Verdict(errors=(f"{name} is bad",) if name.startswith("bad") else (),
                       warnings=(f"saw {name}",))


@pytest.fixture
def hooked(fake_api):
    """A webhook server on loopback behind Service platform/webhook, and its configuration."""
    made = webhook_certs.issue(webhook_certs.service_names("platform", "webhook"),
                               datetime.datetime.now(datetime.timezone.utc))
    reviewer = Scripted()
    server = WebhookServer("127.0.0.1", 0, {("networking.k8s.io", "Ingress"): reviewer}, (made.cert, made.key))
    server.start()
    fake_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "platform"}})
    fake_api.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "webhook", "namespace": "platform"},
                     "spec": {"ports": [{"name": "https", "port": 443, "targetPort": "https"}]}})
    fake_api.registry.admit.service_routes[("platform", "webhook", 443)] = ("127.0.0.1", server.port)

    def configure(**fields):
        config = _config(**fields)
        config["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(made.ca_cert).decode()
        config["webhooks"][0]["rules"][0]["operations"] = ["CREATE", "UPDATE", "DELETE"]
        for key, value in fields.items():
            config["webhooks"][0][key] = value
        return fake_api.create(config)

    fake_api.reviewer, fake_api.configure = reviewer, configure
    yield fake_api
    server.stop()


def _ing(name, namespace="default", labels=None):
    meta = {"name": name, "namespace": namespace, **({"labels": labels} if labels else {})}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta,
            "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}}


def test_a_denial_fails_the_write_with_the_webhooks_message(hooked):
    hooked.configure()
    with pytest.raises(ApiError) as caught:
        hooked.create(_ing("bad-one"))
    assert caught.value.code == 400
    assert 'admission webhook "ingress.validate.platform.io" denied the request: bad-one is bad' in str(caught.value)
    assert hooked.get("Ingress", "default", "bad-one") is None


def test_an_allowed_write_is_stored_with_its_warnings_kept(hooked):
    hooked.configure()
    hooked.create(_ing("good"))
    request = hooked.reviewer.requests[-1]
    assert (request.operation, request.namespace, request.name, request.dry_run) == ("CREATE", "default", "good", False)
    assert request.object["metadata"]["uid"] and hooked.get("Ingress", "default", "good") is not None
    assert "saw good" in hooked.registry.admit.warnings


def test_update_delete_and_dry_run_reach_the_webhook_and_status_does_not(hooked):
    hooked.configure()
    stored = hooked.create(_ing("good"))
    status, _, _ = raw(hooked, "POST", "/apis/networking.k8s.io/v1/namespaces/default/ingresses",
                       _ing("dry"), query={"dryRun": "All"})
    assert status == 201 and hooked.reviewer.requests[-1].dry_run is True
    stored["metadata"]["labels"] = {"a": "b"}
    hooked.update(stored)
    assert hooked.reviewer.requests[-1].operation == "UPDATE"
    assert hooked.reviewer.requests[-1].old_object["metadata"].get("labels") is None
    seen = len(hooked.reviewer.requests)
    status, _, _ = raw(hooked, "PUT", "/apis/networking.k8s.io/v1/namespaces/default/ingresses/good/status",
                       {**hooked.get("Ingress", "default", "good"),
                        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}})
    assert status == 200 and len(hooked.reviewer.requests) == seen
    hooked.delete("Ingress", "default", "good")
    assert hooked.reviewer.requests[-1].operation == "DELETE" and hooked.reviewer.requests[-1].object is None


def test_selectors_decide_which_writes_are_reviewed(hooked):
    hooked.configure(namespaceSelector={"matchLabels": {"reviewed": "yes"}})
    hooked.create(_ing("bad-but-unreviewed"))
    hooked.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "labels": {"reviewed": "yes"}}})
    with pytest.raises(ApiError):
        hooked.create(_ing("bad-two", namespace="team"))


def test_object_selector(hooked):
    hooked.configure(objectSelector={"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]})
    hooked.create(_ing("bad-skipped", labels={"skip": "1"}))
    with pytest.raises(ApiError):
        hooked.create(_ing("bad-three"))


def test_an_unreachable_webhook_fails_closed_or_is_ignored(hooked):
    hooked.registry.admit.service_routes.clear()
    hooked.configure()
    with pytest.raises(ApiError) as caught:
        hooked.create(_ing("good"))
    assert caught.value.code == 500 and "failed calling webhook" in str(caught.value)
    hooked.delete("ValidatingWebhookConfiguration", None, "platform")
    hooked.configure(failurePolicy="Ignore")
    assert hooked.create(_ing("good"))["metadata"]["name"] == "good"


def test_a_webhook_not_trusted_by_its_ca_bundle_is_not_believed(hooked):
    config = hooked.configure()
    config["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(webhook_certs.issue(
        ("x",), datetime.datetime.now(datetime.timezone.utc)).ca_cert).decode()
    hooked.update(config)
    with pytest.raises(ApiError, match="failed calling webhook"):
        hooked.create(_ing("good"))
