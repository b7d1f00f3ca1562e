"""The IPVS mode dual-stack, end to end on a real kernel (``--dual-stack``).

As ``test_proxy_e2e.py``, with IPv6 on every link (:class:`.topology.Topology`
with ``ipv6=True``): one node proxy for the module, fed by the fake API
server, real TCP and UDP traffic from the outside namespace and from pods.

=========  =========================  ================================  =========
name       cluster IPs                ports                             endpoints
=========  =========================  ================================  =========
dual       10.96.1.10, fd00:96::10    80/TCP -> 8080 (node port 30090)  a, b, c
six        fd00:96::20                80/TCP, 53/UDP                    a, b, c
=========  =========================  ================================  =========
"""

from __future__ import annotations

import collections
import contextlib

import pytest

from platformd.nodeproxy.kernel_firewall import LinuxFirewall
from platformd.nodeproxy.kernel_linux import LinuxKernel
from platformd.nodeproxy.main import build_parser, run

from . import netns
from .netns import sh
from .proxyrun import RunningProxy
from .test_host_nft_e2e import Cluster  # the dual-stack Service and EndpointSlice builder
from .test_proxy_e2e import DNS, DNS_EP, HTTP, HTTP_EP, eventually, real_servers
from .topology import NODE_IP, NODE_IP6, TCP_PORT, UDP_PORT, Topology

PODS = ("pod-a", "pod-b", "pod-c")


def ip6(cluster: Cluster, pod: str) -> str:
    return cluster.topo.pods[pod].ip6


def reals6(vip: str, port: int, protocol: str = "t") -> dict[str, int]:
    return real_servers(f"[{vip}]", port, protocol)


def ready6(vip: str, port: int, count: int, protocol: str = "t") -> dict[str, int]:
    return eventually(lambda: len(reals6(vip, port, protocol)) == count and reals6(vip, port, protocol))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tests.fakeapi import FakeApiServer

    with netns.isolated():
        topo = Topology(PODS, ipv6=True)
        topo.serve()
        api = FakeApiServer().start()
        kubeconfig = api.write_kubeconfig(str(tmp_path_factory.mktemp("e2e6") / "kubeconfig"))
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
                    "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP},
                                             {"type": "InternalIP", "address": NODE_IP6}]}})
        c = Cluster(topo, api)
        c.add("dual", ["10.96.1.10", "fd00:96::10"], PODS, ports=(dict(HTTP, nodePort=30090),), type="NodePort")
        c.add("six", ["fd00:96::20"], PODS, ports=(HTTP, DNS), ep_ports=(HTTP_EP, DNS_EP))

        args = build_parser().parse_args([
            "--kubeconfig", kubeconfig, "--hostname", "node-a", "--dual-stack",
            "--cluster-cidr", "10.244.0.0/16,fd00:244::/32",
            "--min-sync-period", "0.2", "--sync-period", "4",
            "--healthz-bind-address", "", "--metrics-bind-address", ""])
        proxy = RunningProxy(args, LinuxKernel(), "nodeproxy6", ip6tables=LinuxFirewall(iptables="ip6tables"))
        c.stop_proxy = proxy.stop  # for the cleanup test, the last one
        try:
            wanted = ("[fd00:96::10]:80", "10.96.1.10:80", f"[{NODE_IP6}]:30090", "[fd00:96::20]:53")
            eventually(lambda: all(vs in sh("ipvsadm", "-Ln") for vs in wanted), timeout=180, interval=2)
            yield c
        finally:
            with contextlib.suppress(AssertionError):  # stopped (and checked) by the cleanup test already
                proxy.stop()
            api.stop()
            topo.close()


def test_ipv6_kernel_state_follows_the_services(cluster):
    reals = ready6("fd00:96::10", 80, 3)
    assert reals == {f"[{ip6(cluster, p)}]:{TCP_PORT}": 1 for p in PODS}
    assert ready6(NODE_IP6, 30090, 3) == reals
    assert ready6("fd00:96::20", 53, 3, "u") == {f"[{ip6(cluster, p)}]:{UDP_PORT}": 1 for p in PODS}
    # the IPv4 half of the dual-stack Service has the IPv4 endpoints only
    eventually(lambda: real_servers("10.96.1.10", 80) == {f"{cluster.topo.pods[p].ip}:{TCP_PORT}": 1 for p in PODS})
    addresses = sh("ip", "addr", "show", "kube-ipvs0")
    assert "inet6 fd00:96::10/128" in addresses and "inet 10.96.1.10/32" in addresses
    assert "fd00:96::10,tcp:80" in sh("ipset", "list", "KUBE-6-CLUSTER-IP")
    assert "fd00:96::10" not in sh("ipset", "list", "KUBE-CLUSTER-IP")
    assert "30090" in sh("ipset", "list", "KUBE-6-NODE-PORT-TCP")
    nat6 = sh("ip6tables-save", "-t", "nat")
    assert "-j KUBE-SERVICES" in nat6 and "--match-set KUBE-6-CLUSTER-IP dst,dst" in nat6
    assert "! -s fd00:244::/32" in nat6


