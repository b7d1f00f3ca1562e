import pytest

from platformd.common.clock import FakeClock
from platformd.nodeproxy import ipsets, iptables
from platformd.nodeproxy.counting import CountingKernel
from platformd.nodeproxy.fakekernel import FakeKernel
from platformd.nodeproxy.kernel import DUMMY_LINK, IPSetEntry, KernelError, RealServer, VirtualServer
from platformd.nodeproxy.proxier import Proxier, ProxierOptions

from .objects import endpoint_slice, service

CIP = VirtualServer("TCP", "10.96.0.10", 80)


class Rig:
    def __init__(self, **opts):
        self.fake = FakeKernel()
        self.kernel = CountingKernel(self.fake)
        self.clock = FakeClock()
        options = dict(hostname="node-a", node_ips=("192.168.1.10",), sync_period=30.0)
        options.update(opts)
        self.proxier = Proxier(self.kernel, ProxierOptions(**options), self.clock)
        self.triggers = 0
        self.proxier.set_trigger(self._trigger)

    def _trigger(self):
        self.triggers += 1

    def sync(self):
        self.kernel.reset()
        return self.proxier.sync()

    def reals(self, vs=CIP):
        return self.fake.snapshot().get(self._find(vs))

    def _find(self, vs):
        for v in self.fake.virtual.values():
            if v.key == vs.key:
                return v
        return None


@pytest.fixture
def rig():
    return Rig()


def test_initial_sync_builds_everything(rig):
    svc, sl = service("web", "10.96.0.10"), endpoint_slice("web", ["10.1.0.1", "10.1.0.2"])
    rig.proxier.on_service(None, svc)
    rig.proxier.on_slice(None, sl)
    assert rig.triggers == 2
    result = rig.sync()
    assert result.full
    assert rig.reals() == {("10.1.0.1", 8080): 1, ("10.1.0.2", 8080): 1}
    assert rig.fake.links[DUMMY_LINK] == {"10.96.0.10"}
    assert IPSetEntry("10.96.0.10", "tcp", 80) in rig.fake.ipsets[ipsets.CLUSTER_IP][1]
    assert set(ipsets.NAMES) <= set(rig.fake.ipsets)
    assert rig.fake.iptables["nat"][iptables.SERVICES] is not None
    assert any(iptables.SERVICES in r for r in rig.fake.iptables["nat"]["PREROUTING"])


def test_endpoint_change_costs_a_handful_of_operations():
    rig = Rig()
    for i in range(200):
        rig.proxier.on_service(None, service(f"s{i}", f"10.96.{i // 250}.{i % 250 + 1}"))
        rig.proxier.on_slice(None, endpoint_slice(f"s{i}", [f"10.2.{i // 250}.{i % 250 + 1}", "10.3.0.1"]))
    rig.sync()
    old = endpoint_slice("s7", ["10.2.0.8", "10.3.0.1"])
    new = endpoint_slice("s7", ["10.2.0.8", "10.3.0.2"])
    rig.proxier.on_slice(old, new)
    result = rig.sync()
    assert not result.full and result.services_changed == 1
    # list the leaving server's counters, delete it (idle), add the new one
    assert dict(rig.kernel.counts) == {"list_real_servers": 1, "delete_real_server": 1, "add_real_server": 1}
    assert rig.kernel.batches == 3  # the listing, the graceful removal, the addition
    assert rig.reals(VirtualServer("TCP", "10.96.0.8", 80)) == {("10.2.0.8", 8080): 1, ("10.3.0.2", 8080): 1}


def _initial_sync_batches(n: int) -> int:
    rig = Rig()
    for i in range(n):
        rig.proxier.on_service(None, service(f"s{i}", f"10.96.{i // 250}.{i % 250 + 1}",
                                             ports=((80, "TCP", 30000 + i),), type="NodePort"))
        rig.proxier.on_slice(None, endpoint_slice(f"s{i}", [f"10.2.{i // 250}.{i % 250 + 1}", "10.3.0.1"]))
    rig.sync()
    assert rig.kernel.counts["add_real_server"] == 2 * n * 2  # cluster IP and node port, two endpoints
    return rig.kernel.batches


def test_initial_sync_costs_the_same_number_of_batches_at_any_size():
    assert _initial_sync_batches(300) == _initial_sync_batches(3)


