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

from platformd.common.kubelib import client as _models

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


# A check is compiled once per type string into a function of the value
# that returns None or (path parts, what is wrong), the path built only on
# failure: checking 50,000 manifests re-matched the type strings and
# formatted a path for every field (1.1 million calls, ~40% of reading a
# folder of 10,000 Ingresses); compiled, it is a third of that.
_Found = "tuple[tuple[str, ...], str] | None"


def _accept(value: object) -> None:
    return None


@functools.lru_cache(maxsize=None)
def _checker(type_: str):
    if type_ in _SCALARS:
        return _scalar(type_)
    match = _LIST.match(type_)
    if match:
        return _list(match.group(1))
    match = _DICT.match(type_)
    if match:
        return _dict(match.group(1) or match.group(2))
    if not hasattr(_models, type_):
        return _accept  # a type the client does not model: accept, as for unknown fields
    return _object(type_)


def _scalar(type_: str):
    allowed = _SCALARS[type_]
    if allowed is None:
        return _accept
    name, bools = _NAMES[type_], bool in allowed

    def check(value: object) -> _Found:
        if value is None or (isinstance(value, allowed) and (bools or value.__class__ is not bool)):
            return None
        return (), f"must be {name}, not {_describe(value)}"
    return check


def _list(inner_type: str):
    def check(value: object) -> _Found:
        if value is None:
            return None
        if value.__class__ is not list:
            return (), f"must be a list, not {_describe(value)}"
        inner = _checker(inner_type)
        for index, item in enumerate(value):
            found = inner(item)
            if found:
                return (f"[{index}]", *found[0]), found[1]
        return None
    return check


def _dict(inner_type: str):
    def check(value: object) -> _Found:
        if value is None:
            return None
        if value.__class__ is not dict:
            return (), f"must be an object, not {_describe(value)}"
        inner = _checker(inner_type)
        for key, item in value.items():
            if key.__class__ is not str:
                return (), f"keys must be strings, not {_describe(key)}"
            found = inner(item)
            if found:
                return (f"[{key}]", *found[0]), found[1]
        return None
    return check


def _object(model_name: str):
    def check(value: object) -> _Found:
        if value is None:
            return None
        if value.__class__ is not dict:
            return (), f"must be an object, not {_describe(value)}"
        fields = _fields(model_name)
        for key, item in value.items():
            field_type = fields.get(key)
            if field_type is not None:
                found = _checker(field_type)(item)
                if found:
                    return (f".{key}", *found[0]), found[1]
        return None
    return check


def _check(type_: str, value: object, where: str) -> str | None:
    """None, or "<where + field path>: <what it must be>"."""
    found = _checker(type_)(value)
    if found is None:
        return None
    path = where + "".join(found[0])
    return f"{path[1:] if path.startswith('.') else path}: {found[1]}"


def problem(api_version: str, kind: str, obj: dict) -> str | None:
    """None if ``obj`` has the field types of its kind; else "<field path>: <what it must be>"."""
    model = _model(kind, api_version.rpartition("/")[2])
    if model is None:
        return None
    return _check(model.__name__, obj, "")
