"""Just enough OpenAPI v3 for kubectl.

kubectl validates manifests before `create`/`apply`: it downloads the
OpenAPI v3 document of the object's group version and, when the PATCH
operation for that kind declares the `fieldValidation` query parameter,
leaves validation to the server (sending `fieldValidation=Strict`) instead
of validating client-side against full schemas. So each group-version
document here lists the item paths with that parameter and the
`x-kubernetes-group-version-kind` extension, and no schemas.
"""

from __future__ import annotations

import hashlib
import json

from .resources import ALL_CRDS, ResourceType, group_versions

_OPENAPI_VERSION = "3.0.0"


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _operation(rt: ResourceType, action: str) -> dict:
    return {
        "operationId": f"{action}{rt.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "parameters": [
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        ],
        "responses": {"200": {"description": "OK"}},
    }


def group_version_document(group: str, version: str, crds: frozenset[str] = ALL_CRDS) -> dict | None:
    for gv in group_versions(crds):
        if gv.group != group or gv.version != version:
            continue
        paths = {}
        for rt in gv.resources:
            scope = "/namespaces/{namespace}" if rt.namespaced else ""
            base = f"/{_gv_path(group, version)}{scope}/{rt.plural}"
            paths[base] = {"post": _operation(rt, "post")}
            if rt.virtual:
                continue
            paths[base + "/{name}"] = {"get": _operation(rt, "get"), "put": _operation(rt, "put"),
                                       "patch": _operation(rt, "patch"),
                                       "delete": _operation(rt, "delete")}
            if rt.has_status:
                paths[base + "/{name}/status"] = {"put": _operation(rt, "put"),
                                                  "patch": _operation(rt, "patch")}
        return {"openapi": _OPENAPI_VERSION,
                "info": {"title": "Kubernetes (fakeapi)", "version": "v1.34.0"},
                "paths": paths, "components": {"schemas": {}}}
    return None


def root_document(crds: frozenset[str] = ALL_CRDS) -> dict:
    paths = {}
    for gv in group_versions(crds):
        doc = group_version_document(gv.group, gv.version)
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
        path = _gv_path(gv.group, gv.version)
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}
