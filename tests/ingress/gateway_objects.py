"""Plain Gateway API objects for the translation tests (as the API returns
them, CRD defaults mostly left out: the translation must not rely on them)."""

from __future__ import annotations

import base64
import time

from platformd.ingress.gateway_input import GatewayOptions, GatewaySnapshot
from platformd.ingress.gateway_translate import build

GROUP = "gateway.networking.k8s.io"
CONTROLLER = "platform.io/gateway-controller"
NOW = time.time() + 3600  # the test certificates are made during the tests, valid for 30 days


def meta(name, namespace=None, created="2026-01-01T00:00:00Z", generation=1, **extra):
    m = {"name": name, "creationTimestamp": created, "generation": generation, **extra}
    if namespace:
        m["namespace"] = namespace
    return m


def gateway_class(name="platform", controller=CONTROLLER, **spec):
    return {"apiVersion": f"{GROUP}/v1", "kind": "GatewayClass", "metadata": meta(name),
            "spec": {"controllerName": controller, **spec}}


def listener(name="http", port=80, protocol="HTTP", hostname=None, **extra):
    out = {"name": name, "port": port, "protocol": protocol, **extra}
    if hostname:
        out["hostname"] = hostname
    return out


def https_listener(name="https", secret="cert", hostname=None, **extra):
    return listener(name, 443, "HTTPS", hostname, tls={"mode": "Terminate", "certificateRefs": [{"name": secret, **extra}]})


def gateway(name="gw", namespace="default", listeners=None, cls="platform", created="2026-01-01T00:00:00Z",
            generation=1, addresses=None, status=None):
    obj = {"apiVersion": f"{GROUP}/v1", "kind": "Gateway",
           "metadata": meta(name, namespace, created, generation),
           "spec": {"gatewayClassName": cls, "listeners": listeners or [listener()]}}
    if addresses is not None:
        obj["spec"]["addresses"] = addresses
    if status is not None:
        obj["status"] = status
    return obj


def backend(name="svc", port=80, **extra):
    return {"name": name, "port": port, **extra}


def rule(*backends, matches=None, filters=None, **extra):
    out = {"backendRefs": list(backends) if backends else [backend()], **extra}
    if matches is not None:
        out["matches"] = matches
    if filters is not None:
        out["filters"] = filters
    return out


def path(value, kind="PathPrefix", **extra):
    return {"path": {"type": kind, "value": value}, **extra}


def http_route(name="route", namespace="default", parents=None, hostnames=None, rules=None,
               created="2026-01-01T00:00:00Z", generation=1, kind="HTTPRoute"):
    spec = {"parentRefs": parents if parents is not None else [{"name": "gw"}],
            "rules": rules if rules is not None else [rule()]}
    if hostnames is not None:
        spec["hostnames"] = hostnames
    return {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": meta(name, namespace, created, generation),
            "spec": spec}


def grpc_route(name="grpc", **kw):
    return http_route(name, kind="GRPCRoute", **kw)


def service(name="svc", namespace="default", ports=(80,), app_protocol=None):
    port_entries = [{"port": p, "protocol": "TCP", **({"appProtocol": app_protocol} if app_protocol else {})}
                    for p in ports]
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta(name, namespace),
            "spec": {"type": "ClusterIP", "ports": port_entries}}


def grant(namespace, from_namespace, from_kind="HTTPRoute", to_kind="Service", to_name=None, to_group=""):
    to = {"group": to_group, "kind": to_kind}
    if to_name:
        to["name"] = to_name
    return {"apiVersion": f"{GROUP}/v1beta1", "kind": "ReferenceGrant", "metadata": meta("grant", namespace),
            "spec": {"from": [{"group": GROUP, "kind": from_kind, "namespace": from_namespace}], "to": [to]}}


def namespace(name, **labels):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def translate(*objects, options=None, services=None, secrets=None, namespaces=None, crd_version=None):
    """Sort ``objects`` by kind into a snapshot and translate it."""
    by_kind = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    if "GatewayClass" not in by_kind:
        by_kind["GatewayClass"] = [gateway_class()]
    key = lambda o: f"{o['metadata'].get('namespace')}/{o['metadata']['name']}"  # noqa: E731
    services = services if services is not None else {key(s): s for s in by_kind.get("Service", [service()])}
    snapshot = GatewaySnapshot(
        gateway_classes=by_kind.get("GatewayClass", ()), gateways=by_kind.get("Gateway", ()),
        http_routes=by_kind.get("HTTPRoute", ()), grpc_routes=by_kind.get("GRPCRoute", ()),
        reference_grants=by_kind.get("ReferenceGrant", ()), services=services,
        secrets=secrets or {key(s): s for s in by_kind.get("Secret", [])},
        namespaces=namespaces or {n["metadata"]["name"]: n for n in by_kind.get("Namespace", [])},
        crd_version=crd_version)
    return build(snapshot, options or GatewayOptions(), NOW)


def conditions(conds):
    """{type: (status, reason)} of a tuple of gateway_status.Condition."""
    return {c.type: (c.status, c.reason) for c in conds}


def parent_conditions(translation, key="default/route", index=0, kind="http"):
    routes = translation.http_routes if kind == "http" else translation.grpc_routes
    return conditions(routes[key].parents[index].conditions)


def listener_status(translation, gateway_key="default/gw", name="http"):
    status = translation.gateways[gateway_key]
    return next(lst for lst in status.listeners if lst.name == name)


def entries(translation, hostname="*", port=80, address=None):
    """[(route, rule, path kind, path value)] served for ``hostname`` on local ``port``, in order."""
    for host in translation.table.hosts:
        if host.hostname == hostname and host.bind.port == port and host.bind.address == address:
            return [(e.route, e.rule, e.match.path.kind, e.match.path.value) for e in host.entries]
    return []


def host(translation, hostname="*", port=80, address=None):
    for h in translation.table.hosts:
        if h.hostname == hostname and h.bind.port == port and h.bind.address == address:
            return h
    return None


def tls_secret(name, cert_pem, key_pem, namespace="default"):
    encode = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": meta(name, namespace),
            "data": {"tls.crt": encode(cert_pem), "tls.key": encode(key_pem)}}
