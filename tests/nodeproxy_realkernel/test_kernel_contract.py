"""LinuxKernel against a real kernel: the contract of kernel.Kernel.

Each test runs in its own network namespace (IPVS, ipsets, iptables,
conntrack and /proc/sys/net are per namespace), and checks what the adapter
did with the tools an operator would use (ipvsadm, ipset, iptables-save), so
a wrong reading in the adapter cannot hide a wrong write.
"""

from __future__ import annotations

import errno
import os
import re
import socket

import pytest

from platformd.nodeproxy.kernel import (
    FLAG_SCHED2,
    Exists,
    IPSetEntry,
    IPSetSpec,
    IPVSUnavailable,
    Kernel,
    KernelError,
    NotFound,
    RealServer,
    VirtualServer,
)
from platformd.nodeproxy.kernel_linux import LinuxKernel, modprobe

from tests.helpers.waiting import wait_for

from . import netns
from .netns import sh

VS = VirtualServer("TCP", "10.96.0.10", 80)
VS_UDP = VirtualServer("UDP", "10.96.0.10", 53, scheduler="wrr")
RS1 = RealServer("10.244.1.5", 8080, weight=1)
RS2 = RealServer("10.244.2.7", 8080, weight=3)


# -- availability ------------------------------------------------------------------


def _loaded(module: str) -> bool:
    return os.path.exists(f"/sys/module/{module}")


def test_probe_loads_ip_vs_and_dummy_with_modprobe():
    # Earlier tests (test_kernel_batch.py) loaded these; the kernel tears their
    # namespaces down (and with them the dummy links and IPVS services that
    # hold the modules) asynchronously, so unloading may take a few tries.
    def unloaded() -> bool:
        sh("modprobe", "-r", "-q", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "ip_vs", "dummy", check=False)
        return not (_loaded("ip_vs") or _loaded("dummy"))

    try:
        wait_for(unloaded, timeout=15, interval=0.5)
    except AssertionError:
        pytest.skip("ip_vs or dummy is loaded and in use")
    attempted = []

    def recording(module: str) -> bool:
        attempted.append(module)
        return modprobe(module)

    with netns.isolated():
        kernel = LinuxKernel(module_loader=recording)
        kernel.probe(("rr", "wrr"))
        kernel.close()
    assert attempted[:2] == ["ip_vs", "dummy"]
    assert _loaded("ip_vs") and _loaded("dummy") and _loaded("ip_vs_wrr")


def test_probe_names_a_missing_scheduler(kernel):
    with pytest.raises(IPVSUnavailable) as caught:
        kernel.probe(("rr", "nosuch"))
    assert caught.value.module == "ip_vs_nosuch"
    assert kernel.ipvs.list_virtual_servers() == []  # the probe service is gone


def test_is_a_kernel_and_knows_its_version(kernel):
    assert isinstance(kernel, Kernel)
    assert kernel.kernel_version() == tuple(int(x) for x in os.uname().release.split("-")[0].split("."))


# -- IPVS virtual servers -----------------------------------------------------------


def test_virtual_servers_round_trip(kernel):
    sticky = VirtualServer("TCP", "10.96.0.20", 443, scheduler="sh", persistence_timeout=10800,
                           flags=FLAG_SCHED2)
    for vs in (VS, VS_UDP, sticky):
        kernel.ipvs.add_virtual_server(vs)
    assert sorted(kernel.ipvs.list_virtual_servers()) == sorted([VS, VS_UDP, sticky])

    listing = sh("ipvsadm", "-Ln")
    assert "TCP  10.96.0.10:80 rr" in listing
    assert "UDP  10.96.0.10:53 wrr" in listing
    assert "TCP  10.96.0.20:443 sh (sh-port) persistent 10800" in listing


def test_adding_an_existing_virtual_server_raises_exists(kernel):
    kernel.ipvs.add_virtual_server(VS)
    with pytest.raises(Exists):
        kernel.ipvs.add_virtual_server(VirtualServer("TCP", "10.96.0.10", 80, scheduler="wrr"))


