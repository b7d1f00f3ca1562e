"""The resource types the fake server serves, and their discovery documents.

A `ResourceType` is everything the server needs to route a path and describe
the type in discovery: group/version, plural, kind, scope, the subresources it
has and the verbs it allows. `REGISTRY` is the single table of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SERVER_VERSION = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.0-fakeapi",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

# The CRD bundles a server can have installed (`FakeApiServer(gateway_api=...)`).
GATEWAY_API = "gateway-api"
ALL_CRDS = frozenset({GATEWAY_API})

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    has_status: bool = False            # a /status subresource, and PUT ignores status
    tracks_generation: bool = False     # metadata.generation counts spec changes
    categories: tuple[str, ...] = ()
    name_rule: str = "subdomain"        # subdomain | label | dns1035 | path
    stored_as: tuple[str, str] | None = None  # (group, plural) whose storage this type is a view of
    returns_deleted_object: bool = False  # DELETE answers with the object, not a Success Status
    virtual: bool = False               # create-only, computed answer, nothing stored (reviews)
    token_subresource: bool = False     # serviceaccounts/{name}/token (TokenRequest)
    crd: str | None = None              # served only while this CRD bundle is installed

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    def key(self) -> tuple[str, str]:
        """Identity for storage: (group, plural). Types that are views of another
        type's storage (events.k8s.io Events of core Events) share its key."""
        return self.stored_as or (self.group, self.plural)

    def describe(self) -> list[dict]:
        """Entries for this type in an APIResourceList."""
        entry = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": ["create"] if self.virtual else list(_VERBS),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        entries = [entry]
        if self.has_status:
            entries.append({"name": f"{self.plural}/status", "singularName": "",
                            "namespaced": self.namespaced, "kind": self.kind,
                            "verbs": ["get", "patch", "update"]})
        if self.token_subresource:
            entries.append({"name": f"{self.plural}/token", "singularName": "",
                            "namespaced": self.namespaced, "group": "authentication.k8s.io",
                            "version": "v1", "kind": "TokenRequest", "verbs": ["create"]})
        return entries


def _r(group, version, plural, kind, namespaced, **kw) -> ResourceType:
    return ResourceType(group, version, plural, kind, namespaced, **kw)


