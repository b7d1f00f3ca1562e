"""The webhook's serving certificate: made once, kept in a Secret, renewed before it expires.

The API server calls the webhook over TLS and trusts only the CA in the
``ValidatingWebhookConfiguration``'s ``caBundle``. ``CertificateKeeper``
owns both ends:

* ``issue`` (pure) makes a CA (ECDSA P-256, ``CA_VALIDITY``) and a serving
  certificate signed by it for the webhook Service's DNS names
  (``SERVING_VALIDITY``). The Secret (type ``kubernetes.io/tls``, the layout
  cert-manager writes too) holds ``tls.crt``, ``tls.key``, ``ca.crt`` and the
  CA's key ``ca.key``, so any replica can renew the serving certificate
  under the same CA without changing ``caBundle``.
* ``plan`` (pure) decides from the Secret's contents and the time what to do:
  ``keep``; ``renew`` (the serving certificate has less than ``RENEW_BEFORE``
  left, or does not name the Service: a new one from the same CA); ``new``
  (no usable CA, or the CA has less than ``CA_RENEW_BEFORE`` left: a new CA
  and serving certificate; ``ca.crt`` keeps the old CA too while it is valid,
  so API servers that still hold the old bundle trust neither less nor more
  than before once the bundle is injected).
* ``sync`` (the adapter) reads the Secret, applies the plan with an update
  that carries the read ``resourceVersion`` (two replicas racing: one wins,
  the other gets a conflict, reads again and keeps the winner's), injects
  ``ca.crt`` into every webhook of the configuration whose ``caBundle``
  differs (GET + PUT with resourceVersion, same race rule), then hands the
  serving pair to ``on_certificate`` when it changed.

The chart creates the Secret empty (RBAC cannot grant ``create`` for one
name), so the controller needs only get/update on that Secret and get/update
on that one configuration. A missing Secret is created when allowed.

With cert-manager (``external=True``) the keeper only reads the Secret and
never writes anything: cert-manager renews it and its CA injector fills
``caBundle``.

``run`` repeats ``sync`` every ``INTERVAL`` (so a Secret another replica
renewed, or a ``caBundle`` a re-applied manifest emptied, is put right
within a minute), and after a failure backs off from 1 s doubling to
``INTERVAL``.
"""

from __future__ import annotations

import base64
import datetime
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from platformd.common import errors, kubeclient

__all__ = ["CertificateKeeper", "Issued", "KeeperOptions", "issue", "plan", "service_names"]

log = logging.getLogger(__name__)

CA_VALIDITY = datetime.timedelta(days=3650)
SERVING_VALIDITY = datetime.timedelta(days=365)
#: A serving certificate is renewed with a month left: a month of failed
#: renewals (an API outage, a broken RBAC change) before anything breaks.
RENEW_BEFORE = datetime.timedelta(days=30)
#: A CA is replaced with longer left, since its successor must reach every
#: API server's caBundle before the old one expires.
CA_RENEW_BEFORE = datetime.timedelta(days=90)
#: Seconds between two checks of the Secret and the configuration.
INTERVAL = 60.0
FIRST_BACKOFF = 1.0


@dataclass(frozen=True)
class Issued:
    """The Secret's contents, PEM bytes. ``ca_cert`` may hold several CAs, newest first."""

    cert: bytes
    key: bytes
    ca_cert: bytes
    ca_key: bytes

    def data(self) -> dict[str, str]:
        """The Secret's ``data``."""
        fields = {"tls.crt": self.cert, "tls.key": self.key, "ca.crt": self.ca_cert, "ca.key": self.ca_key}
        return {k: base64.b64encode(v).decode() for k, v in fields.items()}


