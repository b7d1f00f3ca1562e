"""Server-side apply, reduced to what our deploy tooling relies on.

An apply request sends the manager's whole intent. The part that matters
most in practice is *removal*: a field the same manager applied last time
and leaves out now is removed from the object. That needs ownership, which
the real server records in `metadata.managedFields` (operation `Apply`,
`fieldsV1` sets); this module does the same for Apply managers only.

Simplifications (documented gaps): lists are atomic (owned and replaced
whole, no merge keys); ownership from non-apply writes (PUT/PATCH) is not
tracked, so there are no apply conflicts (every apply behaves as
`force=true`); a field is only removed when no other Apply manager owns it.
"""

from __future__ import annotations

import copy
import time

from .errors import FieldError, bad_request, required

Path = tuple[str, ...]

# Identity and server-owned fields are not "owned" by an applier.
_IGNORED = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace"),
            ("metadata", "resourceVersion"), ("metadata", "uid"), ("metadata", "generation"),
            ("metadata", "creationTimestamp"), ("metadata", "managedFields"),
            ("metadata", "generateName")}


def field_paths(config, prefix: Path = ()) -> set[Path]:
    """Leaf paths of an applied configuration; maps recurse, anything else is a leaf."""
    if not isinstance(config, dict):
        return {prefix} if prefix else set()
    paths: set[Path] = set()
    for key, value in config.items():
        path = prefix + (key,)
        if path in _IGNORED:
            continue
        if isinstance(value, dict) and value:
            paths |= field_paths(value, path)
        else:
            paths.add(path)
    return paths


def encode_fields(paths: set[Path]) -> dict:
    """Paths as a `fieldsV1` tree: {"f:spec": {"f:replicas": {}}}."""
    tree: dict = {}
    for path in sorted(paths):
        node = tree
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return tree


def decode_fields(tree: dict, prefix: Path = ()) -> set[Path]:
    paths: set[Path] = set()
    for key, sub in (tree or {}).items():
        if not key.startswith("f:"):
            continue
        path = prefix + (key[2:],)
        if sub:
            paths |= decode_fields(sub, path)
        else:
            paths.add(path)
    return paths


def _owned_by_appliers(managed: list[dict]) -> dict[str, set[Path]]:
    return {entry.get("manager", ""): decode_fields(entry.get("fieldsV1") or {})
            for entry in managed if entry.get("operation") == "Apply"}


def _remove(obj: dict, path: Path) -> None:
    parents = [obj]
    for key in path[:-1]:
        nxt = parents[-1].get(key) if isinstance(parents[-1], dict) else None
        if not isinstance(nxt, dict):
            return
        parents.append(nxt)
    parents[-1].pop(path[-1], None)
    # Drop maps this emptied, as the real server does for fields it removed.
    for depth in range(len(parents) - 1, 0, -1):
        if parents[depth]:
            break
        parents[depth - 1].pop(path[depth - 1], None)


def _merge(live, config):
    if not isinstance(config, dict) or not isinstance(live, dict):
        return copy.deepcopy(config)
    out = copy.deepcopy(live)
    for key, value in config.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def check_options(field_manager: str | None) -> list[FieldError]:
    return [] if field_manager else [required("fieldManager", "is required for apply patch")]


def apply(live: dict | None, config: dict, manager: str, api_version: str) -> dict:
    """The object after `manager` applies `config` to `live` (None: create)."""
    if not isinstance(config, dict):
        raise bad_request("apply patch must be a YAML or JSON object")
    live = copy.deepcopy(live) if live else {}
    managed = list((live.get("metadata") or {}).get("managedFields") or [])
    owners = _owned_by_appliers(managed)
    previous = owners.pop(manager, set())
    others = set().union(*owners.values()) if owners else set()
    now = field_paths(config)
    result = live
    for path in sorted(previous - now - others, key=len, reverse=True):
        _remove(result, path)
    config = copy.deepcopy(config)
    config.get("metadata", {}).pop("managedFields", None)
    result = _merge(result, config)
    entry = {"manager": manager, "operation": "Apply", "apiVersion": api_version,
             "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "fieldsType": "FieldsV1",
             "fieldsV1": encode_fields(now)}
    managed = [e for e in managed if not (e.get("manager") == manager and e.get("operation") == "Apply")]
    result.setdefault("metadata", {})["managedFields"] = managed + [entry]
    return result
