"""The node proxy end to end on a real kernel: fake API server in, real traffic out.

One node proxy (``platformd.nodeproxy.main.run`` with :class:`LinuxKernel`)
runs for the whole module in the test's own network namespace, fed by the
fake API server; pods are network namespaces routed through it
(:mod:`.topology`). The tests send real TCP and UDP traffic to cluster IPs
and a node port and look at the kernel with the operator's tools.

Services (each test uses its own, so their traffic does not interfere):

=========  ===============  =======================================  =========
name       cluster IP       ports                                    endpoints
=========  ===============  =======================================  =========
web        10.96.0.10       80/TCP -> 8080 (node port 30080),        a, b, c
                            53/UDP -> 5353
sticky     10.96.0.20       80/TCP, sessionAffinity ClientIP          a, b, c
drain      10.96.0.30       80/TCP                                   a, b
hairpin    10.96.0.40       80/TCP                                   a, b, c
dns        10.96.0.50       53/UDP -> 5353                           a, b
=========  ===============  =======================================  =========
"""

from __future__ import annotations

import collections
import functools
import re
import time

import pytest

from platformd.nodeproxy.kernel import VirtualServer
from platformd.nodeproxy.kernel_linux import LinuxKernel
from platformd.nodeproxy.main import build_parser
from tests.helpers.waiting import wait_for

from . import netns
from .netns import sh
from .proxyrun import proxy_running
from .topology import NODE_IP, TCP_PORT, UDP_PORT, Topology

PODS = ("pod-a", "pod-b", "pod-c")
SYNC_PERIOD = 4.0
# Generous: the VM emulates its CPU, and one sync with its iptables-restore
# takes a second or two there.
WAIT = 30.0


INITIAL_VIRTUAL_SERVERS = ("10.96.0.10:80", "10.96.0.10:53", f"{NODE_IP}:30080", "10.96.0.20:80",
                           "10.96.0.30:80", "10.96.0.40:80", "10.96.0.50:53")


eventually = functools.partial(wait_for, timeout=WAIT, interval=0.3, ignore=(AssertionError, OSError))


# -- API objects -------------------------------------------------------------------


def service(name: str, cluster_ip: str, ports: list[dict], **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip],
                     "ports": ports, **spec}}


def endpoint_slice(service_name: str, addresses: list[str], ports: list[dict]) -> dict:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{service_name}-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": service_name}},
            "addressType": "IPv4",
            "ports": ports,
            "endpoints": [{"addresses": [a], "conditions": {"ready": True}, "nodeName": "node-a"}
                          for a in addresses]}


HTTP = {"name": "http", "port": 80, "protocol": "TCP", "targetPort": TCP_PORT}
HTTP_EP = {"name": "http", "port": TCP_PORT, "protocol": "TCP"}
DNS = {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": UDP_PORT}
DNS_EP = {"name": "dns", "port": UDP_PORT, "protocol": "UDP"}


class Cluster:
    def __init__(self, topo: Topology, api) -> None:
        self.topo = topo
        self.api = api

    def ip(self, pod: str) -> str:
        return self.topo.pods[pod].ip

    def add(self, name: str, cluster_ip: str, pods, ports=(HTTP,), ep_ports=(HTTP_EP,), **spec) -> None:
        self.api.create(service(name, cluster_ip, list(ports), **spec))
        self.api.create(endpoint_slice(name, [self.ip(p) for p in pods], list(ep_ports)))

    def set_endpoints(self, name: str, pods, ep_ports=(HTTP_EP,)) -> None:
        current = self.api.get("EndpointSlice", "default", f"{name}-1")
        wanted = endpoint_slice(name, [self.ip(p) for p in pods], list(ep_ports))
        wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        self.api.update(wanted)


def real_servers(vip: str, port: int, protocol: str = "t") -> dict[str, int]:
    """{"address:port": weight} of one virtual server, from ipvsadm."""
    listing = sh("ipvsadm", "-Ln", f"-{protocol}", f"{vip}:{port}")
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"->\s+(\S+)\s+Masq\s+(\d+)", listing)}


