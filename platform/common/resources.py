"""The API resources the project reads and writes, and how to address them.

A ``Resource`` names one REST collection (group, version, plural) together
with the ``kind`` its objects carry and whether it lives in namespaces. It
is the key informers are shared by and the unit a source lists and watches.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Resource:
    """``field_selector`` (API syntax, ``a.b=value`` or ``a.b!=value`` terms
    joined by commas) narrows the collection: a source lists and watches only
    the objects it selects, so a process never even holds the others (the
    ingress controller asks for ``type=kubernetes.io/tls`` Secrets only)."""

    group: str  # "" for the core ("legacy") group served under /api
    version: str
    plural: str
    kind: str
    namespaced: bool
    field_selector: str = ""

    def __hash__(self) -> int:
        # Resources key every object a file source holds ((resource, key)
        # tuples): the generated hash of six fields each time was 550,000
        # calls and ~0.4 s of reading 50,000 objects. Computed once.
        try:
            return self.__dict__["_hash"]
        except KeyError:
            value = hash((self.group, self.version, self.plural, self.kind, self.namespaced, self.field_selector))
            object.__setattr__(self, "_hash", value)
            return value

    @property
    def api_version(self) -> str:
        """``apiVersion`` as objects of this resource spell it (``v1``, ``networking.k8s.io/v1``)."""
        return self.version if not self.group else f"{self.group}/{self.version}"

    def path(self, namespace: str | None = None) -> str:
        """URL path of the collection; all namespaces when ``namespace`` is None.

        ``namespace`` is ignored for cluster-scoped resources.
        """
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"

    def object_path(self, namespace: str | None, name: str) -> str:
        """URL path of one object."""
        return f"{self.path(namespace)}/{name}"

    @property
    def collection(self) -> "Resource":
        """The same collection without a field selector (what objects belong to)."""
        return replace(self, field_selector="") if self.field_selector else self

    def selects(self, obj: dict) -> bool:
        """Whether ``obj`` passes the field selector (for sources that filter themselves)."""
        return all(_field(obj, path) == value if op == "=" else _field(obj, path) != value
                   for path, op, value in _terms(self.field_selector))

    def __str__(self) -> str:
        name = f"{self.plural}.{self.group}" if self.group else self.plural
        return f"{name}[{self.field_selector}]" if self.field_selector else name


def _terms(selector: str) -> list[tuple[str, str, str]]:
    terms = []
    for part in filter(None, (p.strip() for p in selector.split(","))):
        path, op, value = part.partition("!=") if "!=" in part else part.replace("==", "=", 1).partition("=")
        terms.append((path.strip(), op, value.strip()))
    return terms


def _field(obj: dict, path: str) -> str:
    current: object = obj
    for part in path.split("."):
        current = current.get(part) if isinstance(current, dict) else None
    return "" if current is None else str(current)


INGRESSES = Resource("networking.k8s.io", "v1", "ingresses", "Ingress", True)
INGRESS_CLASSES = Resource("networking.k8s.io", "v1", "ingressclasses", "IngressClass", False)
SERVICES = Resource("", "v1", "services", "Service", True)
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True)
SECRETS = Resource("", "v1", "secrets", "Secret", True)
# Least privilege in memory: the only Secrets the ingress controller serves.
TLS_SECRETS = Resource("", "v1", "secrets", "Secret", True, field_selector="type=kubernetes.io/tls")
# The Secrets auth-secret names (htpasswd / htdigest): docs/security.md, "Secrets".
OPAQUE_SECRETS = Resource("", "v1", "secrets", "Secret", True, field_selector="type=Opaque")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
NODES = Resource("", "v1", "nodes", "Node", False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
# core/v1 Events: what `kubectl describe` shows and what the recorder writes.
EVENTS = Resource("", "v1", "events", "Event", True)
PODS = Resource("", "v1", "pods", "Pod", True)

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)

# Gateway API (standard channel): served only where its CRDs are installed, so
# whoever watches these asks discovery first (``GATEWAY_API``).
GATEWAY_API_GROUP = "gateway.networking.k8s.io"
GATEWAY_CLASSES = Resource(GATEWAY_API_GROUP, "v1", "gatewayclasses", "GatewayClass", False)
GATEWAYS = Resource(GATEWAY_API_GROUP, "v1", "gateways", "Gateway", True)
HTTP_ROUTES = Resource(GATEWAY_API_GROUP, "v1", "httproutes", "HTTPRoute", True)
GRPC_ROUTES = Resource(GATEWAY_API_GROUP, "v1", "grpcroutes", "GRPCRoute", True)
# v1beta1 is the version every v1.x CRD bundle serves (v1.6 also serves v1).
REFERENCE_GRANTS = Resource(GATEWAY_API_GROUP, "v1beta1", "referencegrants", "ReferenceGrant", True)
GATEWAY_API: tuple[Resource, ...] = (GATEWAY_CLASSES, GATEWAYS, HTTP_ROUTES, GRPC_ROUTES, REFERENCE_GRANTS)

ALL: tuple[Resource, ...] = (
    INGRESSES, INGRESS_CLASSES, SERVICES, ENDPOINT_SLICES, SECRETS,
    CONFIGMAPS, NODES, LEASES, EVENTS, PODS, NAMESPACES, *GATEWAY_API,
)

_BY_KIND = {(r.api_version, r.kind): r for r in ALL}
# Manifests may name ReferenceGrant in v1 (same schema): one collection serves both.
_BY_KIND[(f"{GATEWAY_API_GROUP}/v1", "ReferenceGrant")] = REFERENCE_GRANTS


def for_kind(api_version: str, kind: str) -> Resource | None:
    """The known resource whose objects carry this ``apiVersion``/``kind``, or None."""
    return _BY_KIND.get((api_version, kind))
