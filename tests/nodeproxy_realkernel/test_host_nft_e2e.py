"""The nftables mode end to end on this machine's kernel: real traffic, both families.

Runs on the host in the default suite (nftables needs no VM): one node
proxy (``main.run`` with ``--proxy-mode nftables`` and the real ``nft``)
runs for the whole module in the test's own network namespace, fed by the
fake API server; pods and the outside client are namespaces routed through
it (:mod:`.topology`, with IPv6). All traffic stays in those namespaces.

Services (each test uses its own; all dual-stack unless said):

=======  ===========================  ========================================  ===========
name     cluster IPs                  ports                                     endpoints
=======  ===========================  ========================================  ===========
web      10.96.0.10, fd00:96::10      80/TCP (node port 30080), 53/UDP          a, b, c
sticky   10.96.0.20, fd00:96::20      80/TCP, sessionAffinity ClientIP          a, b, c
drain    10.96.0.30, fd00:96::30      80/TCP                                    a, b
dns      10.96.0.50, fd00:96::50      53/UDP                                    a, b
empty    10.96.0.60, fd00:96::60      80/TCP, 53/UDP                            none
local    10.96.0.70, fd00:96::70      80/TCP (node port 30070), both policies   a (here), b
v4only   10.96.0.80                   80/TCP                                    c
lb       10.96.0.90, fd00:96::90      80/TCP, LoadBalancer 192.0.2.90 and       a (here), b
                                      2001:db8::90, external IP 198.51.100.90,
                                      source ranges: the outside client only,
                                      externalTrafficPolicy Local, health-check
                                      node port 32090
=======  ===========================  ========================================  ===========
"""

from __future__ import annotations

import collections
import functools
import socket
import time

import pytest

from platformd.nodeproxy.main import build_parser, run
from platformd.nodeproxy.nftkernel import NftCli
from platformd.nodeproxy.nftnetlink import NftNetlink

from tests.helpers.waiting import wait_for

from . import netns
from .netns import sh
from .proxyrun import proxy_running
from .topology import NODE_IP, NODE_IP6, TCP_PORT, UDP_PORT, Topology

pytestmark = pytest.mark.skipif(not __import__("shutil").which("nft"), reason="needs the nft tool")

PODS = ("pod-a", "pod-b", "pod-c")
SYNC_PERIOD = 2.0
WAIT = 20.0
TABLE = ("inet", "platform-nodeproxy")


eventually = functools.partial(wait_for, timeout=WAIT, interval=0.1, ignore=(AssertionError, OSError))


HTTP = {"name": "http", "port": 80, "protocol": "TCP", "targetPort": TCP_PORT}
HTTP_EP = {"name": "http", "port": TCP_PORT, "protocol": "TCP"}
DNS = {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": UDP_PORT}
DNS_EP = {"name": "dns", "port": UDP_PORT, "protocol": "UDP"}


class Cluster:
    def __init__(self, topo: Topology, api) -> None:
        self.topo = topo
        self.api = api

    def add(self, name: str, ips: list[str], pods, ports=(HTTP,), ep_ports=(HTTP_EP,), nodes=None, **spec) -> None:
        families = ["IPv6" if ":" in ip else "IPv4" for ip in ips]
        self.api.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
                         "spec": {"type": "ClusterIP", "clusterIP": ips[0], "clusterIPs": ips,
                                  "ipFamilies": families,
                                  "ipFamilyPolicy": "RequireDualStack" if len(ips) > 1 else "SingleStack",
                                  "ports": list(ports), **spec}})
        for family in families:
            self.api.create(self._slice(name, family, pods, ep_ports, nodes or {}))

    def _slice(self, name: str, family: str, pods, ep_ports, nodes: dict) -> dict:
        six = family == "IPv6"
        return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": f"{name}-{family.lower()}", "namespace": "default",
                             "labels": {"kubernetes.io/service-name": name}},
                "addressType": family, "ports": list(ep_ports),
                "endpoints": [{"addresses": [self.topo.pods[p].ip6 if six else self.topo.pods[p].ip],
                               "conditions": {"ready": True}, "nodeName": nodes.get(p, "node-a")}
                              for p in pods]}

    def set_endpoints(self, name: str, pods, ep_ports=(HTTP_EP,), families=("IPv4", "IPv6")) -> None:
        for family in families:
            current = self.api.get("EndpointSlice", "default", f"{name}-{family.lower()}")
            wanted = self._slice(name, family, pods, ep_ports, {})
            wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.api.update(wanted)