REGISTRY: tuple[ResourceType, ...] = (
    _r("", "v1", "namespaces", "Namespace", False, short_names=("ns",), has_status=True,
       name_rule="label", returns_deleted_object=True),
    _r("", "v1", "services", "Service", True, short_names=("svc",), has_status=True,
       categories=("all",), name_rule="dns1035", returns_deleted_object=True),
    _r("", "v1", "endpoints", "Endpoints", True, short_names=("ep",)),
    _r("", "v1", "secrets", "Secret", True),
    _r("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",)),
    _r("", "v1", "nodes", "Node", False, short_names=("no",), has_status=True),
    _r("", "v1", "pods", "Pod", True, short_names=("po",), has_status=True,
       categories=("all",), returns_deleted_object=True),
    _r("", "v1", "events", "Event", True, short_names=("ev",), name_rule="path"),
    _r("", "v1", "serviceaccounts", "ServiceAccount", True, short_names=("sa",),
       returns_deleted_object=True, token_subresource=True),
    _r("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True, tracks_generation=True),
    _r("networking.k8s.io", "v1", "ingresses", "Ingress", True, short_names=("ing",),
       has_status=True, tracks_generation=True),
    _r("networking.k8s.io", "v1", "ingressclasses", "IngressClass", False,
       tracks_generation=True),
    _r("coordination.k8s.io", "v1", "leases", "Lease", True),
    _r("events.k8s.io", "v1", "events", "Event", True, short_names=("ev",), stored_as=("", "events")),
    _r("rbac.authorization.k8s.io", "v1", "roles", "Role", True, name_rule="path"),
    _r("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, name_rule="path"),
    _r("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, name_rule="path"),
    _r("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False,
       name_rule="path"),
    # Stored as written (no controllers act on them), so manifests and charts apply.
    _r("apps", "v1", "deployments", "Deployment", True, short_names=("deploy",), has_status=True,
       tracks_generation=True, categories=("all",)),
    _r("apps", "v1", "daemonsets", "DaemonSet", True, short_names=("ds",), has_status=True,
       tracks_generation=True, categories=("all",)),
    _r("apps", "v1", "statefulsets", "StatefulSet", True, short_names=("sts",), has_status=True,
       tracks_generation=True, categories=("all",)),
    _r("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, short_names=("pdb",),
       has_status=True, tracks_generation=True),
    # Stored as written; the admission webhook's certificate keeper fills caBundle.
    _r("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
       "ValidatingWebhookConfiguration", False, tracks_generation=True),
    _r("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False,
       virtual=True),
    _r("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False,
       virtual=True),
    # Gateway API v1.6 standard channel CRDs (defaults and validation: gatewayapi.py).
    *(_r("gateway.networking.k8s.io", version, plural, kind, namespaced, short_names=short,
         has_status=plural != "referencegrants", tracks_generation=True,
         categories=("gateway-api",), crd=GATEWAY_API)
      for version, plural, kind, namespaced, short in (
          ("v1", "gatewayclasses", "GatewayClass", False, ("gc",)),
          ("v1", "gateways", "Gateway", True, ("gtw",)),
          ("v1", "httproutes", "HTTPRoute", True, ()),
          ("v1", "grpcroutes", "GRPCRoute", True, ()),
          ("v1beta1", "referencegrants", "ReferenceGrant", True, ("refgrant",)))),
)


@dataclass
class _GroupVersion:
    group: str
    version: str
    resources: list[ResourceType] = field(default_factory=list)


def served(rt: ResourceType, crds: frozenset[str] = ALL_CRDS) -> bool:
    """Whether `rt` is served while the CRD bundles `crds` are installed."""
    return rt.crd is None or rt.crd in crds


def group_versions(crds: frozenset[str] = ALL_CRDS) -> list[_GroupVersion]:
    """Group versions in registry order (core first), of the types `crds` leaves served."""
    found: dict[tuple[str, str], _GroupVersion] = {}
    for rt in REGISTRY:
        if not served(rt, crds):
            continue
        found.setdefault((rt.group, rt.version), _GroupVersion(rt.group, rt.version)).resources.append(rt)
    return list(found.values())


def find(group: str, version: str, plural: str, crds: frozenset[str] = ALL_CRDS) -> ResourceType | None:
    for rt in REGISTRY:
        if rt.group == group and rt.version == version and rt.plural == plural and served(rt, crds):
            return rt
    return None


def resolve(kind_or_resource: str, api_version: str | None = None) -> ResourceType:
    """Find a type by kind ("Ingress"), plural ("ingresses"), short name or
    "plural.group"; `api_version` disambiguates (core and events.k8s.io Events)."""
    key = (kind_or_resource, api_version)
    found = _resolved.get(key)
    if found is None:
        found = _resolved[key] = _resolve(kind_or_resource, api_version)
    return found


# resolve() answers, remembered: REGISTRY is a constant tuple.
_resolved: dict[tuple[str, str | None], ResourceType] = {}


def _resolve(kind_or_resource: str, api_version: str | None) -> ResourceType:
    name = kind_or_resource
    group_hint = None
    if "." in name:
        name, group_hint = name.split(".", 1)
    if api_version is not None:
        group_hint = api_version.rpartition("/")[0]
    matches = [rt for rt in REGISTRY
               if name in (rt.kind, rt.plural, rt.singular) or name in rt.short_names]
    if group_hint is not None:
        matches = [rt for rt in matches if rt.group == group_hint]
    if not matches:
        raise KeyError(f"unknown resource {kind_or_resource!r}")
    return matches[0]


def api_versions(server_address: str) -> dict:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                            "serverAddress": server_address}]}


def _group_document(group: str, versions: list[str]) -> dict:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(crds: frozenset[str] = ALL_CRDS) -> dict:
    groups: dict[str, list[str]] = {}
    for gv in group_versions(crds):
        if gv.group:
            groups.setdefault(gv.group, []).append(gv.version)
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group_document(g, vs) for g, vs in groups.items()]}


def api_group(group: str, crds: frozenset[str] = ALL_CRDS) -> dict | None:
    versions = [gv.version for gv in group_versions(crds) if gv.group == group and group]
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_document(group, versions)}


def api_resource_list(group: str, version: str, crds: frozenset[str] = ALL_CRDS) -> dict | None:
    for gv in group_versions(crds):
        if gv.group == group and gv.version == version:
            resources = [entry for rt in gv.resources for entry in rt.describe()]
            return {"kind": "APIResourceList", "apiVersion": "v1",
                    "groupVersion": f"{group}/{version}" if group else version,
                    "resources": resources}
    return None
