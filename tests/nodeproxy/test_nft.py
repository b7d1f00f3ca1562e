"""The nftables mode's sync on the in-memory table model (FakeNft)."""

from __future__ import annotations

import pytest

from platformd.common.clock import FakeClock
from platformd.nodeproxy.kernel import KernelError
from platformd.nodeproxy.nftfake import FakeNft
from platformd.nodeproxy.nftmodel import (AddElements, Chain, DeleteChain, DeleteElements, Table, parse, plan,
                                          render, size)
from platformd.nodeproxy.nftproxier import NftProxier
from platformd.nodeproxy.proxier import ProxierOptions

from .objects import endpoint, endpoint_slice, service

NODE_IP = "192.168.1.10"


def make(**opts) -> tuple[NftProxier, FakeNft]:
    kernel = FakeNft()
    opts.setdefault("ipv6", True)  # the node has both families
    o = ProxierOptions(hostname="node-a", node_ips=(NODE_IP, "fd00:1::10"), cluster_cidr="10.244.0.0/16",
                       **opts)
    return NftProxier(kernel, o, FakeClock()), kernel


def slots(table: Table, kind: str = "endpoints-tcp4") -> dict[str, str]:
    """The elements of every shard of one kind of slot map, merged."""
    return {k: v for name, elems in table.elements.items() if name.startswith(kind + "-") for k, v in elems.items()}


def chain_of(table: Table, prefix: str, service: str) -> tuple[str, Chain]:
    found = [(n, c) for n, c in table.chains.items() if n.startswith(prefix) and f"-{service}/" in n]
    assert len(found) == 1, found
    return found[0]


def test_initial_sync_dispatches_cluster_ip_to_endpoints_and_a_second_sync_changes_nothing():
    p, k = make()
    p.on_service(None, service("web", "10.96.0.10"))
    p.on_slice(None, endpoint_slice("web", [endpoint("10.1.0.1", node="node-a"), "10.1.0.2"]))
    p.sync()
    t = k.read()
    value = t.elements["service-ips4"]["10.96.0.10 . tcp . 80"]
    name, chain = chain_of(t, "service-", "default/web")
    assert value == f"goto {name}"
    assert "ip daddr @cluster-ips4 ip saddr != 10.244.0.0/16 jump mark-for-masquerade" in t.chains["services"].rules
    slot_map = chain.rules[0].rsplit("@", 1)[1]
    assert slot_map.startswith("endpoints-tcp4-")
    assert chain.rules == (
        "meta l4proto tcp dnat ip addr . port to ip daddr . tcp dport . numgen random mod 2 map @" + slot_map,)
    assert slots(t) == {"10.96.0.10 . 80 . 0": "10.1.0.1 . 8080", "10.96.0.10 . 80 . 1": "10.1.0.2 . 8080"}
    # hairpin: only for endpoints that may be on this node
    assert t.elements["hairpin4"] == {"10.1.0.1 . 10.1.0.1": ""}
    assert t.elements["nodeport-ips4"] == {NODE_IP: ""} and t.elements["nodeport-ips6"] == {"fd00:1::10": ""}
    transactions = len(k.transactions)
    p.sync()  # nothing changed: no transaction at all
    assert len(k.transactions) == transactions


def test_service_without_endpoints_is_rejected_and_gets_its_chain_when_one_comes():
    p, k = make()
    p.on_service(None, service("web", "10.96.0.10", ports=((80, "TCP", 30080),), type="NodePort"))
    p.sync()
    t = k.read()
    assert t.elements["no-endpoint-services4"]["10.96.0.10 . tcp . 80"] == "goto reject-chain"
    assert t.elements["no-endpoint-nodeports4"]["tcp . 30080"] == "goto reject-chain"
    assert "10.96.0.10 . tcp . 80" not in t.elements["service-ips4"]
    p.on_slice(None, endpoint_slice("web", ["10.1.0.1"]))
    p.sync()
    t = k.read()
    assert "10.96.0.10 . tcp . 80" not in t.elements["no-endpoint-services4"]
    ext, chain = chain_of(t, "external-", "default/web")
    assert t.elements["service-nodeports4"]["tcp . 30080"] == f"goto {ext}"
    svc, _ = chain_of(t, "service-", "default/web")
    assert chain.rules == ("jump mark-for-masquerade", f"goto {svc}")


