"""Strategic merge patch, driven by the schemas' patch metadata.

Like a JSON merge patch, except for lists whose schema says
`x-kubernetes-patch-strategy: merge`: lists of objects are merged element by
element on `x-kubernetes-patch-merge-key` (Service ports by port, containers
by name, conditions by type), lists of scalars become the union. Supported
directives: `$patch: replace|delete` (on maps and list elements),
`$retainKeys`, `$deleteFromPrimitiveList/<field>` and
`$setElementOrder/<field>` (what `kubectl apply` sends). Without schemas
(`schema.root` is None) this is a plain merge patch.
"""

from __future__ import annotations

import copy

from . import patching, schema
from .resources import ResourceType


def apply(rt: ResourceType, target: dict, patch: dict) -> dict:
    root = schema.root(rt)
    if root is None:
        return patching.merge_patch(target, patch)
    return _merge_map(target if isinstance(target, dict) else {}, patch, root)


def _strip(value):
    """A patch value with its directives removed (for values that replace)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _merge_map(original: dict, patch: dict, type_schema: dict | None) -> dict:
    if patch.get("$patch") == "replace":
        return _strip(patch)
    result = copy.deepcopy(original)
    orders: dict[str, list] = {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            orders[key.split("/", 1)[1]] = value
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
            continue
        field_schema = schema.child(type_schema, key)
        resolved = schema.resolved(field_schema)
        current = result.get(key)
        if isinstance(value, dict) and value.get("$patch") == "delete":
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(current, dict):
            result[key] = _merge_map(current, value, resolved)
        elif isinstance(value, list) and _strategy_merge(field_schema):
            result[key] = _merge_list(current if isinstance(current, list) else [], value, field_schema)
        else:
            result[key] = _strip(value)
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            result[field] = _reorder(result[field], order, schema.child(type_schema, field))
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _strategy_merge(field_schema: dict | None) -> bool:
    strategy = (field_schema or {}).get("x-kubernetes-patch-strategy") or ""
    return "merge" in strategy.split(",")


def _merge_list(original: list, patch: list, field_schema: dict) -> list:
    merge_key = field_schema.get("x-kubernetes-patch-merge-key")
    if merge_key is None:                               # a set of scalars
        return original + [_strip(v) for v in patch if v not in original]
    if any(isinstance(e, dict) and e.get("$patch") == "replace" for e in patch):
        return [_strip(e) for e in patch if not (isinstance(e, dict) and e.get("$patch"))]
    item_schema = schema.resolved(field_schema.get("items"))
    result = copy.deepcopy(original)
    for element in patch:
        if not isinstance(element, dict):
            continue
        key = element.get(merge_key)
        index = next((i for i, e in enumerate(result)
                      if isinstance(e, dict) and e.get(merge_key) == key), None)
        if element.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append(_strip(element))
        else:
            result[index] = _merge_map(result[index], element, item_schema)
    return result


def _reorder(items: list, order: list, field_schema: dict | None) -> list:
    """`$setElementOrder`: listed elements first, in that order, then the rest."""
    merge_key = (field_schema or {}).get("x-kubernetes-patch-merge-key")

    def identity(item):
        return item.get(merge_key) if merge_key and isinstance(item, dict) else item
    wanted = [identity(o) for o in order]
    listed = sorted((i for i in items if identity(i) in wanted), key=lambda i: wanted.index(identity(i)))
    return listed + [i for i in items if identity(i) not in wanted]
