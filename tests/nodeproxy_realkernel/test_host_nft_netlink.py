"""Small transactions over our own netlink encoding: what the kernel then
holds reads back through ``nft list`` exactly as we meant it."""

from __future__ import annotations

import shutil

import pytest

from platformd.common.clock import FakeClock
from platformd.nodeproxy.nftmodel import EVERYTHING, plan
from platformd.nodeproxy.nftnetlink import NftNetlink, Unencodable, encode_rule
from platformd.nodeproxy.nftproxier import NftProxier
from platformd.nodeproxy.proxier import ProxierOptions

from tests.nodeproxy.objects import endpoint, endpoint_slice, service

pytestmark = pytest.mark.skipif(not shutil.which("nft"), reason="needs the nft tool")


def _proxier(kernel) -> NftProxier:
    return NftProxier(kernel, ProxierOptions(hostname="node-a", ipv6=True, node_ips=("192.168.1.10", "fd00:1::10"),
                                             cluster_cidr="10.244.0.0/16,fd00:244::/48", sync_period=3600),
                      FakeClock())


def _same(p: NftProxier, kernel: NftNetlink) -> None:
    assert plan(kernel.read(), p._table.table, EVERYTHING) == []  # noqa: SLF001


def test_partial_syncs_over_netlink_read_back_as_meant(ns):
    kernel = NftNetlink()
    p = _proxier(kernel)
    web = service("web", "10.96.0.10", ports=((80, "TCP", 30080), (53, "UDP")), type="NodePort",
                  externalTrafficPolicy="Local")
    web["spec"]["clusterIPs"] = ["10.96.0.10", "fd00:96::10"]
    ports = ((8080, "TCP"), (5353, "UDP"))
    v4 = endpoint_slice("web", [endpoint("10.1.0.1", node="node-a"), "10.1.0.2"], ports=ports, port_names=["p80", "p53"])
    v6 = endpoint_slice("web", ["fd00:244::1"], ports=ports, name="web-6", port_names=["p80", "p53"])
    v6["addressType"] = "IPv6"
    p.on_service(None, web)
    p.on_slice(None, v4)
    p.on_slice(None, v6)
    p.sync()  # full: nft -f
    assert kernel.netlink_transactions == 0
    _same(p, kernel)

    # an endpoint replaced, one added in IPv6: rules and hairpin elements
    v4b = endpoint_slice("web", [endpoint("10.1.0.1", node="node-a"), "10.1.0.3"], ports=ports, port_names=["p80", "p53"])
    v6b = endpoint_slice("web", ["fd00:244::1", "fd00:244::2"], ports=ports, name="web-6", port_names=["p80", "p53"])
    v6b["addressType"] = "IPv6"
    p.on_slice(v4, v4b)
    p.on_slice(v6, v6b)
    p.sync()
    assert kernel.netlink_transactions == 1
    _same(p, kernel)

    # a new Service with one source range (chains, firewall, map elements),
    # and one without endpoints (reject elements)
    lb = service("lb", "10.96.0.20", ports=((80, "TCP", 30081),), type="LoadBalancer",
                 loadBalancerSourceRanges=["203.0.113.0/24"],
                 status={"loadBalancer": {"ingress": [{"ip": "192.0.2.5"}]}})
    p.on_service(None, lb)
    p.on_slice(None, endpoint_slice("lb", ["10.1.0.9"]))
    p.on_service(None, service("empty", "10.96.0.30"))
    p.sync()
    assert kernel.netlink_transactions == 2
    _same(p, kernel)

    # a Service gone: its chains go after the elements that led to them
    p.on_service(web, None)
    p.sync()
    assert kernel.netlink_transactions == 3
    _same(p, kernel)

    # affinity sets are not encoded here: nft -f takes that transaction
    p.on_service(None, service("sticky", "10.96.0.40", sessionAffinity="ClientIP"))
    p.on_slice(None, endpoint_slice("sticky", ["10.1.0.5"]))
    p.sync()
    assert kernel.netlink_transactions == 3
    _same(p, kernel)
    p.on_slice(endpoint_slice("sticky", ["10.1.0.5"]), endpoint_slice("sticky", ["10.1.0.5", "10.1.0.6"]))
    p.sync()
    _same(p, kernel)


def test_a_failing_netlink_batch_changes_nothing(ns):
    kernel = NftNetlink()
    p = _proxier(kernel)
    p.on_service(None, service("web", "10.96.0.10"))
    p.on_slice(None, endpoint_slice("web", ["10.1.0.1"]))
    p.sync()
    before = kernel.read()
    from platformd.nodeproxy.kernel import KernelError
    from platformd.nodeproxy.nftmodel import AddRule, DeleteChain
    with pytest.raises(KernelError):
        kernel.transact([AddRule("mark-for-masquerade", "jump reject-chain"), DeleteChain("no-such-chain")])
    assert kernel.read() == before