def _services(p: NftProxier, n: int) -> None:
    for i in range(n):
        p.on_service(None, service(f"s{i}", f"10.96.{i // 250}.{i % 250 + 1}"))
        p.on_slice(None, endpoint_slice(f"s{i}", [f"10.1.{i // 250}.{i % 250 + 1}", f"10.2.{i // 250}.{i % 250 + 1}"]))


@pytest.mark.parametrize("n", [10, 400])
def test_one_endpoint_change_is_one_small_transaction_whatever_the_number_of_services(n):
    p, k = make()
    _services(p, n)
    p.sync()
    old = endpoint_slice("s3", ["10.1.0.4", "10.2.0.4"])
    p.on_slice(old, endpoint_slice("s3", ["10.1.0.4", "10.3.0.4"]))
    p.sync()
    ops = k.transactions[-1]
    # map elements only: the endpoint's slot, out and in (both endpoints are elsewhere: no hairpin pair)
    assert size(ops) == 2, render(ops)
    assert p.last_transaction_size == 2
    assert all(type(op).__name__ in ("AddElements", "DeleteElements") for op in ops)
    assert not p.last_result.full


def test_deleted_service_leaves_nothing_behind():
    p, k = make()
    p.on_service(None, service("web", "10.96.0.10", sessionAffinity="ClientIP"))
    p.on_slice(None, endpoint_slice("web", ["10.1.0.1"]))
    p.sync()
    fixed_only, _ = make()
    fixed_only.sync()
    assert any(n.startswith("affinity-") for n in k.read().sets)
    p.on_service(service("web", "10.96.0.10", sessionAffinity="ClientIP"), None)
    p.on_slice(endpoint_slice("web", ["10.1.0.1"]), None)
    p.sync()
    assert k.read() == fixed_only.nft.read()


def test_full_sync_repairs_a_rule_and_an_element_deleted_by_hand():
    p, k = make(sync_period=30.0)
    p.on_service(None, service("web", "10.96.0.10"))
    p.on_slice(None, endpoint_slice("web", ["10.1.0.1", "10.1.0.2"]))
    p.sync()
    want = k.read()
    name, chain = chain_of(k.table, "service-", "default/web")
    k.table.chains[name] = Chain(chain.rules[:1])
    del k.table.elements["service-ips4"]["10.96.0.10 . tcp . 80"]
    p.sync()  # partial: trusts its record
    assert k.read() != want
    p.clock.advance(31)
    p.sync()
    assert p.last_result.full and k.read() == want


def test_failed_transaction_changes_nothing_and_the_next_sync_is_full():
    p, k = make()
    p.on_service(None, service("web", "10.96.0.10"))
    p.on_slice(None, endpoint_slice("web", ["10.1.0.1"]))
    p.sync()
    before = k.read()
    p.on_slice(endpoint_slice("web", ["10.1.0.1"]), endpoint_slice("web", ["10.1.0.9"]))
    k.fail_next = KernelError("boom")
    with pytest.raises(KernelError):
        p.sync()
    assert k.read() == before
    p.sync()
    assert p.last_result.full
    assert slots(k.table) == {"10.96.0.10 . 80 . 0": "10.1.0.9 . 8080"}


def test_udp_conntrack_cleared_for_the_endpoint_that_went_and_after_no_endpoints():
    p, k = make()
    dns = service("dns", "10.96.0.53", ports=((53, "UDP"),))
    p.on_service(None, dns)
    p.sync()
    p.on_slice(None, endpoint_slice("dns", ["10.1.0.1", "10.1.0.2"], ports=((5353, "UDP"),)))
    p.sync()
    assert k.cleared == [("UDP", "10.96.0.53", 53, None)]
    p.on_slice(endpoint_slice("dns", ["10.1.0.1", "10.1.0.2"], ports=((5353, "UDP"),)),
               endpoint_slice("dns", ["10.1.0.1"], ports=((5353, "UDP"),)))
    p.sync()
    assert k.cleared[-1] == ("UDP", "10.96.0.53", 53, "10.1.0.2")