def test_update_changes_scheduler_and_persistence_and_keeps_real_servers(kernel):
    kernel.ipvs.add_virtual_server(VS)
    kernel.ipvs.add_real_server(VS, RS1)
    changed = VirtualServer("TCP", "10.96.0.10", 80, scheduler="wrr", persistence_timeout=60)
    kernel.ipvs.update_virtual_server(changed)
    assert kernel.ipvs.list_virtual_servers() == [changed]
    assert [s.server for s in kernel.ipvs.list_real_servers(VS)] == [RS1]

    back = VirtualServer("TCP", "10.96.0.10", 80, scheduler="rr")
    kernel.ipvs.update_virtual_server(back)
    assert kernel.ipvs.list_virtual_servers() == [back]
    assert "persistent" not in sh("ipvsadm", "-Ln")


def test_missing_virtual_server_raises_not_found(kernel):
    with pytest.raises(NotFound):
        kernel.ipvs.update_virtual_server(VS)
    with pytest.raises(NotFound):
        kernel.ipvs.delete_virtual_server(VS)
    with pytest.raises(NotFound):
        kernel.ipvs.list_real_servers(VS)
    with pytest.raises(NotFound):
        kernel.ipvs.add_real_server(VS, RS1)


def test_delete_virtual_server_drops_its_real_servers(kernel):
    kernel.ipvs.add_virtual_server(VS)
    kernel.ipvs.add_real_server(VS, RS1)
    kernel.ipvs.delete_virtual_server(VS)
    assert kernel.ipvs.list_virtual_servers() == []
    kernel.ipvs.add_virtual_server(VS)
    assert kernel.ipvs.list_real_servers(VS) == []


def test_virtual_servers_made_by_others_are_listed(kernel):
    sh("ipvsadm", "-A", "-t", "10.96.0.30:8080", "-s", "lc")
    assert kernel.ipvs.list_virtual_servers() == [VirtualServer("TCP", "10.96.0.30", 8080, scheduler="lc")]


# -- IPVS real servers ----------------------------------------------------------------


def test_real_servers_masquerade_with_their_weights(kernel):
    kernel.ipvs.add_virtual_server(VS)
    kernel.ipvs.add_real_server(VS, RS1)
    kernel.ipvs.add_real_server(VS, RS2)
    states = kernel.ipvs.list_real_servers(VS)
    assert [s.server for s in states] == [RS1, RS2]
    assert all(s.active_connections == 0 and s.inactive_connections == 0 for s in states)
    listing = sh("ipvsadm", "-Ln", "-t", "10.96.0.10:80")
    assert re.search(r"-> 10\.244\.1\.5:8080\s+Masq\s+1\s", listing), listing
    assert re.search(r"-> 10\.244\.2\.7:8080\s+Masq\s+3\s", listing), listing


def test_adding_an_existing_real_server_raises_exists(kernel):
    kernel.ipvs.add_virtual_server(VS)
    kernel.ipvs.add_real_server(VS, RS1)
    with pytest.raises(Exists):
        kernel.ipvs.add_real_server(VS, RealServer(RS1.address, RS1.port, weight=5))


def test_update_real_server_sets_the_weight_and_keeps_it(kernel):
    # pyroute2's "update" would delete the destination instead.
    kernel.ipvs.add_virtual_server(VS)
    kernel.ipvs.add_real_server(VS, RS1)
    kernel.ipvs.update_real_server(VS, RealServer(RS1.address, RS1.port, weight=0))
    assert [s.server for s in kernel.ipvs.list_real_servers(VS)] == [RealServer(RS1.address, RS1.port, 0)]
    assert re.search(r"Masq\s+0\s", sh("ipvsadm", "-Ln"))


