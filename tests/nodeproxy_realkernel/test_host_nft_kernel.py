"""The nftables mode against this machine's kernel, without traffic: what we
write reads back (through ``nft list``) as what we meant, so a full sync of
an unchanged table is an empty transaction (and drift is real drift); every
rule shape is accepted by the kernel and prints as expected."""

from __future__ import annotations

import shutil

import pytest

from platformd.common.clock import FakeClock
from platformd.nodeproxy.nftkernel import NftCli
from platformd.nodeproxy.nftmodel import EVERYTHING, plan
from platformd.nodeproxy.nftproxier import NftProxier
from platformd.nodeproxy.proxier import ProxierOptions

from tests.nodeproxy.objects import endpoint, endpoint_slice, service

pytestmark = pytest.mark.skipif(not shutil.which("nft"), reason="needs the nft tool")


def _feed(p: NftProxier) -> None:
    ports = ((8080, "TCP"), (5353, "UDP"), (9, "SCTP"))
    NAMES = ["p80", "p53", "p9"]  # noqa: N806 - the Service's port names
    six = endpoint_slice("web", ["fd00:244::1", "fd00:244::2"], name="web-6", ports=ports, port_names=NAMES)
    six["addressType"] = "IPv6"
    web = service("web", "10.96.0.10", ports=((80, "TCP", 30080), (53, "UDP", 30053), (9, "SCTP")),
                  type="NodePort")
    web["spec"]["clusterIPs"] = ["10.96.0.10", "fd00:96::10"]
    p.on_service(None, web)
    p.on_slice(None, endpoint_slice("web", ["10.1.0.1", "10.1.0.2"], ports=ports, port_names=NAMES))
    p.on_slice(None, six)
    p.on_service(None, service("sticky", "10.96.0.20", sessionAffinity="ClientIP",
                               sessionAffinityConfig={"clientIP": {"timeoutSeconds": 3700}}))
    p.on_slice(None, endpoint_slice("sticky", ["10.1.0.3", "10.1.0.4"]))
    p.on_service(None, service("lb", "10.96.0.30", ports=((80, "TCP", 30081),), type="LoadBalancer",
                               externalTrafficPolicy="Local", externalIPs=["192.0.2.9"],
                               loadBalancerSourceRanges=["203.0.113.0/24", "198.51.100.7/32"],
                               status={"loadBalancer": {"ingress": [{"ip": "192.0.2.5"}]}}))
    p.on_slice(None, endpoint_slice("lb", [endpoint("10.1.0.5", node="node-a"), endpoint("10.1.0.6")]))
    p.on_service(None, service("nolocal", "10.96.0.40", ports=((80, "TCP", 30082),), type="NodePort",
                               externalTrafficPolicy="Local"))
    p.on_slice(None, endpoint_slice("nolocal", ["10.1.0.7"]))
    p.on_service(None, service("empty", "10.96.0.50"))


@pytest.mark.parametrize("masquerade_all", [False, True])
def test_what_we_write_reads_back_unchanged(ns, masquerade_all):
    kernel = NftCli()
    clock = FakeClock()
    p = NftProxier(kernel, ProxierOptions(hostname="node-a", ipv6=True, node_ips=("192.168.1.10", "fd00:1::10"),
                                          cluster_cidr="10.244.0.0/16,fd00:244::/48",
                                          masquerade_all=masquerade_all, sync_period=30), clock)
    _feed(p)
    p.sync()
    ours = p._table.table
    read = kernel.read()
    assert plan(read, ours, EVERYTHING) == []
    from tests.nodeproxy_realkernel.netns import sh
    listing = sh("nft", "list", "table", "inet", "platform-nodeproxy")  # as nft prints them
    for shape in ("dnat ip to ip daddr . tcp dport . numgen random mod 2 map @endpoints-tcp4-",
                  "dnat ip6 to ip6 daddr . sctp dport . numgen random mod 2 map @endpoints-sctp6-",
                  "dnat ip to ip daddr . tcp dport . numgen random mod 1 map @local-endpoints-tcp4-",
                  "numgen random mod 2 0 goto endpoint-", "update @affinity-", "fib saddr type local",
                  "saddr != { 198.51.100.7, 203.0.113.0/24 } drop", "reject with icmpv6 port-unreachable",
                  "fd00:96::10 . 9 . 1 : fd00:244::2 . 9"):
        assert shape in listing, shape
    assert any(s.timeout == 3700 for s in read.sets.values())
    clock.advance(31)
    p.sync()
    assert p.last_result.full and p.last_transaction_size == 0
    assert kernel.delete_table() and kernel.read() is None


def test_a_transaction_failing_at_its_last_line_leaves_the_previous_rules(ns):
    from platformd.nodeproxy.kernel import KernelError
    from platformd.nodeproxy.nftmodel import AddChain, AddRule, DeleteChain, FlushChain
    kernel = NftCli()
    p = NftProxier(kernel, ProxierOptions(hostname="node-a", sync_period=30, ipv6=True), FakeClock())
    _feed(p)
    p.sync()
    before = kernel.read()
    chain = next(n for n in before.chains if n.startswith("service-"))
    with pytest.raises(KernelError):
        kernel.transact([FlushChain(chain), AddChain("new-one"), AddRule("new-one", "drop"),
                         DeleteChain("no-such-chain")])
    assert kernel.read() == before