def _dual_stack_web(**opts):
    p, k = make(**opts)
    svc = service("web", "10.96.0.10", ports=((80, "TCP", 30080),), type="NodePort",
                  ipFamilies=["IPv4", "IPv6"])
    svc["spec"]["clusterIPs"] = ["10.96.0.10", "fd00:96::10"]
    six = endpoint_slice("web", ["fd00:244::1"], name="web-6")
    six["addressType"] = "IPv6"
    p.on_service(None, svc)
    p.on_slice(None, endpoint_slice("web", ["10.1.0.1"]))
    p.on_slice(None, six)
    p.sync()
    return k.read()


def test_single_stack_option_leaves_the_ipv6_half_out():
    # --dual-stack=false (or auto on an IPv4-only node): the same flag as the IPVS mode
    t = _dual_stack_web(ipv6=False)
    assert "10.96.0.10 . tcp . 80" in t.elements["service-ips4"]
    assert not t.elements["service-ips6"] and not t.elements["service-nodeports6"]


def test_dual_stack_service_gets_both_families():
    t = _dual_stack_web()
    assert "10.96.0.10 . tcp . 80" in t.elements["service-ips4"]
    assert "fd00:96::10 . tcp . 80" in t.elements["service-ips6"]
    assert "tcp . 30080" in t.elements["service-nodeports6"]
    six_chain = t.elements["service-ips6"]["fd00:96::10 . tcp . 80"][len("goto "):]
    assert t.chains[six_chain].rules[-1].rsplit("@", 1)[1].startswith("endpoints-tcp6-")
    assert slots(t, "endpoints-tcp6") == {"fd00:96::10 . 80 . 0": "fd00:244::1 . 8080",
                                        "fd00:1::10 . 30080 . 0": "fd00:244::1 . 8080"}  # node port on the node IPv6
    # no IPv6 cluster CIDR given: no masquerading rule for IPv6
    assert not any(r.startswith("ip6 daddr @cluster-ips6 ip6 saddr") for r in t.chains["services"].rules)


def test_local_external_policy_uses_local_endpoints_and_short_circuits_pods_and_node():
    p, k = make()
    svc = service("lb", "10.96.0.20", ports=((80, "TCP", 30081),), type="LoadBalancer",
                  externalTrafficPolicy="Local", healthCheckNodePort=32000,
                  loadBalancerSourceRanges=["203.0.113.0/24", "198.51.100.7/32"],
                  status={"loadBalancer": {"ingress": [{"ip": "192.0.2.5"}]}})
    p.on_service(None, svc)
    p.on_slice(None, endpoint_slice("lb", [endpoint("10.1.0.1", node="node-a"), endpoint("10.1.0.2")]))
    p.sync()
    t = k.read()
    ext, chain = chain_of(t, "external-", "default/lb")
    svc_chain, _ = chain_of(t, "service-", "default/lb")
    assert chain.rules == (f"ip saddr 10.244.0.0/16 goto {svc_chain}",
                           "fib saddr type local jump mark-for-masquerade",
                           f"fib saddr type local goto {svc_chain}",
                           "meta l4proto tcp dnat ip addr . port to ip daddr . tcp dport . "
                           "numgen random mod 1 map @" + chain.rules[-1].rsplit("@", 1)[1])
    assert chain.rules[-1].rsplit("@", 1)[1].startswith("local-endpoints-tcp4-")
    # external destinations: local endpoints for the Local dispatch, all of
    # them for pods and the node itself (through the Service's chain)
    assert slots(t, "local-endpoints-tcp4") == {"192.0.2.5 . 80 . 0": "10.1.0.1 . 8080",
                                              f"{NODE_IP} . 30081 . 0": "10.1.0.1 . 8080"}
    assert slots(t)["192.0.2.5 . 80 . 1"] == "10.1.0.2 . 8080"
    assert t.elements["service-ips4"]["192.0.2.5 . tcp . 80"] == f"goto {ext}"
    fw, fw_chain = chain_of(t, "firewall-", "default/lb")
    assert t.elements["firewall-ips4"]["192.0.2.5 . tcp . 80"] == f"goto {fw}"
    assert fw_chain.rules == ("ip saddr != { 198.51.100.7, 203.0.113.0/24 } drop",)