def test_missing_real_server_raises_not_found(kernel):
    kernel.ipvs.add_virtual_server(VS)
    with pytest.raises(NotFound):
        kernel.ipvs.update_real_server(VS, RS1)
    with pytest.raises(NotFound):
        kernel.ipvs.delete_real_server(VS, RS1)
    kernel.ipvs.add_real_server(VS, RS1)
    kernel.ipvs.delete_real_server(VS, RS1)
    assert kernel.ipvs.list_real_servers(VS) == []


def test_ipvs_timeouts(kernel):
    kernel.ipvs.set_ipvs_timeouts(900, 120, 300)
    assert "900 120 300" in sh("ipvsadm", "-L", "--timeout")
    kernel.ipvs.set_ipvs_timeouts(0, 0, 60)
    assert "900 120 60" in sh("ipvsadm", "-L", "--timeout")


# -- the dummy link and its addresses -------------------------------------------------


def test_dummy_link_is_created_once_and_up(kernel):
    kernel.addresses.ensure_dummy_link("kube-ipvs0")
    kernel.addresses.ensure_dummy_link("kube-ipvs0")
    shown = sh("ip", "-d", "link", "show", "kube-ipvs0")
    assert "dummy" in shown and ",UP" in shown
    kernel.addresses.delete_link("kube-ipvs0")
    with pytest.raises(NotFound):
        kernel.addresses.delete_link("kube-ipvs0")


def test_addresses_on_the_dummy_link(kernel):
    kernel.addresses.ensure_dummy_link("kube-ipvs0")
    kernel.addresses.add_address("kube-ipvs0", "10.96.0.10")
    kernel.addresses.add_address("kube-ipvs0", "10.96.0.11")
    assert kernel.addresses.list_addresses("kube-ipvs0") == {"10.96.0.10", "10.96.0.11"}
    assert "inet 10.96.0.10/32" in sh("ip", "addr", "show", "kube-ipvs0")
    with pytest.raises(Exists):
        kernel.addresses.add_address("kube-ipvs0", "10.96.0.10")
    kernel.addresses.delete_address("kube-ipvs0", "10.96.0.10")
    assert kernel.addresses.list_addresses("kube-ipvs0") == {"10.96.0.11"}
    with pytest.raises(NotFound):
        kernel.addresses.delete_address("kube-ipvs0", "10.96.0.10")


def test_addresses_of_a_missing_link_raise_not_found(kernel):
    for call in (lambda: kernel.addresses.list_addresses("nosuch0"), lambda: kernel.addresses.add_address("nosuch0", "10.0.0.1")):
        with pytest.raises(NotFound):
            call()


# -- ipsets -----------------------------------------------------------------------------

SETS = [
    ("hash:ip", [IPSetEntry(ip="10.96.0.10")]),
    ("hash:ip,port", [IPSetEntry(ip="10.96.0.10", protocol="tcp", port=80),
                      IPSetEntry(ip="10.96.0.10", protocol="udp", port=53)]),
    ("hash:ip,port,ip", [IPSetEntry(ip="10.244.1.5", protocol="tcp", port=8080, ip2="10.244.1.5")]),
    ("hash:ip,port,net", [IPSetEntry(ip="10.96.0.10", protocol="tcp", port=80, ip2="192.168.0.0/16")]),
    ("bitmap:port", [IPSetEntry(port=30080), IPSetEntry(port=30081)]),
]


@pytest.mark.parametrize("set_type,entries", SETS, ids=[t for t, _ in SETS])
def test_ipset_members_round_trip(kernel, set_type, entries):
    spec = IPSetSpec("KUBE-TEST", set_type, comment="test set", port_range=(30000, 32767))
    kernel.ipset.ensure_ipset(spec)
    for entry in entries:
        kernel.ipset.add_ipset_entry("KUBE-TEST", entry)
    assert kernel.ipset.list_ipset("KUBE-TEST") == set(entries)
    saved = sh("ipset", "save", "KUBE-TEST")
    assert f"create KUBE-TEST {set_type}" in saved
    for entry in entries:
        assert f"add KUBE-TEST {entry}" in saved
    with pytest.raises(Exists):
        kernel.ipset.add_ipset_entry("KUBE-TEST", entries[0])
    kernel.ipset.delete_ipset_entry("KUBE-TEST", entries[0])
    assert kernel.ipset.list_ipset("KUBE-TEST") == set(entries[1:])
    with pytest.raises(NotFound):
        kernel.ipset.delete_ipset_entry("KUBE-TEST", entries[0])


