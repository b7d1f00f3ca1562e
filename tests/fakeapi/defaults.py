"""Defaulting: the fields the real server fills in on create and update.

Pure functions of the object (and, for allocations, of the Services that
exist). Service allocation mirrors the real server's observable behaviour:
cluster IPs from 10.96.0.0/12 (starting at .10; .1 belongs to the
`kubernetes` Service in a real cluster), node ports from 30000-32767, and an
update that leaves them unset keeps what was allocated.
"""

from __future__ import annotations

import base64
import copy
import ipaddress

from . import gatewayapi
from .errors import ApiError
from .resources import ResourceType

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
NODE_PORTS = range(30000, 32768)


def apply_defaults(rt: ResourceType, obj: dict, services: list[dict]) -> None:
    """Fill defaults into `obj` in place; `services` are the existing Services."""
    key = rt.key()
    if key == ("", "namespaces"):
        name = obj["metadata"]["name"]
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
    elif key == ("", "services"):
        default_service(obj, services)
    elif key == ("", "secrets"):
        obj.setdefault("type", "Opaque")
        encode_string_data(obj)
    elif key == ("discovery.k8s.io", "endpointslices"):
        for port in obj.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("name", "")
    elif key == ("networking.k8s.io", "ingresses"):
        obj.setdefault("status", {"loadBalancer": {}})
    elif key == ("", "pods"):
        obj.setdefault("status", {"phase": "Pending"})
    elif key == ("", "nodes"):
        obj.setdefault("spec", {})
    elif rt.crd == gatewayapi.CRD_BUNDLE:
        gatewayapi.apply_defaults(rt, obj)


def encode_string_data(secret: dict) -> None:
    """Secret.stringData is write-only: merged into data, base64-encoded."""
    string_data = secret.pop("stringData", None) or {}
    if string_data:
        data = secret.setdefault("data", {})
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()


def default_service(obj: dict, services: list[dict]) -> None:
    spec = obj.setdefault("spec", {})
    svc_type = spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    obj.setdefault("status", {"loadBalancer": {}})
    if svc_type == "ExternalName":
        return
    spec.setdefault("internalTrafficPolicy", "Cluster")
    if not spec.get("clusterIP") and spec.get("clusterIPs"):
        spec["clusterIP"] = spec["clusterIPs"][0]
    if not spec.get("clusterIP"):
        spec["clusterIP"] = _allocate_cluster_ip(services)
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    family = "IPv6" if ":" in spec["clusterIP"] else "IPv4"
    spec.setdefault("ipFamilies", [family])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    if svc_type in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
        used = _used_node_ports(services)
        for port in spec.get("ports") or []:
            if not port.get("nodePort"):
                port["nodePort"] = next(p for p in NODE_PORTS if p not in used)
            used.add(port["nodePort"])
    if svc_type == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)


def keep_service_allocations(old: dict, new: dict) -> None:
    """An update that leaves cluster IPs or node ports unset keeps the allocated
    ones, like the real server (it does not allocate new ones)."""
    old_spec, spec = old.get("spec") or {}, new.setdefault("spec", {})
    if spec.get("type", "ClusterIP") == "ExternalName":
        return
    for field in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
        if not spec.get(field) and old_spec.get(field):
            spec[field] = copy.deepcopy(old_spec[field])
    old_ports = {(p.get("port"), p.get("protocol", "TCP")): p.get("nodePort")
                 for p in old_spec.get("ports") or []}
    if spec.get("type") in ("NodePort", "LoadBalancer"):
        for port in spec.get("ports") or []:
            allocated = old_ports.get((port.get("port"), port.get("protocol", "TCP")))
            if not port.get("nodePort") and allocated:
                port["nodePort"] = allocated


def _allocate_cluster_ip(services: list[dict]) -> str:
    used = {(s.get("spec") or {}).get("clusterIP") for s in services}
    for offset in range(10, SERVICE_CIDR.num_addresses - 1):
        candidate = str(SERVICE_CIDR.network_address + offset)
        if candidate not in used:
            return candidate
    raise ApiError(500, "InternalError", "failed to allocate a serviceIP: range is full")


def _used_node_ports(services: list[dict]) -> set[int]:
    return {p.get("nodePort") for s in services
            for p in (s.get("spec") or {}).get("ports") or [] if p.get("nodePort")}
