"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and the
two Kubernetes flavours the fake treats as merge patches.

Strategic merge patch is in `strategic` (it needs the schemas' merge keys);
server-side apply is in `apply`. Both build on `merge_patch` here.
"""

from __future__ import annotations

import copy

from .errors import ApiError, bad_request, unsupported_media_type

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
APPLY_CBOR = "application/apply-patch+cbor"

PATCH_TYPES = (MERGE, JSON_PATCH, STRATEGIC, APPLY)


def media_type(content_type: str | None) -> str:
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind not in PATCH_TYPES:
        raise unsupported_media_type(content_type or "")
    return kind


def merge_patch(target, patch):
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if isinstance(key, str) and key.startswith("$"):
            continue  # strategic-merge directives
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"the server rejected our request due to an error in our request: "
                          f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc, parts: list[str], op: dict):
    current = doc
    for part in parts[:-1]:
        if isinstance(current, list):
            try:
                current = current[int(part)]
            except (ValueError, IndexError):
                raise _patch_error(op, f"index {part} out of range")
        elif isinstance(current, dict) and part in current:
            current = current[part]
        else:
            raise _patch_error(op, f"missing path \"{op.get('path')}\"")
    return current


def _patch_error(op: dict, why: str) -> ApiError:
    return ApiError(422, "Invalid", f"the server rejected our request due to an error in our "
                                    f"request: {op.get('op')} operation does not apply: {why}")


def _get(doc, parts, op):
    if not parts:
        return doc
    parent = _parent(doc, parts, op)
    last = parts[-1]
    if isinstance(parent, list):
        try:
            return parent[int(last)]
        except (ValueError, IndexError):
            raise _patch_error(op, f"doc is missing path: \"{op.get('path')}\"")
    if not isinstance(parent, dict) or last not in parent:
        raise _patch_error(op, f"doc is missing path: \"{op.get('path')}\"")
    return parent[last]


def _remove(doc, parts, op):
    parent = _parent(doc, parts, op)
    last = parts[-1]
    if isinstance(parent, list):
        try:
            return parent.pop(int(last))
        except (ValueError, IndexError):
            raise _patch_error(op, f"doc is missing path: \"{op.get('path')}\"")
    if not isinstance(parent, dict) or last not in parent:
        raise _patch_error(op, f"doc is missing path: \"{op.get('path')}\"")
    return parent.pop(last)


def _add(doc, parts, value, op, replace=False):
    if not parts:
        return value
    parent = _parent(doc, parts, op)
    last = parts[-1]
    if isinstance(parent, list):
        if last == "-":
            parent.append(value)
            return doc
        try:
            index = int(last)
        except ValueError:
            raise _patch_error(op, f"invalid index {last!r}")
        if replace:
            if not 0 <= index < len(parent):
                raise _patch_error(op, f"doc is missing path: \"{op.get('path')}\"")
            parent[index] = value
        elif 0 <= index <= len(parent):
            parent.insert(index, value)
        else:
            raise _patch_error(op, f"index {index} out of range")
        return doc
    if not isinstance(parent, dict):
        raise _patch_error(op, f"doc is missing path: \"{op.get('path')}\"")
    if replace and last not in parent:
        raise _patch_error(op, f"doc is missing key: {op.get('path')}")
    parent[last] = value
    return doc


def json_patch(target, operations):
    """RFC 6902 on a copy of `target`; a failed `test` is a 422 like the real server."""
    if not isinstance(operations, list):
        raise bad_request("json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op:
            raise bad_request("unexpected kind of operation in json patch")
        name = op["op"]
        path = _pointer(op.get("path", ""))
        if name == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")), op)
        elif name == "replace":
            doc = _add(doc, path, copy.deepcopy(op.get("value")), op, replace=True)
        elif name == "remove":
            _remove(doc, path, op)
        elif name == "move":
            value = _remove(doc, _pointer(op.get("from", "")), op)
            doc = _add(doc, path, value, op)
        elif name == "copy":
            value = copy.deepcopy(_get(doc, _pointer(op.get("from", "")), op))
            doc = _add(doc, path, value, op)
        elif name == "test":
            if _get(doc, path, op) != op.get("value"):
                raise _patch_error(op, f"testing value {op.get('path')} failed")
        else:
            raise bad_request(f"Unexpected kind: {name}")
    return doc


def apply_patch(kind: str, target, patch):
    """Apply a parsed PATCH body of media type `kind` to `target`."""
    if kind == JSON_PATCH:
        return json_patch(target, patch)
    if not isinstance(patch, dict):
        raise bad_request("patch body must be a JSON object")
    return merge_patch(target, patch)
