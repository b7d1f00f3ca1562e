"""The webhook's certificate: made once in a Secret, reused, renewed, and its CA in caBundle.

The keeper talks to the project's fake API server through the real client.
"""

from __future__ import annotations

import base64
import datetime
import ssl

import pytest
from cryptography import x509

from platformd.common import errors, kubeclient
from platformd.ingress import webhook_certs as certs

NOW = datetime.datetime(2026, 11, 24, tzinfo=datetime.timezone.utc)
NAMES = certs.service_names("platform", "webhook")
CONFIG = "platform-ingress"


def at(days: float) -> datetime.datetime:
    return NOW + datetime.timedelta(days=days)


def serving(made: certs.Issued) -> x509.Certificate:
    return x509.load_pem_x509_certificate(made.cert)


def cas(made: certs.Issued) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(made.ca_cert)


# --- pure: issue and plan --------------------------------------------------------


def test_issued_certificate_names_the_service_and_chains_to_its_ca():
    made = certs.issue(NAMES, NOW)
    cert = serving(made)
    assert cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName) == list(NAMES)
    cert.verify_directly_issued_by(cas(made)[0])
    assert cert.not_valid_after_utc == NOW + certs.SERVING_VALIDITY
    context = ssl.create_default_context(cadata=made.ca_cert.decode())  # the CA is a usable trust anchor
    assert context.cert_store_stats()["x509_ca"] == 1


def test_plan_keeps_a_fresh_certificate_and_renews_before_expiry():
    made = certs.issue(NAMES, NOW)
    assert certs.plan(made, NAMES, at(1)) == "keep"
    renew_at = certs.SERVING_VALIDITY - certs.RENEW_BEFORE
    assert certs.plan(made, NAMES, at(renew_at.days - 1)) == "keep"
    assert certs.plan(made, NAMES, at(renew_at.days + 1)) == "renew"


def test_plan_renews_for_another_service_name():
    made = certs.issue(NAMES, NOW)
    assert certs.plan(made, certs.service_names("platform", "renamed"), at(1)) == "renew"


def test_plan_makes_a_new_ca_when_there_is_none_or_it_ends_soon():
    assert certs.plan(None, NAMES, NOW) == "new"
    assert certs.plan(certs.Issued(b"junk", b"junk", b"junk", b"junk"), NAMES, NOW) == "new"
    made = certs.issue(NAMES, NOW)
    assert certs.plan(made, NAMES, at((certs.CA_VALIDITY - certs.CA_RENEW_BEFORE).days + 1)) == "new"
    other = certs.issue(NAMES, NOW)
    assert certs.plan(certs.Issued(made.cert, made.key, made.ca_cert, other.ca_key), NAMES, at(1)) == "new"


def test_renewal_keeps_the_ca_and_a_new_ca_keeps_the_old_one_trusted():
    made = certs.issue(NAMES, NOW)
    renewed = certs.issue(NAMES, at(340), made, new_ca=False)
    assert renewed.ca_cert == made.ca_cert and renewed.cert != made.cert
    serving(renewed).verify_directly_issued_by(cas(made)[0])
    rotated = certs.issue(NAMES, at(3600), renewed, new_ca=True)
    assert [c.subject for c in cas(rotated)][1:] == [cas(made)[0].subject]
    serving(rotated).verify_directly_issued_by(cas(rotated)[0])
    assert certs.plan(rotated, NAMES, at(3601)) == "keep"


# --- the keeper against the fake API server -----------------------------------------


def webhook_configuration() -> dict:
    hook = {"admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "clientConfig": {"service": {"namespace": "platform", "name": "webhook", "path": "/validate",
                                         "port": 8443}},
            "rules": [{"apiGroups": ["networking.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                       "resources": ["ingresses"]}]}
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": CONFIG},
            "webhooks": [{**hook, "name": "validate.ingress.platform.io"},
                         {**hook, "name": "validate.other.platform.io"}]}


def empty_secret() -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "webhook-certificate", "namespace": "platform"},
            "data": {"tls.crt": "", "tls.key": ""}}


@pytest.fixture
def cluster(fake_api):
    fake_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "platform"}})
    fake_api.create(webhook_configuration())
    fake_api.create(empty_secret())
    fake_api.api = kubeclient.load(fake_api.kubeconfig)
    return fake_api


def keeper(cluster, clock_days: float = 0, **options) -> certs.CertificateKeeper:
    opts = {"secret": "platform/webhook-certificate", "service": "platform/webhook", "configuration": CONFIG,
            **options}
    when = at(clock_days).timestamp()
    k = certs.CertificateKeeper(cluster.api, certs.KeeperOptions(**opts), clock=lambda: when)
    k.handed: list = []
    k.on_certificate = lambda cert, key: k.handed.append((cert, key))
    return k


def stored(cluster) -> certs.Issued | None:
    return certs.from_secret(cluster.get("Secret", "platform", "webhook-certificate"))


