"""API errors as the real API server reports them: `Status` objects.

Every failure the fake server returns is an `ApiError` turned into a
`{"kind": "Status", "status": "Failure", ...}` body with the same `reason`,
`code` and message wording as the real server, because clients branch on
`reason`/`code` (410 Expired → relist, 409 Conflict → re-read, 429 → back off).

Field validation errors mirror `k8s.io/apimachinery/pkg/util/validation/field`:
each `FieldError` renders as ``<field>: <body>`` and a 422 Invalid Status
carries one `details.causes` entry per error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


class ApiError(Exception):
    """A request failed; `status()` is the body to send, `code` the HTTP status."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None,
                 headers: dict[str, str] | None = None, metadata: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}
        self.metadata = metadata or {}   # ListMeta, e.g. the fresh continue token of a 410

    def status(self) -> dict:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.metadata),
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _qualified(resource) -> str:
    # The real server names the *resource* in most messages: `ingresses.networking.k8s.io "x"`.
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


def _details(resource, name: str | None) -> dict:
    details = {"kind": resource.plural}
    if name:
        details = {"name": name, **details}
    if resource.group:
        details["group"] = resource.group
    return details


def not_found(resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_qualified(resource)} "{name}" not found',
                    _details(resource, name))


def already_exists(resource, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{_qualified(resource)} "{name}" already exists',
                    _details(resource, name))


def conflict(resource, name: str, why: str) -> ApiError:
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {_qualified(resource)} "{name}": {why}',
                    _details(resource, name))


def stale_update(resource, name: str) -> ApiError:
    return conflict(resource, name,
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again")


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource")


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType",
                    f'the body of the request was in an unknown format - accepted media types '
                    f'include: application/json-patch+json, application/merge-patch+json, '
                    f'application/apply-patch+yaml, application/strategic-merge-patch+json '
                    f'(got "{content_type}")')


def expired(message: str, continue_token: str | None = None) -> ApiError:
    return ApiError(410, "Expired", message,
                    metadata={"continue": continue_token} if continue_token else None)


def gone_watch(requested: int, oldest: int) -> ApiError:
    """The error a watch reports (as an ERROR event) when its start point was compacted."""
    return ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})")


def too_large_resource_version(requested: int, current: int) -> ApiError:
    return ApiError(504, "Timeout",
                    f"Too large resource version: {requested}, current: {current}",
                    {"causes": [{"reason": "ResourceVersionTooLarge",
                                 "message": "Too large resource version"}],
                     "retryAfterSeconds": 1})


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden(user: str, verb: str, resource, subresource: str, name: str | None,
              namespace: str | None) -> ApiError:
    """403, worded like the apiserver's `forbiddenMessage` wrapped in `NewForbidden`."""
    what = resource.plural + (f"/{subresource}" if subresource else "")
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    reason = (f'User "{user}" cannot {verb} resource "{what}" in API group "{resource.group}" '
              f'{scope}')
    target = f'{_qualified(resource)} "{name}"' if name else _qualified(resource)
    return ApiError(403, "Forbidden", f"{target} is forbidden: {reason}", _details(resource, name))


# --- field errors --------------------------------------------------------------------------

def _render_value(value) -> str:
    """Go's `%#v`-ish rendering the real messages use for bad values."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return "null"
    return "\"object\"" if isinstance(value, dict) else json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True)
class FieldError:
    """One validation failure at a field path (``spec.rules[0].host``)."""

    type: str          # CauseType: FieldValueInvalid, FieldValueRequired, ...
    field: str
    value: object = None
    detail: str = ""

    def body(self) -> str:
        if self.type == "FieldValueRequired":
            text = "Required value"
        elif self.type == "FieldValueForbidden":
            text = "Forbidden"
        elif self.type == "FieldValueDuplicate":
            text = f"Duplicate value: {_render_value(self.value)}"
        elif self.type == "FieldValueNotSupported":
            text = f"Unsupported value: {_render_value(self.value)}"
        elif self.type == "FieldValueTooMany":
            text = f"Too many: {self.value}"
        elif self.type == "FieldValueTooLong":
            text = "Too long"
        else:
            text = f"Invalid value: {_render_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", field, None, detail)


def invalid(field: str, value, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, value, detail)


def not_supported(field: str, value, supported: list[str]) -> FieldError:
    quoted = ", ".join(json.dumps(s) for s in supported)
    return FieldError("FieldValueNotSupported", field, value, f"supported values: {quoted}")


def forbidden_field(field: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", field, None, detail)


def duplicate(field: str, value) -> FieldError:
    return FieldError("FieldValueDuplicate", field, value)


def too_many(field: str, actual: int, limit: int) -> FieldError:
    return FieldError("FieldValueTooMany", field, actual, f"must have at most {limit} items")


def too_long(field: str, limit: int) -> FieldError:
    return FieldError("FieldValueTooLong", field, None, f"may not be more than {limit} bytes")


def invalid_object(resource, kind: str, name: str, errors: list[FieldError]) -> ApiError:
    """422 Invalid, worded like `apierrors.NewInvalid`."""
    qualified_kind = f"{kind}.{resource.group}" if resource.group else kind
    if len(errors) == 1:
        aggregate = str(errors[0])
    else:
        aggregate = "[" + ", ".join(str(e) for e in errors) + "]"
    details = {"name": name}
    if resource.group:
        details["group"] = resource.group
    details["kind"] = kind
    details["causes"] = [{"reason": e.type, "message": e.body(), "field": e.field} for e in errors]
    return ApiError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {aggregate}', details)
