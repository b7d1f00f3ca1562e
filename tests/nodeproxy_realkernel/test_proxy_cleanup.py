"""``platformd nodeproxy --once`` then ``--cleanup`` on a real kernel.

The kernel refuses some orders a model would accept (an ipset still matched
by a rule cannot be destroyed, a chain still jumped to cannot be deleted), so
cleaning up is checked here, on the kernel, with the operator's tools.
"""

from __future__ import annotations

import yaml

from platformd.nodeproxy.kernel_firewall import LinuxFirewall
from platformd.nodeproxy.kernel_linux import LinuxKernel
from platformd.nodeproxy.main import build_parser, run

from .netns import sh

MANIFESTS = [
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
     "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
              "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": 30080}]}},
    {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
     "metadata": {"name": "web-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
     "addressType": "IPv4", "ports": [{"port": 8080, "protocol": "TCP"}],
     "endpoints": [{"addresses": ["10.244.1.2"], "conditions": {"ready": True}, "nodeName": "node-a"}]},
]


def nodeproxy(*flags: str) -> int:
    args = build_parser().parse_args([*flags, "--hostname", "node-a", "--node-ip", "192.168.50.1",
                                      "--healthz-bind-address", "", "--metrics-bind-address", ""])
    return run(args, LinuxKernel())


def test_one_sync_then_cleanup_leaves_nothing(ns, tmp_path):
    (tmp_path / "web.yaml").write_text(yaml.safe_dump_all(MANIFESTS))
    assert nodeproxy("--source", str(tmp_path), "--once") == 0
    listing = sh("ipvsadm", "-Ln")
    assert "10.96.0.10:80" in listing and "192.168.50.1:30080" in listing
    assert "KUBE-CLUSTER-IP" in sh("ipset", "list", "-n")
    assert "KUBE-SERVICES" in sh("iptables-save", "-t", "nat")

    assert nodeproxy("--cleanup") == 0
    assert not [line for line in sh("ipvsadm", "-Ln").splitlines() if line.startswith(("TCP", "UDP"))]
    assert "kube-ipvs0" not in sh("ip", "link", "show")
    assert "KUBE-" not in sh("ipset", "list", "-n")
    assert "KUBE-" not in sh("iptables-save")


DUAL_MANIFESTS = [
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
     "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00:96::10"],
              "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "RequireDualStack",
              "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": 30080}]}},
    MANIFESTS[1],
    {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
     "metadata": {"name": "web-6", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
     "addressType": "IPv6", "ports": [{"port": 8080, "protocol": "TCP"}],
     "endpoints": [{"addresses": ["fd00:244:1::2"], "conditions": {"ready": True}, "nodeName": "node-a"}]},
]


def dual_nodeproxy(*flags: str) -> int:
    args = build_parser().parse_args([*flags, "--hostname", "node-a", "--node-ip", "192.168.50.1",
                                      "--node-ip", "fd00:50::1", "--dual-stack",
                                      "--healthz-bind-address", "", "--metrics-bind-address", ""])
    return run(args, LinuxKernel(), ip6tables=LinuxFirewall(iptables="ip6tables"))


def test_dual_stack_sync_then_cleanup_leaves_nothing_of_either_family(ns, tmp_path):
    (tmp_path / "web.yaml").write_text(yaml.safe_dump_all(DUAL_MANIFESTS))
    assert dual_nodeproxy("--source", str(tmp_path), "--once") == 0
    listing = sh("ipvsadm", "-Ln")
    assert "[fd00:96::10]:80" in listing and "[fd00:50::1]:30080" in listing and "10.96.0.10:80" in listing
    assert "[fd00:244:1::2]:8080" in listing
    assert "inet6 fd00:96::10/128" in sh("ip", "-6", "addr", "show", "kube-ipvs0")
    assert "fd00:96::10,tcp:80" in sh("ipset", "list", "KUBE-6-CLUSTER-IP")
    assert "KUBE-6-CLUSTER-IP" in sh("ip6tables-save", "-t", "nat")

    assert dual_nodeproxy("--cleanup") == 0
    assert not [line for line in sh("ipvsadm", "-Ln").splitlines() if line.startswith(("TCP", "UDP"))]
    assert "kube-ipvs0" not in sh("ip", "link", "show")
    assert "KUBE-" not in sh("ipset", "list", "-n")
    assert "KUBE-" not in sh("iptables-save") and "KUBE-" not in sh("ip6tables-save")
