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