def table() -> str:
    return sh("nft", "list", "table", *TABLE)


def serving(*needles: str) -> bool:
    text = table()
    return all(n in text for n in needles)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tests.fakeapi import FakeApiServer

    with netns.isolated():
        sh("sysctl", "-qw", "net.ipv4.ip_forward=1")
        sh("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        # The outside client and the default route share a link here, so the
        # kernel would send the client an ICMP redirect before the forward
        # hook rejects, and that redirect uses up the client's ICMP rate
        # limit (1/s): the reject's "port unreachable" would then be dropped.
        for conf in ("all", "default"):
            sh("sysctl", "-qw", f"net.ipv4.conf.{conf}.send_redirects=0")
        # Someone else's table: the node proxy must never touch it.
        sh("nft", "add table inet other; add chain inet other keep; add rule inet other keep counter accept")
        topo = Topology(PODS, ipv6=True)
        topo.serve()
        # A node has a default route; without one, packets to a Service with
        # no endpoint would be refused by routing (ENETUNREACH) before our
        # rules see them. Its gateway does not exist: anything our rules let
        # through would time out, never leave the test's namespaces.
        sh("ip", "route", "add", "default", "via", "192.168.50.254")
        sh("ip", "-6", "route", "add", "default", "via", "fd00:50::254")
        api = FakeApiServer().start()
        kubeconfig = api.write_kubeconfig(str(tmp_path_factory.mktemp("nft") / "kubeconfig"))
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
                    "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP},
                                             {"type": "InternalIP", "address": NODE_IP6}]}})
        c = Cluster(topo, api)
        c.add("web", ["10.96.0.10", "fd00:96::10"], PODS, ports=(dict(HTTP, nodePort=30080), DNS),
              ep_ports=(HTTP_EP, DNS_EP), type="NodePort")
        c.add("sticky", ["10.96.0.20", "fd00:96::20"], PODS, sessionAffinity="ClientIP",
              sessionAffinityConfig={"clientIP": {"timeoutSeconds": 600}})
        c.add("drain", ["10.96.0.30", "fd00:96::30"], ("pod-a", "pod-b"))
        c.add("dns", ["10.96.0.50", "fd00:96::50"], ("pod-a", "pod-b"), ports=(DNS,), ep_ports=(DNS_EP,))
        c.add("empty", ["10.96.0.60", "fd00:96::60"], (), ports=(HTTP, DNS))
        c.add("local", ["10.96.0.70", "fd00:96::70"], ("pod-a", "pod-b"), ports=(dict(HTTP, nodePort=30070),),
              nodes={"pod-b": "node-b"}, type="NodePort", externalTrafficPolicy="Local",
              internalTrafficPolicy="Local")
        c.add("v4only", ["10.96.0.80"], ("pod-c",))
        c.add("lb", ["10.96.0.90", "fd00:96::90"], ("pod-a", "pod-b"), ports=(dict(HTTP, nodePort=30090),),
              nodes={"pod-b": "node-b"}, type="LoadBalancer", externalTrafficPolicy="Local",
              healthCheckNodePort=32090, externalIPs=["198.51.100.90"],
              loadBalancerSourceRanges=["192.168.50.2/32", "fd00:50::2/128"])
        lb = api.get("Service", "default", "lb")
        lb["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.90"}, {"ip": "2001:db8::90"}]}}
        api.update(lb)

        args = build_parser().parse_args([
            "--proxy-mode", "nftables", "--kubeconfig", kubeconfig, "--hostname", "node-a",
            "--cluster-cidr", "10.244.0.0/16,fd00:244::/48",
            "--min-sync-period", "0.1", "--sync-period", str(SYNC_PERIOD),
            "--healthz-bind-address", "", "--metrics-bind-address", ""])
        try:
            with proxy_running(args, NftNetlink()):
                eventually(lambda: serving("10.96.0.10 . tcp . 80", "fd00:96::10 . tcp . 80",
                                           "10.96.0.80 . tcp . 80", "fd00:96::60 . udp . 53", NODE_IP6,
                                           "2001:db8::90 . tcp . 80"),
                           timeout=60, interval=0.3)
                yield c
        finally:
            api.stop()
            topo.close()


