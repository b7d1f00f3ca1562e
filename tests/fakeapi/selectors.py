"""Label and field selectors, parsed the way the real server parses them.

Label selectors support ``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v``,
``k in (a,b)``, ``k notin (a,b)``, ``k>n`` and ``k<n``. ``k!=v`` and
``notin`` also match objects without the label, like the real server.
Field selectors support ``=``, ``==`` and ``!=`` on the fields each kind
allows (`FIELDS`); others are rejected with 400, as the real server does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .errors import bad_request

Matcher = Callable[[dict], bool]

_LABEL_RE = re.compile(r"""
    \s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9][-A-Za-z0-9_./]*)\s*
    (?:
        (?P<op>==|=|!=|>|<)\s*(?P<value>[-A-Za-z0-9_.]*)\s*
      | (?P<setop>in|notin)\s*\(\s*(?P<values>[^)]*)\)\s*
    )?$""", re.VERBOSE)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


@dataclass(frozen=True)
class _LabelRequirement:
    key: str
    op: str
    values: tuple[str, ...]

    def matches(self, labels: dict) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return has
        if self.op == "!exists":
            return not has
        if self.op in ("=", "==", "in"):
            return has and value in self.values
        if self.op in ("!=", "notin"):
            return not has or value not in self.values
        if self.op in (">", "<"):
            try:
                actual, bound = int(value), int(self.values[0])
            except (TypeError, ValueError):
                return False
            return actual > bound if self.op == ">" else actual < bound
        return False


def parse_label_selector(text: str | None) -> Matcher:
    """A predicate on whole objects; raises ApiError(400) on syntax errors."""
    if not text or not text.strip():
        return lambda obj: True
    requirements = []
    for part in _split_top_level(text):
        m = _LABEL_RE.match(part)
        if not m or (m.group("neg") and (m.group("op") or m.group("setop"))):
            raise bad_request(f"unable to parse requirement: {part.strip()!r}: "
                              f"found unexpected token in label selector {text!r}")
        key = m.group("key")
        if m.group("neg"):
            requirements.append(_LabelRequirement(key, "!exists", ()))
        elif m.group("op"):
            op = m.group("op")
            if op in (">", "<") and not m.group("value").lstrip("-").isdigit():
                raise bad_request(f"unable to parse requirement: for 'Gt', 'Lt' operators, "
                                  f"the value must be an integer")
            requirements.append(_LabelRequirement(key, op, (m.group("value"),)))
        elif m.group("setop"):
            values = tuple(v.strip() for v in m.group("values").split(",") if v.strip())
            if not values:
                raise bad_request(f"unable to parse requirement: for 'in', 'notin' operators, "
                                  f"values set can't be empty")
            requirements.append(_LabelRequirement(key, m.group("setop"), values))
        else:
            requirements.append(_LabelRequirement(key, "exists", ()))

    def matches(obj: dict) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in requirements)
    return matches


# Fields each kind may be selected on, besides metadata.name and metadata.namespace.
FIELDS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
            "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"),
    "Event": ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
              "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
              "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type",
              "regarding.kind", "regarding.name", "regarding.namespace", "regarding.uid",
              "reportingController"),
    "Secret": ("type",),
    "Node": ("spec.unschedulable",),
    "Namespace": ("status.phase",),
    "Service": ("spec.clusterIP", "spec.type"),
}


def _field_value(obj: dict, path: str) -> str:
    current = obj
    for part in path.split("."):
        if not isinstance(current, dict):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    if path == "source" and isinstance(current, dict):  # core Event's source is {component}
        return current.get("component", "")
    return str(current)


def parse_field_selector(text: str | None, kind: str) -> Matcher:
    if not text or not text.strip():
        return lambda obj: True
    allowed = ("metadata.name", "metadata.namespace") + FIELDS.get(kind, ())
    terms: list[tuple[str, bool, str]] = []
    for part in text.split(","):
        part = part.strip()
        m = re.match(r"^([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*)$", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        path, op, value = m.groups()
        if path not in allowed:
            raise bad_request(f'field label not supported: {path}')
        terms.append((path, op == "!=", value))

    def matches(obj: dict) -> bool:
        return all((_field_value(obj, path) == value) != negate for path, negate, value in terms)
    return matches