def test_ensure_ipset_keeps_members_and_rejects_another_type(kernel):
    spec = IPSetSpec("KUBE-CLUSTER-IP", "hash:ip,port")
    kernel.ipset.ensure_ipset(spec)
    member = IPSetEntry(ip="10.96.0.10", protocol="tcp", port=80)
    kernel.ipset.add_ipset_entry("KUBE-CLUSTER-IP", member)
    kernel.ipset.ensure_ipset(spec)
    assert kernel.ipset.list_ipset("KUBE-CLUSTER-IP") == {member}
    with pytest.raises(KernelError):
        kernel.ipset.ensure_ipset(IPSetSpec("KUBE-CLUSTER-IP", "hash:ip"))


def test_flush_and_destroy_ipset(kernel):
    kernel.ipset.ensure_ipset(IPSetSpec("KUBE-TEST", "hash:ip"))
    kernel.ipset.add_ipset_entry("KUBE-TEST", IPSetEntry(ip="10.0.0.1"))
    kernel.ipset.flush_ipset("KUBE-TEST")
    assert kernel.ipset.list_ipset("KUBE-TEST") == set()
    kernel.ipset.destroy_ipset("KUBE-TEST")
    for call in (kernel.ipset.list_ipset, kernel.ipset.flush_ipset, kernel.ipset.destroy_ipset):
        with pytest.raises(NotFound):
            call("KUBE-TEST")
    with pytest.raises(NotFound):
        kernel.ipset.add_ipset_entry("KUBE-TEST", IPSetEntry(ip="10.0.0.1"))


def test_destroying_a_set_in_use_raises_ebusy(kernel):
    kernel.ipset.ensure_ipset(IPSetSpec("KUBE-TEST", "hash:ip"))
    sh("iptables", "-t", "filter", "-A", "INPUT", "-m", "set", "--match-set", "KUBE-TEST", "dst", "-j", "ACCEPT")
    with pytest.raises(KernelError) as caught:
        kernel.ipset.destroy_ipset("KUBE-TEST")
    assert caught.value.errno == errno.EBUSY


# -- iptables ---------------------------------------------------------------------------

RULES = """*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
-A KUBE-SERVICES -d 10.96.0.0/12 -j RETURN
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
COMMIT
"""


def test_restore_iptables_creates_our_chains_and_leaves_others(kernel):
    sh("iptables", "-t", "nat", "-N", "OTHER")
    sh("iptables", "-t", "nat", "-A", "OTHER", "-j", "RETURN")
    kernel.firewall.restore_iptables(RULES)
    kernel.firewall.restore_iptables(RULES)  # declared chains are flushed, not appended to
    saved = sh("iptables-save", "-t", "nat")
    assert saved.count("-A KUBE-SERVICES -d 10.96.0.0/12 -j RETURN") == 1
    assert "-A OTHER -j RETURN" in saved
    kernel.firewall.restore_iptables("*nat\n-X KUBE-POSTROUTING\nCOMMIT\n")
    assert "KUBE-POSTROUTING" not in sh("iptables-save", "-t", "nat")


