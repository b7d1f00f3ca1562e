"""Decoding against the real OpenAPI schemas: unknown fields and wrong types.

The real server decodes a body into Go structs, so a field the type does not
have is dropped (reported per `fieldValidation`: Strict → 400, Warn (the
default) → a `Warning` header, Ignore → silently) and a value of the wrong
JSON type is a 400. Tests that read back what they wrote must not see fields
a real cluster would have thrown away, so the fake does the same.

The schemas are the Kubernetes 1.34 definitions shipped with the
`kubernetes-validate` test dependency; without it the checks are skipped.
They are loaded on first use (~20 ms), not at server start.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field

from .errors import ApiError
from .resources import ResourceType

_PREFERRED_VERSION = "v1.34.0-local"
_lock = threading.Lock()
_defs: dict | None = None
_by_gvk: dict[tuple[str, str, str], str] = {}


def _load() -> dict:
    global _defs
    with _lock:
        if _defs is None:
            _defs = {}
            try:
                import kubernetes_validate
            except ImportError:
                return _defs
            base = os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema")
            versions = sorted(v for v in os.listdir(base) if v.endswith("-local"))
            chosen = _PREFERRED_VERSION if _PREFERRED_VERSION in versions else versions[-1]
            with open(os.path.join(base, chosen, "_definitions.json")) as f:
                _defs = json.load(f)["$defs"]
            for name, schema in _defs.items():
                for gvk in schema.get("x-kubernetes-group-version-kind") or []:
                    _by_gvk[(gvk["group"], gvk["version"], gvk["kind"])] = name
        return _defs


@dataclass
class Findings:
    unknown: list[str] = field(default_factory=list)       # field paths that were dropped
    type_errors: list[str] = field(default_factory=list)   # Go-decoder-like messages


def _resolve(schema: dict) -> tuple[str | None, dict]:
    ref = schema.get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        return name, _defs.get(name, {})
    return None, schema


def _json_type(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _accepts(schema: dict, value) -> bool:
    if "oneOf" in schema:           # IntOrString, Quantity
        return any(_accepts(option, value) for option in schema["oneOf"])
    types = schema.get("type")
    if types is None or value is None:
        return True
    if isinstance(types, str):
        return _CHECKS.get(types, _ANY)(value) if types != "null" else False
    return any(_CHECKS.get(t, _ANY)(value) for t in types if t != "null")


def _ANY(value) -> bool:
    return True


_CHECKS = {"string": lambda v: isinstance(v, str),
           "integer": lambda v: isinstance(v, int) and not isinstance(v, bool)
           or isinstance(v, float) and v.is_integer(),
           "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
           "boolean": lambda v: isinstance(v, bool),
           "object": lambda v: isinstance(v, dict),
           "array": lambda v: isinstance(v, list)}


def _go_type(schema: dict) -> str:
    types = schema.get("type")
    kind = next((t for t in ([types] if isinstance(types, str) else types or []) if t != "null"), "")
    return {"integer": schema.get("format") or "int64", "boolean": "bool", "number": "float64",
            "array": "[]", "object": "map[string]interface {}"}.get(kind, kind or "struct")


def _walk(value, schema: dict, path: str, owner: str, go_path: str, out: Findings):
    """Prune unknown fields from `value` in place (returns the pruned value)."""
    name, schema = _resolve(schema)
    if name:
        owner = name.rsplit(".", 1)[-1]   # Go names the innermost struct, then the full path
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if not _accepts(schema, value):
        where = f"{owner}.{go_path}" if go_path else owner
        out.type_errors.append(f"json: cannot unmarshal {_json_type(value)} into Go struct field "
                               f"{where} of type {_go_type(schema)}")
        return value
    if isinstance(value, dict):
        properties = schema.get("properties")
        if properties is not None:
            for key in list(value):
                if key.startswith("$"):
                    continue   # strategic-merge-patch directives, not fields
                child_path = f"{path}.{key}" if path else key
                if key not in properties:
                    out.unknown.append(child_path)
                    del value[key]
                    continue
                if _plain_scalar_ok(properties[key], value[key]):
                    continue
                child_go = f"{go_path}.{key}" if go_path else key
                value[key] = _walk(value[key], properties[key], child_path, owner, child_go, out)
        elif isinstance(schema.get("additionalProperties"), dict):
            item_schema = schema["additionalProperties"]
            for key in list(value):
                if _plain_scalar_ok(item_schema, value[key]):
                    continue
                value[key] = _walk(value[key], item_schema, f"{path}[{key}]", owner, go_path, out)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        item_schema = schema["items"]
        for i, item in enumerate(value):
            if _plain_scalar_ok(item_schema, item):
                continue
            value[i] = _walk(item, item_schema, f"{path}[{i}]", owner, go_path, out)
    return value


def _plain_scalar_ok(schema: dict, value) -> bool:
    """True when `_walk` would accept `value` as it is and report nothing: a
    scalar of the plain type `schema` names (the common leaf, checked without
    building its paths). Anything else takes the full walk."""
    if value is not None and type(value) not in _SCALAR_TYPES:
        return False
    if "$ref" in schema or "oneOf" in schema or schema.get("x-kubernetes-preserve-unknown-fields"):
        return False
    types = schema.get("type")
    if types is None or value is None:
        return True
    if type(types) is str:
        return types != "null" and _CHECKS.get(types, _ANY)(value)
    return any(_CHECKS.get(t, _ANY)(value) for t in types if t != "null")


_SCALAR_TYPES = (str, int, float, bool)


def decode(rt: ResourceType, obj, mode: str = "Warn") -> list[str]:
    """Drop fields `rt` does not have from `obj` (in place) and check value types.

    Raises a 400 ApiError for wrong types, or for unknown fields when `mode`
    is "Strict". Returns warnings (unknown fields) for mode "Warn". `null`
    values always pass (in a merge patch they are deletions).
    """
    if not isinstance(obj, dict) or not _load():
        return []
    name = _by_gvk.get((rt.group, rt.version, rt.kind))
    if name is None:
        return []
    found = Findings()
    _walk(obj, {"$ref": f"#/$defs/{name}"}, "", rt.kind, "", found)
    prefix = f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
    if found.type_errors:
        raise ApiError(400, "BadRequest", prefix + found.type_errors[0])
    if found.unknown and mode == "Strict":
        listed = ", ".join(f'unknown field "{p}"' for p in found.unknown)
        raise ApiError(400, "BadRequest", prefix + "strict decoding error: " + listed)
    if mode == "Ignore":
        return []
    return [f'unknown field "{p}"' for p in found.unknown]


# --- schema lookups for other modules (strategic merge patch) ----------------------------------

def root(rt: ResourceType) -> dict | None:
    """The resolved schema of a whole object of type `rt`, or None without schemas."""
    if not _load():
        return None
    name = _by_gvk.get((rt.group, rt.version, rt.kind))
    return _defs.get(name) if name else None


def child(schema: dict | None, key: str) -> dict | None:
    """The (unresolved) schema of property `key`, or None when unknown."""
    if not schema:
        return None
    return (schema.get("properties") or {}).get(key) or (
        schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), dict)
        else None)


def resolved(schema: dict | None) -> dict | None:
    if schema is None:
        return None
    return _resolve(schema)[1]