def test_unknown_rule_shapes_are_left_to_nft():
    with pytest.raises(Unencodable):
        encode_rule("ip saddr != { 1.2.3.0/24, 5.6.7.8 } drop")
    with pytest.raises(Unencodable):
        encode_rule("ip daddr . meta l4proto . th dport vmap @service-ips4")


def test_the_netlink_reader_sees_what_nft_lists_and_the_drift(ns):
    from platformd.nodeproxy.nftkernel import NftCli
    from platformd.nodeproxy.nftmodel import rule_id
    from tests.nodeproxy_realkernel.netns import sh
    kernel = NftNetlink()
    p = _proxier(kernel)
    svc = service("web", "10.96.0.10", ports=((80, "TCP", 30080),), type="NodePort", sessionAffinity="ClientIP")
    svc["spec"]["clusterIPs"] = ["10.96.0.10", "fd00:96:0:0::10"]  # not in canonical form
    v6 = endpoint_slice("web", ["fd00:244:0::1"], name="web-6")
    v6["addressType"] = "IPv6"
    p.on_service(None, svc)
    p.on_slice(None, endpoint_slice("web", ["10.1.0.1", "10.1.0.2"]))
    p.on_slice(None, v6)
    p.on_service(None, service("empty", "10.96.0.30"))
    p.sync()
    want = p._table.table  # noqa: SLF001
    fast, slow = kernel.read(), NftCli().read()
    assert plan(fast, want, EVERYTHING) == [] and plan(slow, want, EVERYTHING) == []
    assert fast.elements == {n: e for n, e in slow.elements.items() if not n.startswith("affinity-")} | {
        n: {} for n in slow.elements if n.startswith("affinity-")}
    assert {n: tuple(map(rule_id, c.rules)) for n, c in fast.chains.items()} == {
        n: tuple(map(rule_id, c.rules)) for n, c in slow.chains.items()}
    assert "fd00:96::10 . tcp . 80" in fast.elements["service-ips6"]

    svc_chain = fast.elements["service-ips4"]["10.96.0.10 . tcp . 80"].split()[1]
    sh("nft", "flush", "chain", "inet", "platform-nodeproxy", svc_chain)
    sh("nft", "delete", "element", "inet", "platform-nodeproxy", "no-endpoint-services4", "{ 10.96.0.30 . tcp . 80 }")
    sh("nft", "add", "rule", "inet", "platform-nodeproxy", "reject-chain", "counter")
    ops = plan(kernel.read(), want, EVERYTHING)
    repaired = {getattr(op, "name", None) or getattr(op, "chain", None) or getattr(op, "set", None) for op in ops}
    assert repaired == {svc_chain, "no-endpoint-services4", "reject-chain"}
    kernel.transact(ops)
    assert plan(kernel.read(), want, EVERYTHING) == []


def test_rules_written_over_netlink_list_exactly_like_rules_written_by_nft(ns):
    """Every Service-chain rule shape, written once by nft -f (the full sync)
    and once more by our encoder into a copy of its chain: nft lists both
    the same, so the kernel holds the same expressions."""
    from platformd.nodeproxy.nftmodel import AddChain, AddRule
    from tests.nodeproxy_realkernel.netns import sh
    kernel = NftNetlink()
    p = _proxier(kernel)
    ports = ((8080, "TCP"), (5353, "UDP"))
    names = ["p80", "p53"]
    web = service("web", "10.96.0.10", ports=((80, "TCP", 30080), (53, "UDP")), type="LoadBalancer",
                  externalTrafficPolicy="Local", loadBalancerSourceRanges=["203.0.113.0/24"],
                  status={"loadBalancer": {"ingress": [{"ip": "192.0.2.5"}]}})
    web["spec"]["clusterIPs"] = ["10.96.0.10", "fd00:96::10"]
    v6 = endpoint_slice("web", [endpoint("fd00:244::1", node="node-a"), "fd00:244::2"], ports=ports,
                        name="web-6", port_names=names)
    v6["addressType"] = "IPv6"
    p.on_service(None, web)
    p.on_slice(None, endpoint_slice("web", [endpoint("10.1.0.1", node="node-a"), "10.1.0.2"], ports=ports,
                                    port_names=names))
    p.on_slice(None, v6)
    p.on_service(None, service("sticky", "10.96.0.40", sessionAffinity="ClientIP"))
    p.on_slice(None, endpoint_slice("sticky", ["10.1.0.5", "10.1.0.6"]))
    p.sync()
    table = p._table.table  # noqa: SLF001
    ours = [n for n in table.chains if "/" in n]  # the Services' chains (their names carry ns/name)
    assert len(ours) >= 8
    ops = []
    for i, name in enumerate(ours):
        ops += [AddChain(f"copy-{i}")] + [AddRule(f"copy-{i}", r) for r in table.chains[name].rules]
    kernel.transact(ops)
    assert kernel.netlink_transactions == 1  # every shape was encoded, none left to nft

    def body(chain: str) -> list[str]:
        return sh("nft", "list", "chain", "inet", "platform-nodeproxy", chain).splitlines()[2:-2]
    for i, name in enumerate(ours):
        assert body(f"copy-{i}") == body(name), name