# -- the running node proxy ------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tests.fakeapi import FakeApiServer

    with netns.isolated():
        topo = Topology(PODS)
        topo.serve()
        api = FakeApiServer().start()
        kubeconfig = api.write_kubeconfig(str(tmp_path_factory.mktemp("e2e") / "kubeconfig"))
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
                    "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}]}})
        c = Cluster(topo, api)
        c.add("web", "10.96.0.10", PODS, ports=(dict(HTTP, nodePort=30080), DNS),
              ep_ports=(HTTP_EP, DNS_EP), type="NodePort")
        c.add("sticky", "10.96.0.20", PODS, sessionAffinity="ClientIP",
              sessionAffinityConfig={"clientIP": {"timeoutSeconds": 600}})
        c.add("drain", "10.96.0.30", ("pod-a", "pod-b"))
        c.add("hairpin", "10.96.0.40", PODS)
        c.add("dns", "10.96.0.50", ("pod-a", "pod-b"), ports=(DNS,), ep_ports=(DNS_EP,))

        args = build_parser().parse_args([
            "--kubeconfig", kubeconfig, "--hostname", "node-a", "--node-ip", NODE_IP,
            "--cluster-cidr", "10.244.0.0/16",
            "--min-sync-period", "0.2", "--sync-period", str(SYNC_PERIOD),
            "--healthz-bind-address", "", "--metrics-bind-address", ""])
        try:
            with proxy_running(args, LinuxKernel()):
                # The first sync waits for the kubernetes client's imports (~30 s
                # under emulation) and the informers; later changes take ~1 s.
                eventually(lambda: all(vs in sh("ipvsadm", "-Ln") for vs in INITIAL_VIRTUAL_SERVERS),
                           timeout=180, interval=2)
                yield c
        finally:
            api.stop()
            topo.close()


def ready(cluster: Cluster, vip: str, port: int, count: int, protocol: str = "t") -> dict[str, int]:
    return eventually(lambda: len(real_servers(vip, port, protocol)) == count
                      and real_servers(vip, port, protocol))


# -- tests --------------------------------------------------------------------------------


def test_kernel_state_follows_the_services(cluster):
    reals = ready(cluster, "10.96.0.10", 80, 3)
    assert reals == {f"{cluster.ip(p)}:{TCP_PORT}": 1 for p in PODS}
    assert ready(cluster, "10.96.0.10", 53, 3, "u") == {f"{cluster.ip(p)}:{UDP_PORT}": 1 for p in PODS}
    assert ready(cluster, NODE_IP, 30080, 3) == reals
    assert re.search(r"TCP  10\.96\.0\.20:80 rr persistent 600", sh("ipvsadm", "-Ln"))

    assert "inet 10.96.0.10/32" in sh("ip", "addr", "show", "kube-ipvs0")
    cluster_ips = sh("ipset", "list", "KUBE-CLUSTER-IP")
    assert "10.96.0.10,tcp:80" in cluster_ips and "10.96.0.10,udp:53" in cluster_ips
    assert "192.168.50.1" not in cluster_ips
    assert "30080" in sh("ipset", "list", "KUBE-NODE-PORT-TCP")
    assert f"{cluster.ip('pod-a')},tcp:{TCP_PORT},{cluster.ip('pod-a')}" in sh("ipset", "list", "KUBE-LOOP-BACK")
    nat = sh("iptables-save", "-t", "nat")
    assert "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES" in nat
    assert "--match-set KUBE-CLUSTER-IP dst,dst" in nat


def test_tcp_round_robin_across_endpoints(cluster):
    ready(cluster, "10.96.0.10", 80, 3)
    client = cluster.topo.outside
    answers = collections.Counter(client.ask_tcp("10.96.0.10", 80) for _ in range(6))
    assert answers == {p: 2 for p in PODS}


def test_udp_round_robin_across_endpoints(cluster):
    ready(cluster, "10.96.0.10", 53, 3, "u")
    client = cluster.topo.outside
    answers = collections.Counter(client.ask_udp("10.96.0.10", 53) for _ in range(6))
    assert answers == {p: 2 for p in PODS}