FAMILIES = pytest.mark.parametrize("v", ["4", "6"])


def vip(v: str, last: int) -> str:
    return f"10.96.0.{last}" if v == "4" else f"fd00:96::{last}"


def node_ip(v: str) -> str:
    return NODE_IP if v == "4" else NODE_IP6


@FAMILIES
def test_tcp_and_udp_through_a_cluster_ip_reach_every_endpoint(cluster, v):
    client = cluster.topo.outside
    tcp = collections.Counter(client.ask_tcp(vip(v, 10), 80) for _ in range(30))
    udp = collections.Counter(client.ask_udp(vip(v, 10), 53) for _ in range(30))
    assert set(tcp) == set(PODS) and set(udp) == set(PODS)


@FAMILIES
def test_node_port_from_another_namespace_and_not_on_loopback(cluster, v):
    answers = {cluster.topo.outside.ask_tcp(node_ip(v), 30080) for _ in range(40)}
    assert answers == set(PODS)
    with pytest.raises(OSError):
        cluster.topo.outside.ask_tcp("127.0.0.1" if v == "4" else "::1", 30080)
    # From the node itself, to a node IP: served too.
    s = socket.socket(socket.AF_INET if v == "4" else socket.AF_INET6)
    s.settimeout(5)
    try:
        s.connect((node_ip(v), 30080))
        assert s.recv(64).decode().strip() in PODS
    finally:
        s.close()
    s = socket.socket(socket.AF_INET if v == "4" else socket.AF_INET6)
    s.settimeout(2)
    try:
        with pytest.raises(OSError):
            s.connect(("127.0.0.1" if v == "4" else "::1", 30080))
    finally:
        s.close()


@FAMILIES
def test_client_ip_affinity_keeps_one_endpoint(cluster, v):
    answers = {cluster.topo.outside.ask_tcp(vip(v, 20), 80) for _ in range(10)}
    assert len(answers) == 1 and answers <= set(PODS)
    other = {cluster.topo.client("pod-c").ask_tcp(vip(v, 20), 80) for _ in range(10)}
    assert len(other) == 1


@FAMILIES
def test_local_policies_use_this_nodes_endpoints_only(cluster, v):
    outside = {cluster.topo.outside.ask_tcp(node_ip(v), 30070) for _ in range(10)}
    inside = {cluster.topo.client("pod-c").ask_tcp(vip(v, 70), 80) for _ in range(10)}
    assert outside == {"pod-a"} and inside == {"pod-a"}


@FAMILIES
def test_service_without_endpoints_is_refused_at_once(cluster, v):
    client = cluster.topo.outside
    started = time.monotonic()
    with pytest.raises(ConnectionRefusedError):
        client.connect(vip(v, 60), 80, timeout=5)
    with pytest.raises(ConnectionRefusedError):
        client.ask_udp(vip(v, 60), 53, timeout=5)
    assert time.monotonic() - started < 2  # an ICMP answer, not a timeout
    # and from a pod, and from the node itself
    with pytest.raises(ConnectionRefusedError):
        cluster.topo.client("pod-a").connect(vip(v, 60), 80, timeout=5)
    s = socket.socket(socket.AF_INET if v == "4" else socket.AF_INET6)
    s.settimeout(5)
    try:
        with pytest.raises(ConnectionRefusedError):
            s.connect((vip(v, 60), 80))
    finally:
        s.close()


@FAMILIES
def test_a_backend_reaches_itself_through_its_service(cluster, v):
    client = cluster.topo.client("pod-a")
    answers = collections.Counter(client.ask_tcp(vip(v, 10), 80) for _ in range(40))
    assert answers["pod-a"] > 0 and set(answers) == set(PODS)


def test_single_stack_service_keeps_working(cluster):
    assert cluster.topo.outside.ask_tcp("10.96.0.80", 80) == "pod-c"
    assert "fd00:96::80" not in table()