def test_rejected_iptables_text_changes_nothing(kernel):
    kernel.firewall.restore_iptables(RULES)
    before = sh("iptables-save", "-t", "nat")
    bad = RULES.replace("-j RETURN", "-j KUBE-NOSUCHCHAIN")
    with pytest.raises(KernelError, match="iptables-restore"):
        kernel.firewall.restore_iptables(bad)
    after = sh("iptables-save", "-t", "nat")
    strip = lambda text: [l for l in text.splitlines() if not l.startswith("#")]  # noqa: E731
    assert strip(after) == strip(before)


def test_ensure_and_delete_one_iptables_rule(kernel):
    rule = ("-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES")
    kernel.firewall.restore_iptables(RULES)
    assert kernel.firewall.ensure_iptables_rule("nat", "OUTPUT", rule) is True
    assert kernel.firewall.ensure_iptables_rule("nat", "OUTPUT", rule) is False
    assert sh("iptables-save", "-t", "nat").count("-j KUBE-SERVICES") == 1
    kernel.firewall.delete_iptables_rule("nat", "OUTPUT", rule)
    with pytest.raises(NotFound):
        kernel.firewall.delete_iptables_rule("nat", "OUTPUT", rule)
    with pytest.raises(NotFound):
        kernel.firewall.ensure_iptables_rule("nat", "NOSUCHCHAIN", rule)


def test_ensure_iptables_rules_reads_the_rules_once_and_inserts_only_the_missing(kernel):
    rule = ("-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES")
    kernel.firewall.restore_iptables(RULES)
    # A jump to the same target spelled otherwise is not ours: ours is added too.
    sh("iptables", "-t", "nat", "-A", "PREROUTING", "-j", "KUBE-SERVICES")
    rules = [("nat", "OUTPUT", rule), ("nat", "PREROUTING", rule)]
    assert kernel.firewall.ensure_iptables_rules(rules) == [True, True]
    before = kernel.round_trips
    assert kernel.firewall.ensure_iptables_rules(rules) == [False, False]
    assert kernel.round_trips - before == 1  # one iptables-save, no probe per rule
    saved = sh("iptables-save", "-t", "nat")
    assert saved.count('-m comment --comment "kubernetes service portals" -j KUBE-SERVICES') == 2
    assert "-A PREROUTING -j KUBE-SERVICES" in saved
    with pytest.raises(NotFound):
        kernel.firewall.ensure_iptables_rules([("nat", "NOSUCHCHAIN", rule)])


# -- sysctl and conntrack -----------------------------------------------------------------


def test_sysctls(kernel):
    kernel.sysctl.write_sysctl("net/ipv4/vs/conntrack", "1")
    assert kernel.sysctl.read_sysctl("net/ipv4/vs/conntrack") == "1"
    assert sh("sysctl", "-n", "net.ipv4.vs.conntrack").strip() == "1"
    with pytest.raises(NotFound):
        kernel.sysctl.read_sysctl("net/ipv4/vs/nosuch")
    with pytest.raises(NotFound):
        kernel.sysctl.write_sysctl("net/ipv4/vs/nosuch", "1")


def test_clear_conntrack_deletes_udp_flows_to_one_destination(kernel):
    # A rule using conntrack makes the namespace track its flows.
    sh("iptables", "-A", "OUTPUT", "-m", "conntrack", "--ctstate", "NEW", "-j", "ACCEPT")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for port in (5353, 5354):
            s.sendto(b"x", ("127.0.0.1", port))
    assert "dport=5353" in sh("conntrack", "-L", "-p", "udp")
    assert kernel.firewall.clear_conntrack("UDP", "127.0.0.1", 5353) == 1
    assert kernel.firewall.clear_conntrack("UDP", "127.0.0.1", 5353) == 0
    remaining = sh("conntrack", "-L", "-p", "udp")
    assert "dport=5353" not in remaining and "dport=5354" in remaining
    assert kernel.firewall.clear_conntrack("UDP", "127.0.0.1", 5354, real_address="127.0.0.2") == 0
    assert kernel.firewall.clear_conntrack("UDP", "127.0.0.1", 5354, real_address="127.0.0.1") == 1
