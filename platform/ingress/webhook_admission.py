"""``admission.k8s.io/v1`` AdmissionReview: the wire format of a validating webhook.

Pure functions between bytes and plain values, no I/O:

* ``parse_review(body)`` reads a request body into an ``AdmissionRequest`` or
  raises ``MalformedReview`` naming what is wrong. When the body is JSON
  with a usable ``request.uid`` the error carries it, so the server can
  still answer with a review the API server understands (a denial with
  status 400 and the reason) instead of a bare HTTP error.
* ``response_body(uid, verdict)`` is the answer: ``allowed``, a ``status``
  with every error when denied, and ``warnings`` (shown by kubectl as
  "Warning: ...") when allowed or denied.

Only v1 is spoken: the API server has sent v1 reviews since Kubernetes 1.16
when the configuration lists ``admissionReviewVersions: ["v1"]``, and our
chart does. Limits follow the API server's own (warnings: it truncates
each to 256 characters and drops what does not fit 4 KiB in all).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["AdmissionRequest", "MalformedReview", "Verdict", "parse_review", "response_body", "MAX_BODY"]

API_VERSION = "admission.k8s.io/v1"
#: Largest request body read. etcd stores objects of at most 1.5 MiB
#: (its --max-request-bytes default), a review carries two (object and
#: oldObject) plus a few KiB of request fields: 4 MiB leaves room and stops
#: a client that would make us buffer more.
MAX_BODY = 4 * 1024 * 1024
#: What the API server keeps of warnings (k8s.io/apiserver admission
#: warning limits): longer ones are cut, later ones dropped.
WARNING_LENGTH = 256
WARNINGS_TOTAL = 4096

_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class MalformedReview(ValueError):
    """A body that is not a usable AdmissionReview v1; ``uid`` when known."""

    def __init__(self, message: str, uid: str | None = None) -> None:
        super().__init__(message)
        self.uid = uid


@dataclass(frozen=True)
class AdmissionRequest:
    """The parts of ``AdmissionReview.request`` a reviewer reads.

    ``object`` is None for DELETE, ``old_object`` None for CREATE (and for
    DELETE from API servers older than 1.16). Both are the API's own dicts
    and must not be modified.
    """

    uid: str
    group: str
    version: str
    kind: str
    operation: str
    namespace: str
    name: str
    object: dict | None = field(default=None, repr=False)
    old_object: dict | None = field(default=None, repr=False)
    dry_run: bool = False
    sub_resource: str = ""


@dataclass(frozen=True)
class Verdict:
    """A reviewer's answer. ``allowed`` is False exactly when ``errors``."""

    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return not self.errors


def parse_review(body: bytes) -> AdmissionRequest:
    """The request in ``body``; ``MalformedReview`` says what is wrong."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedReview(f"body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise MalformedReview("body is not a JSON object")
    request = doc.get("request")
    uid = request.get("uid") if isinstance(request, dict) else None
    uid = uid if isinstance(uid, str) and uid else None

    def fail(message: str) -> MalformedReview:
        return MalformedReview(message, uid)

    if doc.get("kind") != "AdmissionReview" or doc.get("apiVersion") != API_VERSION:
        raise fail(f"expected kind AdmissionReview, apiVersion {API_VERSION}; got kind "
                   f"{doc.get('kind')!r}, apiVersion {doc.get('apiVersion')!r}")
    if not isinstance(request, dict):
        raise fail("request is missing or not an object")
    if uid is None:
        raise fail("request.uid is missing or empty")
    kind = request.get("kind")
    if not isinstance(kind, dict) or not all(isinstance(kind.get(k, ""), str) for k in ("group", "version", "kind")):
        raise fail("request.kind must be an object with group, version and kind")
    operation = request.get("operation")
    if operation not in _OPERATIONS:
        raise fail(f"request.operation must be one of {', '.join(_OPERATIONS)}; got {operation!r}")
    objects = {}
    for name in ("object", "oldObject"):
        value = request.get(name)
        if value is not None and not isinstance(value, dict):
            raise fail(f"request.{name} must be an object or null")
        objects[name] = value
    if operation in ("CREATE", "UPDATE") and objects["object"] is None:
        raise fail(f"request.object is required for {operation}")
    if operation == "UPDATE" and objects["oldObject"] is None:
        raise fail("request.oldObject is required for UPDATE")
    strings = {}
    for name in ("namespace", "name", "subResource"):
        value = request.get(name) or ""  # omitted when empty (omitempty); null from other clients
        if not isinstance(value, str):
            raise fail(f"request.{name} must be a string")
        strings[name] = value
    dry_run = request.get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise fail("request.dryRun must be a boolean")
    return AdmissionRequest(
        uid=uid, group=kind.get("group", ""), version=kind.get("version", ""), kind=kind.get("kind", ""),
        operation=operation, namespace=strings["namespace"], name=strings["name"],
        object=objects["object"], old_object=objects["oldObject"], dry_run=dry_run,
        sub_resource=strings["subResource"])


def response_body(uid: str, verdict: Verdict, *, code: int = 400) -> bytes:
    """The AdmissionReview answering request ``uid`` with ``verdict``.

    A denial carries every error in ``status.message`` (the API server shows
    it after 'admission webhook "..." denied the request: ') and ``code``
    (400: the object is invalid, as the API server's own validation says).
    """
    response: dict = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        errors = verdict.errors
        message = errors[0] if len(errors) == 1 else f"{len(errors)} problems: " + "; ".join(errors)
        response["status"] = {"code": code, "reason": "BadRequest" if code == 400 else "InternalError",
                              "message": message}
    warnings = _fit_warnings(verdict.warnings)
    if warnings:
        response["warnings"] = warnings
    return json.dumps({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response},
                      separators=(",", ":")).encode()


def _fit_warnings(warnings: tuple[str, ...]) -> list[str]:
    """Warnings cut to what the API server keeps (it would drop the rest silently)."""
    kept, total = [], 0
    for text in warnings:
        text = " ".join(text.split())  # no control characters: the API server drops such warnings
        if len(text) > WARNING_LENGTH:
            text = text[:WARNING_LENGTH - 3] + "..."
        if total + len(text) > WARNINGS_TOTAL:
            kept.append(f"{len(warnings) - len(kept)} more warnings not shown")
            break
        kept.append(text)
        total += len(text)
    return kept