def test_affinity_endpoints_get_a_chain_and_a_timed_set_each():
    p, k = make()
    p.on_service(None, service("s", "10.96.0.30", sessionAffinity="ClientIP",
                               sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}}))
    p.on_slice(None, endpoint_slice("s", ["10.1.0.1", "10.1.0.2"]))
    p.sync()
    t = k.read()
    _, chain = chain_of(t, "service-", "default/s")
    affinity = sorted(n for n in t.sets if n.startswith("affinity-"))
    assert len(affinity) == 2 and t.sets[affinity[0]].timeout == 60
    assert chain.rules[0].startswith(f"ip saddr @{affinity[0]} goto endpoint-")
    assert chain.rules[-1].startswith("goto endpoint-")


def test_plan_orders_operations_so_references_always_resolve():
    have = Table(chains={"a": Chain(("goto b",)), "b": Chain(())},
                 sets={}, elements={})
    want = Table(chains={"c": Chain(())}, sets={}, elements={})
    ops = plan(have, want)
    assert [type(o).__name__ for o in ops] == ["AddChain", "FlushChain", "FlushChain", "DeleteChain", "DeleteChain"]
    assert isinstance(ops[-1], DeleteChain)


def test_parse_reads_nft_listing():
    text = """table inet platform-nodeproxy {
	map service-ips4 {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.11 . udp . 53 : goto reject-chain,
			     10.96.0.10 . tcp . 80 : goto service-X-default/web/tcp/http }
	}

	set affinity-X {
		type ipv4_addr
		size 65535
		flags dynamic,timeout
		timeout 1h1m
	}

	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}
}
"""
    t = parse(text)
    assert t.elements["service-ips4"] == {"10.96.0.11 . udp . 53": "goto reject-chain",
                                          "10.96.0.10 . tcp . 80": "goto service-X-default/web/tcp/http"}
    assert t.sets["service-ips4"].verdict and t.sets["affinity-X"].timeout == 3660
    assert t.chains["nat-prerouting"] == Chain(("jump services",), "type nat hook prerouting priority dstnat; "
                                                                   "policy accept;")
    assert render([AddElements("s", (("k", "v"),)), DeleteElements("s", ("k",))], create_table=False) == (
        "add element inet platform-nodeproxy s { k : v }\ndelete element inet platform-nodeproxy s { k }\n")


# -- the command line ----------------------------------------------------------------


def _args(*argv):
    from platformd.nodeproxy.main import build_parser
    return build_parser().parse_args(["--proxy-mode", "nftables", *argv,
                                      "--healthz-bind-address", "", "--metrics-bind-address", ""])


def test_default_mode_stays_ipvs():
    from platformd.nodeproxy.main import build_parser
    assert build_parser().parse_args([]).proxy_mode == "ipvs"


def test_dry_run_prints_one_nft_transaction_and_touches_nothing(tmp_path):
    import io

    from platformd.nodeproxy.main import run
    from platformd.nodeproxy.nftkernel import DryRunNft

    from .test_e2e import write
    write(tmp_path / "a.yaml", service("web", "10.96.0.10"), endpoint_slice("web", ["10.1.0.1"]))
    out = io.StringIO()
    assert run(_args("--source", str(tmp_path), "--hostname", "n", "--dry-run", "--once"), kernel=DryRunNft(out)) == 0
    text = out.getvalue()
    assert text.startswith("add table inet platform-nodeproxy\n")
    assert "add element inet platform-nodeproxy service-ips4 { 10.96.0.10 . tcp . 80 : goto service-" in text
    assert "{ 10.96.0.10 . 80 . 0 : 10.1.0.1 . 8080 }" in text


