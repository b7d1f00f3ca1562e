"""Builders for the plain-dict API objects the node proxy tests use."""

from __future__ import annotations


def service(name: str, cluster_ip: str, ports=((80, "TCP"),), ns: str = "default", **spec) -> dict:
    port_list = []
    for i, p in enumerate(ports):
        port, proto = p[0], p[1]
        entry = {"name": f"p{port}" if len(ports) > 1 else "", "port": port, "protocol": proto,
                 "targetPort": port}
        if len(p) > 2:
            entry["nodePort"] = p[2]
        port_list.append(entry)
    status = spec.pop("status", {})
    body = {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip],
                     "ports": port_list, **spec},
            "status": status}
    return body


def endpoint(address: str, ready=True, serving=None, terminating=None, node: str = "node-b") -> dict:
    cond = {"ready": ready}
    if serving is not None:
        cond["serving"] = serving
    if terminating is not None:
        cond["terminating"] = terminating
    return {"addresses": [address], "conditions": cond, "nodeName": node}


def endpoint_slice(service_name: str, endpoints, ports=((8080, "TCP"),), ns: str = "default",
                   name: str | None = None, port_names=None, trigger: str | None = None) -> dict:
    eps = [e if isinstance(e, dict) else endpoint(e) for e in endpoints]
    meta = {"name": name or f"{service_name}-abc", "namespace": ns,
            "labels": {"kubernetes.io/service-name": service_name}}
    if trigger:
        meta["annotations"] = {"endpoints.kubernetes.io/last-change-trigger-time": trigger}
    names = port_names or ["" if len(ports) == 1 else f"p{p[0]}" for p in ports]
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta,
            "addressType": "IPv4",
            "ports": [{"name": n, "port": p[0], "protocol": p[1]} for n, p in zip(names, ports)],
            "endpoints": eps}
