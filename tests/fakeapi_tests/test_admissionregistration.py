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
