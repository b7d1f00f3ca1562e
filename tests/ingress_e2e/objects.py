"""Builders for the Kubernetes objects e2e tests create (plain dicts)."""

from __future__ import annotations

from collections.abc import Iterable

PREFIX = "nginx.ingress.kubernetes.io/"


def ingress_class(name: str = "platform", controller: str = "k8s.io/platform-ingress", default: bool = False) -> dict:
    meta: dict = {"name": name}
    if default:
        meta["annotations"] = {"ingressclass.kubernetes.io/is-default-class": "true"}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": meta,
            "spec": {"controller": controller}}


def service(name: str, namespace: str = "default", port: int = 80, port_name: str = "http") -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"name": port_name, "port": port, "protocol": "TCP", "targetPort": 8080}],
                     "selector": {"app": name}}}


def endpoint_slice(service_name: str, addresses: Iterable[str], port: int = 8080, namespace: str = "default",
                   name: str | None = None, port_name: str = "http") -> dict:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name or f"{service_name}-1", "namespace": namespace,
                         "labels": {"kubernetes.io/service-name": service_name}},
            "addressType": "IPv4",
            "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses]}


def ingress(name: str, host: str | None, paths: Iterable[tuple], namespace: str = "default",
            class_name: str | None = "platform", annotations: dict | None = None,
            tls: list[dict] | None = None) -> dict:
    """``paths``: (path, service, port) or (path, service, port, pathType)."""
    items = []
    for entry in paths:
        path, svc, port = entry[:3]
        path_type = entry[3] if len(entry) > 3 else "Prefix"
        items.append({"path": path, "pathType": path_type,
                      "backend": {"service": {"name": svc, "port": {"number": port}}}})
    rule: dict = {"http": {"paths": items}}
    if host:
        rule["host"] = host
    spec: dict = {"rules": [rule]}
    if class_name:
        spec["ingressClassName"] = class_name
    if tls:
        spec["tls"] = tls
    meta: dict = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = {k if "/" in k else PREFIX + k: v for k, v in annotations.items()}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta, "spec": spec}


def tls_secret(name: str, cert_pem: str, key_pem: str, namespace: str = "default") -> dict:
    import base64
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"tls.crt": base64.b64encode(cert_pem.encode()).decode(),
                     "tls.key": base64.b64encode(key_pem.encode()).decode()}}