def test_tcp_through_an_ipv6_cluster_ip_reaches_every_endpoint(cluster):
    ready6("fd00:96::20", 80, 3)
    answers = collections.Counter(cluster.topo.outside.ask_tcp("fd00:96::20", 80) for _ in range(6))
    assert answers == {p: 2 for p in PODS}


def test_udp_through_an_ipv6_cluster_ip(cluster):
    ready6("fd00:96::20", 53, 3, "u")
    answers = collections.Counter(cluster.topo.outside.ask_udp("fd00:96::20", 53) for _ in range(6))
    assert answers == {p: 2 for p in PODS}


def test_a_dual_stack_service_answers_on_both_families(cluster):
    ready6("fd00:96::10", 80, 3)
    eventually(lambda: len(real_servers("10.96.1.10", 80)) == 3)
    client = cluster.topo.outside
    assert {client.ask_tcp("fd00:96::10", 80) for _ in range(3)} == set(PODS)
    assert {client.ask_tcp("10.96.1.10", 80) for _ in range(3)} == set(PODS)


def test_ipv6_node_port_from_outside(cluster):
    ready6(NODE_IP6, 30090, 3)
    assert {cluster.topo.outside.ask_tcp(NODE_IP6, 30090) for _ in range(3)} == set(PODS)


def test_a_pod_reaches_an_ipv6_service_and_itself_through_it(cluster):
    ready6("fd00:96::20", 80, 3)
    client = cluster.topo.client("pod-a")
    # hairpin: pod-a is among the endpoints; every answer comes back (KUBE-6-LOOP-BACK masquerades)
    assert {client.ask_tcp("fd00:96::20", 80) for _ in range(6)} == set(PODS)


def test_an_ipv6_endpoint_removed_leaves_the_service(cluster):
    ready6("fd00:96::10", 80, 3)
    cluster.set_endpoints("dual", ("pod-a", "pod-b"), families=("IPv6",))
    eventually(lambda: f"[{ip6(cluster, 'pod-c')}]:{TCP_PORT}" not in reals6("fd00:96::10", 80)
               or reals6("fd00:96::10", 80)[f"[{ip6(cluster, 'pod-c')}]:{TCP_PORT}"] == 0)
    # new connections only go to the endpoints left (pod-c drains at weight 0)
    assert {cluster.topo.outside.ask_tcp("fd00:96::10", 80) for _ in range(4)} == {"pod-a", "pod-b"}
    # the IPv4 half did not move
    assert len(real_servers("10.96.1.10", 80)) == 3


def test_an_ipv6_virtual_server_deleted_by_hand_comes_back(cluster):
    ready6("fd00:96::20", 80, 3)
    sh("ipvsadm", "-D", "-t", "[fd00:96::20]:80")
    ready6("fd00:96::20", 80, 3)  # the periodic full sync (4 s) repairs it


def test_zz_cleanup_removes_both_families(cluster):
    cluster.stop_proxy()
    # node-port virtual servers are found by the node IPs given, as in kube-proxy's --cleanup
    args = build_parser().parse_args(["--cleanup", "--hostname", "node-a", "--node-ip", NODE_IP, "--node-ip", NODE_IP6,
                                      "--healthz-bind-address", "", "--metrics-bind-address", ""])
    assert run(args, LinuxKernel(), ip6tables=LinuxFirewall(iptables="ip6tables")) == 0
    assert not [line for line in sh("ipvsadm", "-Ln").splitlines() if line.startswith(("TCP", "UDP"))]
    assert "kube-ipvs0" not in sh("ip", "link", "show")
    assert "KUBE-" not in sh("ipset", "list", "-n")
    assert "KUBE-" not in sh("iptables-save") and "KUBE-" not in sh("ip6tables-save")