def test_nothing_changed_means_no_kernel_operations(rig):
    rig.proxier.on_service(None, service("web", "10.96.0.10"))
    rig.sync()
    rig.clock.advance(1)
    rig.sync()
    assert sum(rig.kernel.counts.values()) == 0


def test_service_deleted_removes_everything(rig):
    svc = service("web", "10.96.0.10", ports=((80, "TCP", 30080),), type="NodePort")
    sl = endpoint_slice("web", ["10.1.0.1"])
    rig.proxier.on_service(None, svc)
    rig.proxier.on_slice(None, sl)
    rig.sync()
    assert len(rig.fake.virtual) == 2
    rig.proxier.on_service(svc, None)
    rig.proxier.on_slice(sl, None)
    rig.sync()
    assert rig.fake.virtual == {}
    assert rig.fake.links[DUMMY_LINK] == set()
    assert all(not members for _, members in rig.fake.ipsets.values())


def test_full_sync_repairs_drift(rig):
    rig.proxier.on_service(None, service("web", "10.96.0.10"))
    rig.proxier.on_slice(None, endpoint_slice("web", ["10.1.0.1"]))
    rig.sync()
    # someone deletes our virtual server, adds a stray address and a stray real server
    rig.fake.delete_virtual_server(CIP)
    rig.fake.add_address(DUMMY_LINK, "10.96.9.9")
    rig.fake.add_virtual_server(VirtualServer("TCP", "10.96.9.9", 443))
    rig.fake.iptables["nat"][iptables.SERVICES].clear()
    rig.clock.advance(10)
    assert not rig.sync().full  # nothing changed: nothing looked at
    assert rig.reals() is None
    rig.clock.advance(30)
    assert rig.sync().full
    assert rig.reals() == {("10.1.0.1", 8080): 1}
    assert rig.fake.links[DUMMY_LINK] == {"10.96.0.10"}
    assert list(rig.fake.virtual) == [CIP.key]
    assert rig.fake.iptables["nat"][iptables.SERVICES]


def test_tcp_real_server_terminates_gracefully(rig):
    old = endpoint_slice("web", ["10.1.0.1", "10.1.0.2"])
    rig.proxier.on_service(None, service("web", "10.96.0.10"))
    rig.proxier.on_slice(None, old)
    rig.sync()
    rig.fake.set_connections(CIP, RealServer("10.1.0.2", 8080), active=2, inactive=1)
    new = endpoint_slice("web", ["10.1.0.1"])
    rig.proxier.on_slice(old, new)
    rig.sync()
    assert rig.reals() == {("10.1.0.1", 8080): 1, ("10.1.0.2", 8080): 0}
    assert len(rig.proxier.graceful) == 1
    rig.clock.advance(30)  # a full sync must not adopt or re-delete it
    rig.sync()
    assert rig.reals() == {("10.1.0.1", 8080): 1, ("10.1.0.2", 8080): 0}
    rig.fake.set_connections(CIP, RealServer("10.1.0.2", 8080), active=0, inactive=0)
    rig.clock.advance(1)
    rig.sync()
    assert rig.reals() == {("10.1.0.1", 8080): 1}
    assert len(rig.proxier.graceful) == 0


def test_terminating_real_server_comes_back(rig):
    old = endpoint_slice("web", ["10.1.0.1", "10.1.0.2"])
    new = endpoint_slice("web", ["10.1.0.1"])
    rig.proxier.on_service(None, service("web", "10.96.0.10"))
    rig.proxier.on_slice(None, old)
    rig.sync()
    rig.fake.set_connections(CIP, RealServer("10.1.0.2", 8080), active=1)
    rig.proxier.on_slice(old, new)
    rig.sync()
    rig.proxier.on_slice(new, old)
    rig.sync()
    assert rig.reals() == {("10.1.0.1", 8080): 1, ("10.1.0.2", 8080): 1}
    assert len(rig.proxier.graceful) == 0


def test_graceful_termination_times_out():
    rig = Rig(graceful_timeout=60)
    old = endpoint_slice("web", ["10.1.0.1", "10.1.0.2"])
    rig.proxier.on_service(None, service("web", "10.96.0.10"))
    rig.proxier.on_slice(None, old)
    rig.sync()
    rig.fake.set_connections(CIP, RealServer("10.1.0.2", 8080), active=5)
    rig.proxier.on_slice(old, endpoint_slice("web", ["10.1.0.1"]))
    rig.sync()
    rig.clock.advance(61)
    rig.sync()
    assert rig.reals() == {("10.1.0.1", 8080): 1}


