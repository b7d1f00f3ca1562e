"""List options and continue tokens.

A continue token is opaque to clients; like the real server's it is base64
of `{"v": "meta.k8s.io/v1", "rv": <snapshot rv>, "start": "<last key>\\0"}`,
so every page of one list is read at the first page's resourceVersion.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from .errors import ApiError, FieldError, bad_request


@dataclass(frozen=True)
class ListOptions:
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    resource_version: str | None = None
    resource_version_match: str | None = None
    limit: int = 0
    continue_token: str | None = None
    send_initial_events: bool = False


def encode_continue(rv: int, last_key: tuple[str, str]) -> str:
    start = (f"{last_key[0]}/{last_key[1]}" if last_key[0] else last_key[1]) + "\u0000"
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    """(snapshot rv, last (namespace, name) returned); 400 when malformed."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        rv = int(data["rv"])
        start = data["start"].rstrip("\u0000")
        namespace, _, name = start.rpartition("/")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise bad_request(f"continue key is not valid: {e}") from None
    if data.get("v") != "meta.k8s.io/v1" or rv <= 0:
        raise bad_request("continue key is not valid: incorrect encoded start resourceVersion "
                          "(version meta.k8s.io/v1)")
    return rv, (namespace, name)


def invalid_list_options(field: str, value: str, detail: str) -> ApiError:
    """422 for bad ListOptions, as the real server words it."""
    err = FieldError("FieldValueInvalid", field, value, detail)
    return ApiError(422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: {err}',
                    {"group": "meta.k8s.io", "kind": "ListOptions",
                     "causes": [{"reason": err.type, "message": err.body(), "field": field}]})