def test_cleanup_deletes_our_table_only(tmp_path):
    from platformd.nodeproxy.main import run

    from .test_e2e import write
    kernel = FakeNft()
    write(tmp_path / "a.yaml", service("web", "10.96.0.10"), endpoint_slice("web", ["10.1.0.1"]))
    assert run(_args("--source", str(tmp_path), "--hostname", "n", "--once"), kernel=kernel) == 0
    assert kernel.table is not None
    assert run(_args("--cleanup"), kernel=kernel) == 0
    assert kernel.table is None
    assert run(_args("--cleanup"), kernel=kernel) == 0  # nothing left: still fine


def test_missing_nft_gets_one_line_and_exit_1(tmp_path, capsys):
    from platformd.nodeproxy.main import run
    from platformd.nodeproxy.nftkernel import NftCli
    status = run(_args("--source", str(tmp_path), "--hostname", "n", "--once"),
                 kernel=NftCli(nft=str(tmp_path / "no-nft")))
    err = capsys.readouterr().err
    assert status == 1 and err.count("\n") == 1 and "nftables mode needs" in err


def test_status_document_and_health_check_node_port():
    import json
    import urllib.error
    import urllib.request

    from platformd.nodeproxy.healthcheck import HealthCheckServers
    checks = HealthCheckServers("127.0.0.1")
    kernel = FakeNft()
    p = NftProxier(kernel, ProxierOptions(hostname="node-a", ipv6=True), FakeClock(), health_checks=checks)
    svc = service("lb", "10.96.0.20", ports=((80, "TCP", 30081),), type="LoadBalancer",
                  externalTrafficPolicy="Local", healthCheckNodePort=0)
    try:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        svc["spec"]["healthCheckNodePort"] = port
        p.on_service(None, svc)
        p.on_slice(None, endpoint_slice("lb", [endpoint("10.1.0.2")]))
        p.sync()
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
        assert err.value.code == 503 and json.loads(err.value.read())["localEndpoints"] == 0
        new = endpoint_slice("lb", [endpoint("10.1.0.2"), endpoint("10.1.0.1", node="node-a")])
        p.on_slice(endpoint_slice("lb", [endpoint("10.1.0.2")]), new)
        p.sync()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            body = json.loads(r.read())
        assert body == {"service": {"namespace": "default", "name": "lb"}, "localEndpoints": 1,
                        "serviceProxyHealthy": True}
        st = p.status()
        assert st["mode"] == "nftables" and st["services"] == 1 and st["chains"] > 10
        p.on_service(svc, None)
        p.sync()
        assert checks.ports() == {}
    finally:
        checks.close()


def test_platformctl_shows_the_nftables_status():
    from platformd.ctl import render_status_table
    p, _k = make()
    p.on_service(None, service("web", "10.96.0.10"))
    p.on_slice(None, endpoint_slice("web", ["10.1.0.1"]))
    p.sync()
    text = render_status_table({"components": {"nodeproxy": {"healthy": True, "status": p.status()}}})
    assert "mode:" in text and "nftables" in text and "services:" in text and "virtual servers" not in text
    lines = dict(line.split(":", 1) for line in text.splitlines() if line.startswith("  ") and ":" in line)
    assert lines["  services"].strip() == "1"


def test_internal_local_without_local_endpoints_drops_and_without_any_rejects():
    p, k = make()
    p.on_service(None, service("loc", "10.96.0.40", internalTrafficPolicy="Local"))
    p.on_slice(None, endpoint_slice("loc", [endpoint("10.1.0.2", node="node-b")]))
    p.sync()
    assert k.read().elements["no-endpoint-services4"]["10.96.0.40 . tcp . 80"] == "drop"
    p.on_slice(endpoint_slice("loc", [endpoint("10.1.0.2", node="node-b")]), endpoint_slice("loc", []))
    p.sync()
    assert k.read().elements["no-endpoint-services4"]["10.96.0.40 . tcp . 80"] == "goto reject-chain"
    p.on_slice(endpoint_slice("loc", []), endpoint_slice("loc", [endpoint("10.1.0.1", node="node-a")]))
    p.sync()
    assert "10.96.0.40 . tcp . 80" in k.read().elements["service-ips4"]