def test_udp_real_server_deleted_at_once_and_conntrack_cleared(rig):
    svc = service("dns", "10.96.0.53", ports=((53, "UDP"),))
    old = endpoint_slice("dns", ["10.1.0.1", "10.1.0.2"], ports=((53, "UDP"),))
    rig.proxier.on_service(None, svc)
    rig.proxier.on_slice(None, old)
    rig.sync()
    vs = VirtualServer("UDP", "10.96.0.53", 53)
    rig.fake.set_connections(vs, RealServer("10.1.0.2", 53), active=0, inactive=4)
    rig.proxier.on_slice(old, endpoint_slice("dns", ["10.1.0.1"], ports=((53, "UDP"),)))
    rig.sync()
    assert rig.reals(vs) == {("10.1.0.1", 53): 1}
    # first: the service became non-empty (stale entries to nowhere); then the removed server
    assert rig.fake.conntrack_cleared == [("UDP", "10.96.0.53", 53, None), ("UDP", "10.96.0.53", 53, "10.1.0.2")]


def test_kernel_failure_is_raised_and_next_sync_is_full(rig):
    rig.proxier.on_service(None, service("web", "10.96.0.10"))
    rig.sync()
    rig.fake.fail_next("add_real_server")
    rig.proxier.on_slice(None, endpoint_slice("web", ["10.1.0.1"]))
    with pytest.raises(KernelError):
        rig.sync()
    assert rig.sync().full
    assert rig.reals() == {("10.1.0.1", 8080): 1}


def test_shared_external_ip_stays_until_unused(rig):
    a = service("a", "10.96.0.1", externalIPs=["203.0.113.5"])
    b = service("b", "10.96.0.2", ports=((443, "TCP"),), externalIPs=["203.0.113.5"])
    rig.proxier.on_service(None, a)
    rig.proxier.on_service(None, b)
    rig.sync()
    rig.proxier.on_service(a, None)
    rig.sync()
    assert "203.0.113.5" in rig.fake.links[DUMMY_LINK]
    assert [v.key for v in rig.fake.virtual.values() if v.address == "203.0.113.5"] == [("TCP", "203.0.113.5", 443)]


def test_scheduler_and_affinity_change_updates_virtual_server(rig):
    rig = Rig(scheduler="wrr")
    svc = service("web", "10.96.0.10")
    rig.proxier.on_service(None, svc)
    rig.sync()
    sticky = service("web", "10.96.0.10", sessionAffinity="ClientIP")
    rig.proxier.on_service(svc, sticky)
    rig.sync()
    assert rig.kernel.counts["update_virtual_server"] == 1
    [vs] = rig.fake.virtual.values()
    assert (vs.scheduler, vs.persistence_timeout) == ("wrr", 10800)


def test_node_ips_from_node_object():
    rig = Rig(node_ips=())
    rig.proxier.on_service(None, service("web", "10.96.0.10", ports=((80, "TCP", 30080),), type="NodePort"))
    rig.sync()
    assert {v.address for v in rig.fake.virtual.values()} == {"10.96.0.10"}
    node = {"metadata": {"name": "node-a"},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.20"},
                                     {"type": "Hostname", "address": "node-a"}]}}
    rig.proxier.on_node(node)
    rig.sync()
    assert ("TCP", "192.168.1.20", 30080) in rig.fake.virtual


def test_restart_adopts_existing_state_without_churn(rig):
    rig.proxier.on_service(None, service("web", "10.96.0.10"))
    rig.proxier.on_slice(None, endpoint_slice("web", ["10.1.0.1"]))
    rig.sync()
    second = Proxier(rig.kernel, rig.proxier.opts, rig.clock)
    second.on_service(None, service("web", "10.96.0.10"))
    second.on_slice(None, endpoint_slice("web", ["10.1.0.1"]))
    rig.kernel.reset()
    second.sync()
    writes = {m: n for m, n in rig.kernel.counts.items() if m in (
        "add_virtual_server", "delete_virtual_server", "add_real_server", "delete_real_server",
        "add_address", "delete_address", "add_ipset_entry", "delete_ipset_entry")}
    assert writes == {}


