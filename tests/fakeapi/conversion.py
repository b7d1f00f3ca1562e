"""Conversion between a stored form and the API version a client uses.

Like the real server, `events.k8s.io/v1` Events and core `v1` Events are two
views of one storage: an Event written through either API is listed and
watched through both. Storage keeps the core form; this module maps the
fields that differ. Every other type is stored as served (identity).
"""

from __future__ import annotations

import copy

from .resources import ResourceType

# events.k8s.io/v1 field -> core/v1 field
_EVENT_FIELDS = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_EVENT_SHARED = ("metadata", "eventTime", "series", "reportingInstance", "action", "reason",
                 "related", "type")


def _is_new_events(rt: ResourceType) -> bool:
    return rt.group == "events.k8s.io"


def to_storage(rt: ResourceType, obj: dict) -> dict:
    if not _is_new_events(rt):
        return obj
    out = {"kind": "Event", "apiVersion": "v1"}
    for key in _EVENT_SHARED:
        if key in obj:
            out[key] = copy.deepcopy(obj[key])
    for new, old in _EVENT_FIELDS.items():
        if new in obj:
            out[old] = copy.deepcopy(obj[new])
    return out


def from_storage(rt: ResourceType, obj: dict | None) -> dict | None:
    if obj is None or not _is_new_events(rt):
        return obj
    out = {"kind": "Event", "apiVersion": rt.api_version}
    for key in _EVENT_SHARED:
        if key in obj:
            out[key] = copy.deepcopy(obj[key])
    for new, old in _EVENT_FIELDS.items():
        if old in obj:
            out[new] = copy.deepcopy(obj[old])
    # eventTime is not optional in events.k8s.io/v1: a core Event without one is
    # served with `"eventTime": null`, as the real server does.
    out.setdefault("eventTime", None)
    return out


# --- decoding normalisation -----------------------------------------------------------------
# The real server decodes JSON into Go types and encodes them again, so a time
# sent as "2026-01-01T01:00:00+01:00" comes back as "2026-01-01T00:00:00Z"
# (metav1.Time, second precision) or "2026-01-01T00:00:00.000000Z"
# (metav1.MicroTime). Clients that compare what they wrote with what they
# read must cope with that, so the fake does the same for the fields we use.

_MICRO = "micro"
_SECONDS = "seconds"
_TIME_FIELDS: dict[tuple[str, str], tuple[tuple[tuple[str, ...], str], ...]] = {
    ("coordination.k8s.io", "leases"): ((("spec", "acquireTime"), _MICRO),
                                        (("spec", "renewTime"), _MICRO)),
    ("", "events"): ((("eventTime",), _MICRO), (("series", "lastObservedTime"), _MICRO),
                     (("firstTimestamp",), _SECONDS), (("lastTimestamp",), _SECONDS)),
    ("events.k8s.io", "events"): ((("eventTime",), _MICRO), (("series", "lastObservedTime"), _MICRO),
                                  (("deprecatedFirstTimestamp",), _SECONDS),
                                  (("deprecatedLastTimestamp",), _SECONDS)),
}


def format_time(value: str, precision: str) -> str:
    """Re-render an RFC 3339 time in UTC; raises ValueError when it is not one."""
    import datetime

    if not isinstance(value, str):
        raise ValueError(f"expected a time string, got {value!r}")
    parsed = datetime.datetime.fromisoformat(value.replace("z", "Z"))
    if parsed.tzinfo is None:
        raise ValueError(f"time {value!r} has no time zone")
    parsed = parsed.astimezone(datetime.timezone.utc)
    if precision == _MICRO:
        return parsed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return parsed.strftime("%Y-%m-%dT%H:%M:%SZ")


def normalize_times(rt: ResourceType, obj: dict) -> list[tuple[str, object]]:
    """Normalise known time fields in place; returns (field, value) pairs that
    are not times (the caller turns them into a 400 like a decoding error)."""
    bad = []
    for path, precision in _TIME_FIELDS.get((rt.group, rt.plural), ()):
        parent = obj
        for part in path[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or parent.get(path[-1]) in (None, ""):
            continue
        try:
            parent[path[-1]] = format_time(parent[path[-1]], precision)
        except ValueError:
            bad.append((".".join(path), parent[path[-1]]))
    return bad


def invalid_base64(rt: ResourceType, obj: dict) -> str | None:
    """The first Secret data / ConfigMap binaryData value that is not base64
    (the real server fails to decode such a body: 400)."""
    import base64
    import binascii

    field = {("", "secrets"): "data", ("", "configmaps"): "binaryData"}.get((rt.group, rt.plural))
    for value in ((obj.get(field) or {}).values() if field else ()):
        try:
            base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            return str(value)
    return None