def bundles(cluster) -> list[str | None]:
    config = cluster.get("ValidatingWebhookConfiguration", None, CONFIG)
    return [w["clientConfig"].get("caBundle") for w in config["webhooks"]]


def test_first_sync_fills_the_secret_and_injects_the_ca(cluster):
    k = keeper(cluster)
    made = k.sync()
    assert stored(cluster) == made
    assert bundles(cluster) == [base64.b64encode(made.ca_cert).decode()] * 2
    assert k.handed == [(made.cert, made.key)] and k.certificate == (made.cert, made.key)


def test_another_replica_reuses_the_certificate_and_writes_nothing(cluster):
    first = keeper(cluster).sync()
    versions = (cluster.get("Secret", "platform", "webhook-certificate")["metadata"]["resourceVersion"],
                cluster.get("ValidatingWebhookConfiguration", None, CONFIG)["metadata"]["resourceVersion"])
    second = keeper(cluster)
    assert second.sync() == first
    assert versions == (cluster.get("Secret", "platform", "webhook-certificate")["metadata"]["resourceVersion"],
                        cluster.get("ValidatingWebhookConfiguration", None, CONFIG)["metadata"]["resourceVersion"])


def test_a_cleared_ca_bundle_is_injected_again(cluster):
    made = keeper(cluster).sync()
    cluster.update(webhook_configuration() | {"metadata": cluster.get(
        "ValidatingWebhookConfiguration", None, CONFIG)["metadata"]})
    assert bundles(cluster) == [None, None]
    keeper(cluster).sync()
    assert bundles(cluster) == [base64.b64encode(made.ca_cert).decode()] * 2


def test_renewal_before_expiry_keeps_the_ca_and_hands_the_new_pair_over(cluster):
    k = keeper(cluster)
    first = k.sync()
    later = keeper(cluster, clock_days=340)
    renewed = later.sync()
    assert renewed.cert != first.cert and renewed.ca_cert == first.ca_cert
    assert stored(cluster) == renewed and later.handed == [(renewed.cert, renewed.key)]
    assert bundles(cluster) == [base64.b64encode(first.ca_cert).decode()] * 2


def test_a_missing_secret_is_created(cluster):
    cluster.delete("Secret", "platform", "webhook-certificate")
    made = keeper(cluster).sync()
    assert stored(cluster) == made
    assert cluster.get("Secret", "platform", "webhook-certificate")["type"] == "kubernetes.io/tls"


def test_a_secret_of_another_type_is_not_overwritten(cluster):
    cluster.delete("Secret", "platform", "webhook-certificate")
    cluster.create({**empty_secret(), "type": "Opaque", "data": {"password": "c2VjcmV0"}})
    with pytest.raises(errors.ApiError, match="Opaque"):
        keeper(cluster).sync()
    assert cluster.get("Secret", "platform", "webhook-certificate")["data"] == {"password": "c2VjcmV0"}


def test_two_replicas_racing_keep_one_certificate(cluster, monkeypatch):
    loser, winner = keeper(cluster), keeper(cluster)
    real = kubeclient.request_json
    raced: list = []
    calls = []

    def interleaved(api, method, path, **kw):
        if method == "PUT" and "secrets" in path and not calls:
            calls.append(path)
            raced.append(winner.sync())  # the other replica writes between our GET and PUT
        return real(api, method, path, **kw)

    monkeypatch.setattr(kubeclient, "request_json", interleaved)
    got = loser.sync()
    assert raced and got == raced[0] == stored(cluster)


def test_cert_manager_mode_only_reads(cluster):
    k = keeper(cluster, external=True)
    with pytest.raises(errors.ApiError, match="no certificate yet"):
        k.sync()
    made = keeper(cluster).sync()
    cluster.update(webhook_configuration() | {"metadata": cluster.get(
        "ValidatingWebhookConfiguration", None, CONFIG)["metadata"]})
    assert k.sync() == made
    assert bundles(cluster) == [None, None]  # cert-manager's CA injector fills it, not us


def test_without_rbac_for_the_configuration_the_error_says_so(cluster):
    cluster.delete("ValidatingWebhookConfiguration", None, CONFIG)
    with pytest.raises(errors.NotFound):
        keeper(cluster).sync()


def test_run_syncs_until_stopped_and_records_failures(cluster):
    import threading

    cluster.delete("ValidatingWebhookConfiguration", None, CONFIG)
    k = keeper(cluster)
    stop = threading.Event()
    stop.set()
    k.run(stop)  # one pass, then stop
    assert "404" in k.last_error and stored(cluster) is not None
    cluster.create(webhook_configuration())
    k.run(stop)
    assert k.last_error is None and bundles(cluster)[0]


def test_plan_replaces_a_ca_of_another_key_type():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    made = certs.issue(NAMES, NOW)
    other = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    assert certs.plan(certs.Issued(made.cert, made.key, made.ca_cert, other), NAMES, at(1)) == "new"