def test_cleanup_removes_what_we_created(rig):
    rig.proxier.on_service(None, service("web", "10.96.0.10", ports=((80, "TCP", 30080),), type="NodePort"))
    rig.proxier.on_slice(None, endpoint_slice("web", ["10.1.0.1"]))
    rig.sync()
    rig.fake.add_virtual_server(VirtualServer("TCP", "172.16.0.1", 80))  # not ours
    assert rig.proxier.cleanup() == []
    assert list(rig.fake.virtual) == [("TCP", "172.16.0.1", 80)]
    assert DUMMY_LINK not in rig.fake.links
    assert not any(n.startswith("KUBE-") for n in rig.fake.ipsets)
    assert not any(c.startswith("KUBE-") for t in rig.fake.iptables.values() for c in t)
    assert not any("KUBE-" in r for t in rig.fake.iptables.values() for rules in t.values() for r in rules)


def test_metrics_and_health(rig):
    sl = endpoint_slice("web", ["10.1.0.1"], trigger="2023-11-14T22:13:00Z")
    rig.proxier.on_service(None, service("web", "10.96.0.10"))
    rig.proxier.on_slice(None, sl)
    rig.sync()
    m = rig.proxier.metrics.registry
    assert m.get_sample_value("kubeproxy_sync_proxy_rules_service_changes_total") == 1
    assert m.get_sample_value("kubeproxy_sync_proxy_rules_endpoint_changes_total") == 1
    assert m.get_sample_value("kubeproxy_network_programming_duration_seconds_count") == 1
    assert m.get_sample_value("kubeproxy_sync_proxy_rules_last_timestamp_seconds") == rig.clock.wall()
    healthy, body = rig.proxier.health.status()
    assert healthy and body["nodeEligible"] is True
    rig.proxier.on_service(None, service("other", "10.96.0.11"))
    rig.clock.advance(61)
    assert not rig.proxier.health.status()[0]
    rig.sync()
    assert rig.proxier.health.status()[0]


def test_conntrack_failure_does_not_fail_the_sync(rig):
    svc = service("dns", "10.96.0.53", ports=((53, "UDP"),))
    rig.fake.fail_next("clear_conntrack")
    rig.proxier.on_service(None, svc)
    rig.proxier.on_slice(None, endpoint_slice("dns", ["10.1.0.1"], ports=((53, "UDP"),)))
    rig.sync()
    assert rig.reals(VirtualServer("UDP", "10.96.0.53", 53)) == {("10.1.0.1", 53): 1}


def test_busy_real_server_leaving_costs_one_listing_and_one_weight_change(rig):
    old = endpoint_slice("web", ["10.1.0.1", "10.1.0.2"])
    rig.proxier.on_service(None, service("web", "10.96.0.10"))
    rig.proxier.on_slice(None, old)
    rig.sync()
    rig.fake.set_connections(CIP, RealServer("10.1.0.2", 8080), active=1)
    rig.proxier.on_slice(old, endpoint_slice("web", ["10.1.0.1", "10.1.0.3"]))
    rig.clock.advance(1)
    rig.sync()
    assert dict(rig.kernel.counts) == {"list_real_servers": 1, "update_real_server": 1, "add_real_server": 1}


def _dual_rig():
    rig = Rig.__new__(Rig)
    rig.fake, rig.fake6 = FakeKernel(), FakeKernel()
    rig.kernel = CountingKernel(rig.fake)
    rig.clock = FakeClock()
    opts = ProxierOptions(hostname="node-a", node_ips=("192.168.1.10", "fd00:1::10"), ipv6=True,
                          cluster_cidr="10.244.0.0/16,fd00:244::/48")
    rig.proxier = Proxier(rig.kernel, opts, rig.clock, ip6tables=rig.fake6.firewall)
    rig.triggers = 0
    rig.proxier.set_trigger(rig._trigger)
    return rig


def _dual_service():
    svc = service("web", "10.96.0.10", ports=((80, "TCP", 30080),), type="NodePort")
    svc["spec"]["clusterIPs"] = ["10.96.0.10", "fd00:96::10"]
    six = endpoint_slice("web", ["fd00:244::1", "fd00:244::2"], name="web-6")
    six["addressType"] = "IPv6"
    return svc, endpoint_slice("web", ["10.1.0.1"]), six