def service_names(namespace: str, name: str) -> tuple[str, ...]:
    """The names the API server may use for a Service (it calls ``name.namespace.svc``)."""
    return (f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local", f"{name}.{namespace}", name)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _new_ca(now: datetime.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"platform-webhook-ca-{int(now.timestamp())}")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + CA_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def _new_serving(names: tuple[str, ...], ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
                 now: datetime.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    not_after = min(now + SERVING_VALIDITY, ca.not_valid_after_utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def issue(names: tuple[str, ...], now: datetime.datetime, previous: Issued | None = None,
          new_ca: bool = True) -> Issued:
    """A serving certificate for ``names``: under a new CA, or under
    ``previous``'s CA when ``new_ca`` is False. With a new CA, the still
    valid CAs of ``previous`` stay in ``ca_cert`` after it."""
    if new_ca or previous is None:
        ca, ca_key = _new_ca(now)
        older = [c for c in _cas(previous) if c.not_valid_after_utc > now] if previous else []
        bundle = b"".join(map(_pem, [ca, *older]))
    else:
        ca = _cas(previous)[0]
        ca_key = serialization.load_pem_private_key(previous.ca_key, None)
        bundle = b"".join(_pem(c) for c in _cas(previous) if c.not_valid_after_utc > now)
    cert, key = _new_serving(names, ca, ca_key, now)
    return Issued(_pem(cert), _key_pem(key), bundle, _key_pem(ca_key))


def _cas(issued: Issued | None) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(issued.ca_cert) if issued and issued.ca_cert else []


def from_secret(secret: dict | None) -> Issued | None:
    """The Secret's certificates, or None when it has none (empty or partly written)."""
    data = (secret or {}).get("data") or {}
    try:
        fields = [base64.b64decode(data.get(k) or "", validate=True) for k in ("tls.crt", "tls.key", "ca.crt", "ca.key")]
    except ValueError:
        return None
    if not (fields[0] and fields[1] and fields[2]):
        return None
    return Issued(*fields)


def _spki(public_key) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def plan(issued: Issued | None, names: tuple[str, ...], now: datetime.datetime) -> str:
    """``keep``, ``renew`` or ``new`` (see module docstring)."""
    try:
        cas = _cas(issued)
        cert = x509.load_pem_x509_certificate(issued.cert) if issued else None
        if issued is not None and issued.ca_key:
            ca_key = serialization.load_pem_private_key(issued.ca_key, None)
        else:
            ca_key = None
    except (ValueError, TypeError):
        return "new"
    if not cas or cert is None or ca_key is None:
        return "new"
    ca = cas[0]
    if _spki(ca.public_key()) != _spki(ca_key.public_key()) or ca.not_valid_after_utc - now < CA_RENEW_BEFORE:
        return "new"
    try:
        cert.verify_directly_issued_by(ca)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, x509.InvalidSignature, x509.ExtensionNotFound):
        return "renew"
    if cert.not_valid_after_utc - now < RENEW_BEFORE or cert.not_valid_before_utc > now \
            or not set(names) <= set(san.get_values_for_type(x509.DNSName)):
        return "renew"
    return "keep"


@dataclass(frozen=True)
class KeeperOptions:
    secret: str  # "namespace/name" of the Secret
    service: str  # "namespace/name" of the webhook's Service (the certificate's names)
    configuration: str | None = None  # ValidatingWebhookConfiguration whose caBundle we fill; None: none
    external: bool = False  # cert-manager writes the Secret and caBundle; only read them


class CertificateKeeper:
    """Keeps the Secret, ``caBundle`` and the server's certificate in step (module docstring).

    ``on_certificate(cert_pem, key_pem)`` (settable: the server that wants
    it exists only once the first certificate does) is called from ``sync``
    whenever the serving pair differs from the last one handed over. ``clock``
    returns wall time (seconds).
    """

    def __init__(self, api, options: KeeperOptions, on_certificate: Callable[[bytes, bytes], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._api = api
        self.options = options
        self.on_certificate = on_certificate
        self._clock = clock
        self._served: tuple[bytes, bytes] | None = None
        self.last_error: str | None = None

    @property
    def certificate(self) -> tuple[bytes, bytes] | None:
        """The serving (cert, key) of the last successful ``sync``."""
        return self._served

    def sync(self) -> Issued:
        """One pass: Secret, then caBundle, then the server. Raises ``errors.ApiError``."""
        issued = self._ensure_secret()
        if self.options.configuration and not self.options.external:
            self._inject(issued.ca_cert)
        pair = (issued.cert, issued.key)
        if pair != self._served:
            if self.on_certificate is not None:
                self.on_certificate(*pair)
            self._served = pair
        self.last_error = None
        return issued

    def run(self, stop: threading.Event) -> None:
        """``sync`` every ``INTERVAL`` until ``stop``; back off after failures."""
        delay = FIRST_BACKOFF
        while True:
            try:
                self.sync()
                delay = INTERVAL
            except Exception as exc:  # noqa: BLE001 - renewals must outlive any one failure
                self.last_error = str(exc) or type(exc).__name__
                delay = min(delay * 2, INTERVAL) if delay < INTERVAL else FIRST_BACKOFF
                if isinstance(exc, (errors.ApiError, ValueError)):
                    log.warning("webhook certificate: %s; retrying in %.0f s", exc, delay)
                else:
                    log.exception("webhook certificate: unexpected failure; retrying in %.0f s", delay)
            if stop.wait(delay):
                return

    # --- the Secret -------------------------------------------------------------

    def _secret_path(self) -> str:
        namespace, _, name = self.options.secret.partition("/")
        return f"/api/v1/namespaces/{namespace}/secrets/{name}"

    def _ensure_secret(self) -> Issued:
        namespace, _, name = self.options.service.partition("/")
        names = service_names(namespace, name)
        for _ in range(3):  # a conflict means another replica wrote it: read again
            try:
                secret = kubeclient.request_json(self._api, "GET", self._secret_path())
            except errors.NotFound:
                secret = None
            current = from_secret(secret)
            if self.options.external:
                if current is None:
                    raise errors.ApiError(f"Secret {self.options.secret} has no certificate yet (cert-manager)")
                return current
            now = datetime.datetime.fromtimestamp(self._clock(), datetime.timezone.utc)
            decision = plan(current, names, now)
            if decision == "keep":
                return current
            made = issue(names, now, current, new_ca=decision == "new")
            log.info("webhook certificate: %s in Secret %s (for %s)",
                     "new CA and certificate" if decision == "new" else "renewed certificate",
                     self.options.secret, names[0])
            try:
                self._write_secret(secret, made)
                return made
            except errors.Conflict:
                continue
        raise errors.ApiError(f"Secret {self.options.secret}: kept conflicting with other writers")

    def _write_secret(self, secret: dict | None, made: Issued) -> None:
        namespace, _, name = self.options.secret.partition("/")
        if secret is None:
            body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                    "metadata": {"name": name, "namespace": namespace}, "data": made.data()}
            # 409 AlreadyExists (another replica made it meanwhile) is a Conflict too.
            kubeclient.request_json(self._api, "POST", f"/api/v1/namespaces/{namespace}/secrets", body=body)
            return
        body = {**secret, "data": {**(secret.get("data") or {}), **made.data()}}
        if secret.get("type") not in (None, "kubernetes.io/tls"):
            raise errors.ApiError(f"Secret {self.options.secret} has type {secret.get('type')!r}, "
                                  "not kubernetes.io/tls; refusing to overwrite it")
        kubeclient.request_json(self._api, "PUT", self._secret_path(), body=body)

    # --- caBundle ---------------------------------------------------------------

    def _inject(self, ca_bundle: bytes) -> None:
        path = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{self.options.configuration}"
        wanted = base64.b64encode(ca_bundle).decode()
        for _ in range(3):
            config = kubeclient.request_json(self._api, "GET", path)
            webhooks = config.get("webhooks") or []
            if all((w.get("clientConfig") or {}).get("caBundle") == wanted for w in webhooks):
                return
            config = {**config, "webhooks": [
                {**w, "clientConfig": {**(w.get("clientConfig") or {}), "caBundle": wanted}} for w in webhooks]}
            try:
                kubeclient.request_json(self._api, "PUT", path, body=config)
                log.info("webhook certificate: CA injected into ValidatingWebhookConfiguration %s",
                         self.options.configuration)
                return
            except errors.Conflict:
                continue
        raise errors.ApiError(f"ValidatingWebhookConfiguration {self.options.configuration}: "
                              "kept conflicting with other writers")
