"""Field types of Kubernetes objects, checked the way the API server checks them.

An API server refuses ``spec: {rules: ["x"]}`` for an Ingress (a rule is an
object, not a string); a folder of manifests has no API server in front of
it, and before this check such a field reached the translation, which raised
``AttributeError`` in every sync. ``problem(kind, obj)`` answers what the
API server's decoder would: None when every known field has its type, else
the first offending field path and what it should be.

The types come from the ``kubernetes`` client's generated models
(``V1Ingress.openapi_types``: ``'List[V1IngressRule]'``, ``'Dict[str, str]'``,
``'int'``, ``'object'`` for int-or-string...), which are generated from the
API's own OpenAPI document: the schema lives in a maintained library, not
here. Unknown fields are ignored (the API server prunes them), ``null`` is
"not set" anywhere, and kinds without a model (custom resources) are not
checked beyond being objects.
"""

from __future__ import annotations

import functools
import re

import kubernetes.client as _models

__all__ = ["problem"]

_LIST = re.compile(r"^list\[(.+)\]$", re.I)
_DICT = re.compile(r"^dict\(str, (.+)\)$|^dict\[str, (.+)\]$", re.I)
_SCALARS = {
    "str": (str,), "datetime": (str,), "date": (str,), "bytes": (str,),
    "int": (int,), "float": (int, float), "bool": (bool,), "object": None,
}
_NAMES = {"str": "a string", "datetime": "a timestamp string", "date": "a date string", "bytes": "a base64 string",
          "int": "an integer", "float": "a number", "bool": "true or false"}
# Kinds whose model class is not simply V1<kind>.
_MODEL_NAMES = {"Event": "CoreV1Event"}


def _model(kind: str, version: str):
    if version != "v1":
        return None
    return getattr(_models, _MODEL_NAMES.get(kind, "V1" + kind), None)


@functools.lru_cache(maxsize=None)
def _fields(model_name: str) -> dict[str, str]:
    """JSON field name -> type string of a generated model."""
    model = getattr(_models, model_name)
    return {model.attribute_map[attr]: type_ for attr, type_ in model.openapi_types.items()}


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _check(type_: str, value: object, where: str) -> str | None:
    if value is None:
        return None
    if type_ in _SCALARS:
        allowed = _SCALARS[type_]
        if allowed is None:
            return None
        if isinstance(value, bool) and bool not in allowed:
            return f"{where}: must be {_NAMES[type_]}, not a boolean"
        if not isinstance(value, allowed):
            return f"{where}: must be {_NAMES[type_]}, not {_describe(value)}"
        return None
    match = _LIST.match(type_)
    if match:
        if not isinstance(value, list):
            return f"{where}: must be a list, not {_describe(value)}"
        for index, item in enumerate(value):
            found = _check(match.group(1), item, f"{where}[{index}]")
            if found:
                return found
        return None
    match = _DICT.match(type_)
    if match:
        if not isinstance(value, dict):
            return f"{where}: must be an object, not {_describe(value)}"
        inner = match.group(1) or match.group(2)
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where}: keys must be strings, not {_describe(key)}"
            found = _check(inner, item, f"{where}[{key}]")
            if found:
                return found
        return None
    if not hasattr(_models, type_):
        return None  # a type the client does not model: accept, as for unknown fields
    if not isinstance(value, dict):
        return f"{where}: must be an object, not {_describe(value)}"
    fields = _fields(type_)
    for key, item in value.items():
        field_type = fields.get(key)
        if field_type is not None:
            found = _check(field_type, item, f"{where}.{key}" if where else key)
            if found:
                return found
    return None


def problem(api_version: str, kind: str, obj: dict) -> str | None:
    """None if ``obj`` has the field types of its kind; else "<field path>: <what it must be>"."""
    model = _model(kind, api_version.rpartition("/")[2])
    if model is None:
        return None
    return _check(model.__name__, obj, "")