def test_endpoints_keep_their_slots():
    from platformd.nodeproxy.nftrules import keep_slots
    assert keep_slots((), ["a", "b", "c"]) == ["a", "b", "c"]
    assert keep_slots(("a", "b", "c"), ["a", "c", "d"]) == ["a", "d", "c"]  # d takes b's slot
    assert keep_slots(("a", "b", "c"), ["b", "c"]) == ["c", "b"]  # c moves into the free slot 0
    assert keep_slots(("a", "b"), ["a", "b", "c"]) == ["a", "b", "c"]


def test_two_services_claiming_one_external_ip_the_first_key_wins_and_the_other_takes_over():
    p, k = make()
    a = service("a", "10.96.0.1", externalIPs=["198.51.100.1"])
    b = service("b", "10.96.0.2", externalIPs=["198.51.100.1"])
    for svc, ep in ((b, "10.1.0.2"), (a, "10.1.0.1")):  # event order must not matter
        p.on_service(None, svc)
        p.on_slice(None, endpoint_slice(svc["metadata"]["name"], [ep]))
    p.sync()
    ext_a, _ = chain_of(k.read(), "external-", "default/a")
    assert k.read().elements["service-ips4"]["198.51.100.1 . tcp . 80"] == f"goto {ext_a}"
    p.on_service(a, None)
    p.sync()
    ext_b, _ = chain_of(k.read(), "external-", "default/b")
    assert k.read().elements["service-ips4"]["198.51.100.1 . tcp . 80"] == f"goto {ext_b}"
    assert slots(k.read())["198.51.100.1 . 80 . 0"] == "10.1.0.2 . 8080"


def test_nftables_mode_serves_healthz_status_and_metrics(tmp_path):
    import json
    import socket
    import threading
    import urllib.request

    from platformd.nodeproxy.main import build_parser, run

    from .test_e2e import write
    write(tmp_path / "a.yaml", service("web", "10.96.0.10"), endpoint_slice("web", ["10.1.0.1"]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = build_parser().parse_args(["--proxy-mode", "nftables", "--source", str(tmp_path), "--hostname", "n",
                                      "--healthz-bind-address", f"127.0.0.1:{port}",
                                      "--metrics-bind-address", f"127.0.0.1:{port}", "--min-sync-period", "0"])
    kernel, stop = FakeNft(), threading.Event()
    proxy = threading.Thread(target=run, args=(args, kernel, stop), daemon=True)
    proxy.start()
    try:
        base = f"http://127.0.0.1:{port}"

        def synced():
            with urllib.request.urlopen(base + "/status", timeout=5) as r:
                return json.loads(r.read()).get("services") == 1
        deadline = __import__("time").monotonic() + 20
        while not _quietly(synced):
            assert __import__("time").monotonic() < deadline, "no sync within 20 s"
            stop.wait(0.05)
        with urllib.request.urlopen(base + "/healthz", timeout=5) as r:
            assert r.status == 200 and set(json.loads(r.read())) >= {"lastUpdated", "currentTime"}
        with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
            body = r.read()
        assert b"kubeproxy_sync_proxy_rules_last_timestamp_seconds" in body
        assert b"kubeproxy_sync_proxy_rules_duration_seconds_count" in body
    finally:
        stop.set()
        proxy.join(10)
    assert not proxy.is_alive()


def _quietly(check) -> bool:
    try:
        return bool(check())
    except OSError:
        return False


def test_terminating_endpoints_serve_when_no_endpoint_is_ready():
    p, k = make()
    p.on_service(None, service("web", "10.96.0.10"))
    p.on_slice(None, endpoint_slice("web", [endpoint("10.1.0.1", ready=False, serving=True, terminating=True),
                                            endpoint("10.1.0.2", ready=False, serving=False, terminating=True)]))
    p.sync()
    assert slots(k.read()) == {"10.96.0.10 . 80 . 0": "10.1.0.1 . 8080"}