def test_node_port_reaches_every_endpoint_from_outside(cluster):
    ready(cluster, NODE_IP, 30080, 3)
    answers = {cluster.topo.outside.ask_tcp(NODE_IP, 30080) for _ in range(3)}
    assert answers == set(PODS)


def test_client_ip_affinity_keeps_one_endpoint(cluster):
    ready(cluster, "10.96.0.20", 80, 3)
    answers = {cluster.topo.outside.ask_tcp("10.96.0.20", 80) for _ in range(5)}
    assert len(answers) == 1 and answers <= set(PODS)


def test_a_backend_reaches_itself_through_its_service(cluster):
    ready(cluster, "10.96.0.40", 80, 3)
    client = cluster.topo.client("pod-a")
    answers = collections.Counter(client.ask_tcp("10.96.0.40", 80) for _ in range(6))
    assert answers == {p: 2 for p in PODS}  # including pod-a itself, twice


def test_removed_endpoint_drains_before_deletion(cluster):
    ready(cluster, "10.96.0.30", 80, 2)
    conn = cluster.topo.outside.connect("10.96.0.30", 80)
    leaving = conn.greeting
    staying = ({"pod-a", "pod-b"} - {leaving}).pop()
    leaving_rs, staying_rs = f"{cluster.ip(leaving)}:{TCP_PORT}", f"{cluster.ip(staying)}:{TCP_PORT}"
    try:
        # The counters graceful termination waits on, as the adapter reads them.
        kernel = LinuxKernel()
        try:
            states = {str(s.server): s for s in kernel.ipvs.list_real_servers(VirtualServer("TCP", "10.96.0.30", 80))}
        finally:
            kernel.close()
        assert states[leaving_rs].active_connections == 1
        assert states[staying_rs].active_connections == 0

        cluster.set_endpoints("drain", [staying])
        eventually(lambda: real_servers("10.96.0.30", 80) == {leaving_rs: 0, staying_rs: 1})
        assert conn.echo("still there") == f"{leaving}:still there"
        assert {cluster.topo.outside.ask_tcp("10.96.0.30", 80) for _ in range(3)} == {staying}
        time.sleep(SYNC_PERIOD + 1)  # a full sync must not cut it either
        assert real_servers("10.96.0.30", 80)[leaving_rs] == 0
        assert conn.echo("and now") == f"{leaving}:and now"
    finally:
        conn.close(reset=True)
    # IPVS keeps a reset connection for its 10 s CLOSE timeout; the node
    # proxy checks quiesced real servers every 5 s.
    eventually(lambda: real_servers("10.96.0.30", 80) == {staying_rs: 1}, timeout=45)


def test_a_udp_flow_moves_on_when_its_endpoint_goes(cluster):
    # UDP real servers are deleted at once and their conntrack entries
    # cleared; a client that keeps its source port must reach the other one.
    ready(cluster, "10.96.0.50", 53, 2, "u")
    with cluster.topo.outside.udp_flow("10.96.0.50", 53, timeout=1.0) as flow:
        first = flow.ask()
        assert flow.ask() == first  # one flow, one endpoint
        other = ({"pod-a", "pod-b"} - {first}).pop()
        cluster.set_endpoints("dns", [other], ep_ports=(DNS_EP,))
        eventually(lambda: real_servers("10.96.0.50", 53, "u") == {f"{cluster.ip(other)}:{UDP_PORT}": 1})
        # The first datagram after the deletion may be dropped while IPVS
        # expires the flow's entry (expire_nodest_conn); the next ones move.
        eventually(lambda: flow.ask() == other, timeout=10)
        assert flow.ask() == other


def test_a_virtual_server_deleted_by_hand_comes_back(cluster):
    ready(cluster, "10.96.0.10", 80, 3)
    sh("ipvsadm", "-D", "-t", "10.96.0.10:80")
    assert "10.96.0.10:80" not in sh("ipvsadm", "-Ln")
    reals = ready(cluster, "10.96.0.10", 80, 3)
    assert len(reals) == 3
    assert cluster.topo.outside.ask_tcp("10.96.0.10", 80) in PODS
