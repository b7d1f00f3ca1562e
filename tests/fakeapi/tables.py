"""Server-side printing: `meta.k8s.io/v1 Table`, what `kubectl get` asks for.

Columns are Name and Age for every type, plus a few type-specific ones for the
types people look at with kubectl here (ingresses, services, endpointslices,
leases). Rows carry a PartialObjectMetadata, or the whole object when the
client asks `includeObject=Object`.
"""

from __future__ import annotations

import calendar
import time

from .resources import ResourceType


def human_age(created: str | None, now: float | None = None) -> str:
    if not created:
        return "<unknown>"
    try:
        then = calendar.timegm(time.strptime(created[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return "<unknown>"
    seconds = int((now if now is not None else time.time()) - then)
    if seconds < 0:
        return "<invalid>"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def _column(name: str, type_: str = "string", fmt: str = "", priority: int = 0) -> dict:
    return {"name": name, "type": type_, "format": fmt, "description": name, "priority": priority}


def _ingress_cells(obj: dict) -> list:
    spec = obj.get("spec") or {}
    hosts = [r.get("host") for r in spec.get("rules") or [] if r.get("host")]
    lb = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    address = ",".join(i.get("ip") or i.get("hostname") or "" for i in lb)
    ports = "80, 443" if spec.get("tls") else "80"
    return [spec.get("ingressClassName") or "<none>", ",".join(hosts) or "*", address, ports]


def _service_cells(obj: dict) -> list:
    spec = obj.get("spec") or {}
    ports = ",".join(
        f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/{p.get('protocol', 'TCP')}"
        for p in spec.get("ports") or []) or "<none>"
    external = ",".join(spec.get("externalIPs") or []) or "<none>"
    return [spec.get("type", "ClusterIP"), spec.get("clusterIP") or "<none>", external, ports]


def _endpointslice_cells(obj: dict) -> list:
    ports = ",".join(str(p.get("port")) for p in obj.get("ports") or []) or "<unset>"
    addresses = [a for e in obj.get("endpoints") or [] for a in e.get("addresses") or []]
    shown = ",".join(addresses[:3]) + (" + more..." if len(addresses) > 3 else "")
    return [obj.get("addressType", ""), ports, shown]


def _lease_cells(obj: dict) -> list:
    return [(obj.get("spec") or {}).get("holderIdentity") or ""]


_EXTRA: dict[tuple[str, str], tuple[list[dict], object]] = {
    ("networking.k8s.io", "ingresses"): (
        [_column("Class"), _column("Hosts"), _column("Address"), _column("Ports")], _ingress_cells),
    ("", "services"): (
        [_column("Type"), _column("Cluster-IP"), _column("External-IP"), _column("Port(s)")],
        _service_cells),
    ("discovery.k8s.io", "endpointslices"): (
        [_column("AddressType"), _column("Ports"), _column("Endpoints")], _endpointslice_cells),
    ("coordination.k8s.io", "leases"): ([_column("Holder")], _lease_cells),
}


def _row(rt: ResourceType, obj: dict, include: str) -> dict:
    meta = obj.get("metadata") or {}
    extra = _EXTRA.get(rt.key())
    cells = [meta.get("name", "")]
    if extra:
        cells += extra[1](obj)
    cells.append(human_age(meta.get("creationTimestamp")))
    row: dict = {"cells": cells}
    if include == "Object":
        row["object"] = obj
    elif include != "None":
        row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                         "metadata": meta}
    return row


def to_table(rt: ResourceType, objects: list[dict], list_metadata: dict | None,
             include: str = "Metadata") -> dict:
    extra = _EXTRA.get(rt.key())
    columns = [_column("Name", fmt="name")] + (extra[0] if extra else []) + [_column("Age")]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": dict(list_metadata or {}),
            "columnDefinitions": columns,
            "rows": [_row(rt, o, include) for o in objects]}
