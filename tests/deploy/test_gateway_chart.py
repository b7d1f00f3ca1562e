"""The chart's Gateway API part: flags, the optional GatewayClass, RBAC."""

from __future__ import annotations

from platformd.ingress.main import build_parser

from . import rbac
from .helmtool import NAMESPACE, RELEASE, by_kind, container, one, workload

INGRESS = "ingress-controller"
SA = f"{RELEASE}-ingress"


def _args(docs) -> list[str]:
    return container(workload(docs, INGRESS))["args"]


def _gateway_atoms(docs) -> set:
    return {a for a in rbac.granted(docs, SA, NAMESPACE)
            if a[1] == "gateway.networking.k8s.io" or a[2] == "namespaces"}


def test_defaults_serve_gateway_api_with_rbac_and_no_class(helm):
    docs = helm.template()
    assert not [a for a in _args(docs) if a.startswith("--gateway")]
    assert by_kind(docs, "GatewayClass") == []
    assert _gateway_atoms(docs) == {a for a in rbac.expected("ingress")
                                    if a[1] == "gateway.networking.k8s.io" or a[2] == "namespaces"}


def test_gateway_class_pool_ports_and_controller_name(helm):
    docs = helm.template(sets=["ingress.gatewayAPI.gatewayClass.create=true",
                               "ingress.gatewayAPI.controllerName=acme.io/gw",
                               "ingress.gatewayAPI.addressPool=10.0.0.8/30",
                               "ingress.gatewayAPI.listenerPorts.8080=18080"])
    cls = one(docs, "GatewayClass")
    assert cls["metadata"]["name"] == "platform" and cls["spec"] == {"controllerName": "acme.io/gw"}
    gateway_args = [a for a in _args(docs) if a.startswith("--gateway")]
    assert gateway_args == ["--gateway-controller-name=acme.io/gw", "--gateway-address-pool=10.0.0.8/30",
                            "--gateway-listener-port=8080=18080"]
    parsed = build_parser().parse_args(gateway_args)
    assert parsed.gateway_address_pool == ("10.0.0.9", "10.0.0.10")
    assert parsed.gateway_listener_port == [(8080, 18080, False)]
    ports = {p["name"]: p["containerPort"] for p in container(workload(docs, INGRESS))["ports"]}
    assert ports["gw-8080"] == 18080
    [svc] = [d for d in by_kind(docs, "Service") if any(p["name"] == "gw-8080" for p in d["spec"]["ports"])]
    assert {"name": "gw-8080", "port": 8080, "targetPort": "gw-8080", "protocol": "TCP"} in svc["spec"]["ports"]


def test_tls_listener_ports(helm):
    docs = helm.template(sets=['ingress.gatewayAPI.listenerPorts.8443=18443/https'])
    assert [a for a in _args(docs) if a.startswith("--gateway")] == ["--gateway-listener-port=8443=18443/https"]
    assert build_parser().parse_args(["--gateway-listener-port=8443=18443/https"]).gateway_listener_port == [
        (8443, 18443, True)]
    ports = {p["name"]: p["containerPort"] for p in container(workload(docs, INGRESS))["ports"]}
    assert ports["gw-8443"] == 18443


def test_disabled_turns_it_off_without_rbac(helm):
    docs = helm.template(sets=["ingress.gatewayAPI.enabled=false", "ingress.gatewayAPI.gatewayClass.create=true"])
    assert [a for a in _args(docs) if a.startswith("--gateway")] == ["--gateway-api=off"]
    assert by_kind(docs, "GatewayClass") == []
    assert _gateway_atoms(docs) == set()