def test_endpoint_removed_while_traffic_flows(cluster):
    """New connections go to the remaining endpoint at once; an open TCP
    connection keeps its conntrack entry and goes on."""
    client = cluster.topo.outside
    conn = client.connect("10.96.0.30", 80)
    leaving = conn.greeting
    staying = ({"pod-a", "pod-b"} - {leaving}).pop()
    try:
        cluster.set_endpoints("drain", [staying])
        eventually(lambda: {client.ask_tcp("10.96.0.30", 80) for _ in range(6)} == {staying})
        assert conn.echo("still there") == f"{leaving}:still there"
    finally:
        conn.close(reset=True)
    cluster.set_endpoints("drain", ["pod-a", "pod-b"])


@FAMILIES
def test_a_udp_flow_moves_on_when_its_endpoint_goes(cluster, v):
    with cluster.topo.outside.udp_flow(vip(v, 50), 53, timeout=1.0) as flow:
        first = flow.ask()
        assert flow.ask() == first
        other = ({"pod-a", "pod-b"} - {first}).pop()
        cluster.set_endpoints("dns", [other], ep_ports=(DNS_EP,), families=("IPv4" if v == "4" else "IPv6",))
        # The flow's conntrack entry is cleared with the endpoint: the same
        # source port reaches the other endpoint.
        eventually(lambda: flow.ask() == other, timeout=10)
        assert flow.ask() == other
    cluster.set_endpoints("dns", ["pod-a", "pod-b"], ep_ports=(DNS_EP,),
                          families=("IPv4" if v == "4" else "IPv6",))


def test_drift_repaired_after_rules_deleted_by_hand(cluster):
    text = table()
    chain = next(line.split()[1] for line in text.splitlines()
                 if line.strip().startswith("chain service-") and "default/v4only/tcp/http" in line)
    sh("nft", "flush", "chain", *TABLE, chain)
    sh("nft", "delete", "element", *TABLE, "service-ips6", "{ fd00:96::10 . tcp . 80 }")
    # (No check that traffic fails meanwhile: the next full sync may repair
    # it before any check could run.) The next full sync (every 2 s here)
    # compares with the kernel and repairs.
    eventually(lambda: "fd00:96::10 . tcp . 80" in table() and chain in table())
    eventually(lambda: cluster.topo.outside.ask_tcp("fd00:96::10", 80) in PODS)
    eventually(lambda: cluster.topo.outside.ask_tcp("10.96.0.80", 80) == "pod-c")


def test_others_tables_untouched_and_cleanup_removes_ours_only(cluster):
    assert "counter" in sh("nft", "list", "table", "inet", "other")
    args = build_parser().parse_args(["--proxy-mode", "nftables", "--cleanup"])
    # The running proxy would put the table back at its next sync; cleanup
    # is for a stopped proxy, so check the command's effect right away.
    assert run(args, NftCli()) == 0
    tables = sh("nft", "list", "tables")
    assert "inet other" in tables
    assert "platform-nodeproxy" not in tables or eventually(lambda: serving("10.96.0.10 . tcp . 80"))


@FAMILIES
def test_load_balancer_ip_honours_source_ranges_and_local_policy(cluster, v):
    lb_ip = "192.0.2.90" if v == "4" else "2001:db8::90"
    answers = {cluster.topo.outside.ask_tcp(lb_ip, 80) for _ in range(10)}
    assert answers == {"pod-a"}  # Local: this node's endpoint only
    # pod-c is not in loadBalancerSourceRanges: dropped (no answer at all)
    with pytest.raises(OSError):
        cluster.topo.client("pod-c").connect(lb_ip, 80, timeout=1.0)


def test_external_ip_is_served(cluster):
    assert cluster.topo.outside.ask_tcp("198.51.100.90", 80) == "pod-a"


def test_health_check_node_port_counts_local_endpoints(cluster):
    import json
    with netns.entered(cluster.topo.outside.ns):
        s = socket.create_connection((NODE_IP, 32090), timeout=5)
    with s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") or head.startswith(b"HTTP/1.1 200"), head
    assert json.loads(body) == {"service": {"namespace": "default", "name": "lb"}, "localEndpoints": 1,
                                "serviceProxyHealthy": True}