def _synced(rig, *objects):
    """``rig`` after one sync of the Service and the given slices of it."""
    svc, *slices = objects
    rig.proxier.on_service(None, svc)
    for sl in slices:
        rig.proxier.on_slice(None, sl)
    rig.sync()
    return rig


def test_dual_stack_serves_both_families_and_removes_them():
    svc, four, six = _dual_service()
    rig = _synced(_dual_rig(), svc, four, six)
    cip6, np6 = VirtualServer("TCP", "fd00:96::10", 80), VirtualServer("TCP", "fd00:1::10", 30080)
    assert rig.reals() == {("10.1.0.1", 8080): 1}
    assert rig.reals(cip6) == {("fd00:244::1", 8080): 1, ("fd00:244::2", 8080): 1}
    assert rig.reals(np6) == rig.reals(cip6)
    assert rig.fake.links[DUMMY_LINK] == {"10.96.0.10", "fd00:96::10"}
    assert IPSetEntry("fd00:96::10", "tcp", 80) in rig.fake.ipsets["KUBE-6-CLUSTER-IP"][1]
    assert rig.fake.ipsets["KUBE-6-CLUSTER-IP"][0].family == "inet6"
    assert not rig.fake.iptables["nat"].get("KUBE-SERVICES") or all(
        "KUBE-6-" not in r for r in rig.fake.iptables["nat"]["KUBE-SERVICES"])
    assert any("KUBE-6-CLUSTER-IP dst,dst ! -s fd00:244::/48" in r
               for r in rig.fake6.iptables["nat"][iptables.SERVICES])
    assert any(iptables.SERVICES in r for r in rig.fake6.iptables["nat"]["PREROUTING"])
    # an IPv6 endpoint goes: only the IPv6 virtual servers change
    rig.proxier.on_slice(six, endpoint_slice("web", ["fd00:244::2"], name="web-6") | {"addressType": "IPv6"})
    rig.sync()
    assert rig.reals(cip6) == {("fd00:244::2", 8080): 1}
    assert set(rig.kernel.counts) <= {"apply", "add_real_server", "delete_real_server", "list_real_servers"}
    # the Service goes: nothing of either family stays
    rig.proxier.on_service(svc, None)
    rig.sync()
    assert rig.fake.virtual == {}
    assert rig.fake.links[DUMMY_LINK] == set()
    assert all(not members for _, members in rig.fake.ipsets.values())


def test_dual_stack_cleanup_removes_both_families():
    svc, four, six = _dual_service()
    rig = _synced(_dual_rig(), svc, six)
    assert rig.proxier.cleanup() == []
    assert rig.fake.virtual == {} and DUMMY_LINK not in rig.fake.links
    assert not any(n.startswith("KUBE-") for n in rig.fake.ipsets)
    for k in (rig.fake, rig.fake6):
        assert not any(c.startswith("KUBE-") for t in k.iptables.values() for c in t)
        assert not any("KUBE-" in r for t in k.iptables.values() for rules in t.values() for r in rules)


def test_dual_stack_full_sync_repairs_ipv6_drift():
    svc, four, six = _dual_service()
    rig = _synced(_dual_rig(), svc, six)
    rig.fake.delete_virtual_server(VirtualServer("TCP", "fd00:96::10", 80))
    rig.fake.delete_ipset_entry("KUBE-6-CLUSTER-IP", IPSetEntry("fd00:96::10", "tcp", 80))
    rig.clock.advance(31)
    assert rig.sync().full
    assert rig.reals(VirtualServer("TCP", "fd00:96::10", 80)) == {("fd00:244::1", 8080): 1, ("fd00:244::2", 8080): 1}
    assert IPSetEntry("fd00:96::10", "tcp", 80) in rig.fake.ipsets["KUBE-6-CLUSTER-IP"][1]


def test_ipv4_only_proxier_leaves_ipv6_alone():
    rig = _synced(Rig(), *_dual_service())
    assert {v.address for v in rig.fake.virtual.values()} == {"10.96.0.10", "192.168.1.10"}
    assert not any(n.startswith("KUBE-6-") for n in rig.fake.ipsets)
    with pytest.raises(ValueError):
        Proxier(rig.kernel, ProxierOptions(hostname="n", ipv6=True))
