"""Choosing a route per request: conditions and weighted backends (Gateway API).

A ``Location`` of the model is chosen by host and path; Gateway API matches
also ask for headers, query parameters and a method, and a rule may split
its requests over several backends by weight. These two values carry that
to the router (``routes.py`` ships them, ``lua/conditions.lua`` and
``lua/weighted.lua`` apply them):

* ``Conditions``: every header, query parameter and method condition must
  hold (AND). Several locations of one server may share a path and match
  type when their conditions differ; they are tried in the server's order
  and the first whose conditions hold answers, else the router goes on with
  the next path that matches (a shorter prefix, ...), else 404.
* ``Split``: ``(backend name | None, weight)`` pairs; each request goes to
  one, with probability weight / total; a None name is an invalid
  backendRef's share, answered with 500. Weights are positive (weight 0
  gets nothing: the translation leaves it out); an all-invalid split is the
  way a rule with no usable backend answers 500.

Both are validated on construction, like every model value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from platformd.ingress import validate as v

__all__ = ["Conditions", "ValueMatch", "check_split", "extend", "put"]

_QUERY_NAME_LIMIT = 256
_WEIGHT_LIMIT = 1_000_000  # the Gateway API's maximum backendRef weight


@dataclass(frozen=True, slots=True)
class ValueMatch:
    """``name`` equals ``value`` (``regex``: ``value`` is a PCRE pattern found
    anywhere in it unless anchored). Header names are compared
    case-insensitively (give them lower case), query parameter names exactly."""

    name: str
    value: str
    regex: bool = False


def _value(field: str, match: ValueMatch) -> str:
    if match.regex:
        return v.header_pattern(f"{field}[{match.name}]", match.value)
    return v.header_value(f"{field}[{match.name}]", match.value)


@dataclass(frozen=True, slots=True)
class Conditions:
    headers: tuple[ValueMatch, ...] = ()
    query: tuple[ValueMatch, ...] = ()
    method: str | None = None

    def __post_init__(self) -> None:
        for h in self.headers:
            if v.header_name("conditions.headers", h.name) != h.name.lower():
                raise v.ValidationError("conditions.headers", h.name, "must be lower case")
            _value("conditions.headers", h)
        for q in self.query:
            if not isinstance(q.name, str) or not q.name or len(q.name) > _QUERY_NAME_LIMIT \
                    or not q.name.isprintable() or not q.name.isascii():
                raise v.ValidationError("conditions.query", q.name,
                                        f"must be 1-{_QUERY_NAME_LIMIT} printable ASCII characters")
            _value("conditions.query", q)
        if self.method is not None:
            v.http_method("conditions.method", self.method)
        if not (self.headers or self.query or self.method):
            raise v.ValidationError("conditions", self, "empty conditions: use None")

    def payload(self) -> dict[str, Any]:
        """As the router reads it (docs/architecture.md, "when")."""
        out: dict[str, Any] = {}
        if self.headers:
            out["headers"] = [[h.name, h.value, h.regex] for h in self.headers]
        if self.query:
            out["query"] = [[q.name, q.value, q.regex] for q in self.query]
        if self.method is not None:
            out["method"] = self.method
        return out


def check_split(field: str, split: tuple[tuple[str | None, int], ...]) -> None:
    """Raise ``ValidationError`` unless ``split`` is a valid ``Split`` (see the module docstring)."""
    for name, weight in split:
        if name is not None:
            v.backend_name(field, name)
        if not isinstance(weight, int) or isinstance(weight, bool) or not 0 < weight <= _WEIGHT_LIMIT:
            raise v.ValidationError(field, weight, f"weights must be integers in [1, {_WEIGHT_LIMIT}]")


def extend(route: dict[str, Any], location) -> None:
    """Add ``location``'s conditions ("when") and split ("split") to its route
    entry (the payload of routes.py; keys absent when unused, so Ingress
    routes ship as before)."""
    if location.conditions is not None:
        route["when"] = location.conditions.payload()
    if location.split:
        route["split"] = [[name, weight] for name, weight in location.split]


def put(table: dict[str, dict], key: str, route: dict[str, Any]) -> dict[str, Any]:
    """Put ``route`` under ``key``; a path that has a route already gets it
    as the last candidate of its chain ("next": tried when the earlier
    candidates' conditions do not hold). Returns the path's first route."""
    head = table.setdefault(key, route)
    if head is not route:
        tail = head
        while "next" in tail:
            tail = tail["next"]
        tail["next"] = route
    return head
