"""The IPVS mode's IPv6 parts that need no IPVS, on this machine's kernel:
IPv6 addresses on kube-ipvs0, the ``inet6`` ipsets with IPv6 members,
and the ip6tables rules (accepted by ``ip6tables-restore`` against those
sets, removed by the cleanup text). IPVS itself is checked in the VM
(``test_proxy_e2e.py``).

Each test runs in its own network namespace; each reads back with the tools
an operator would use (ip, ipset, ip6tables-save).
"""

from __future__ import annotations

import re

import pytest

from platformd.nodeproxy import ipsets, iptables
from platformd.nodeproxy.kernel import Exists, IPSetEntry
from platformd.nodeproxy.kernel_firewall import LinuxFirewall
from platformd.nodeproxy.kernel_linux import LinuxKernel

from .netns import sh


@pytest.fixture
def linux(ns):
    k = LinuxKernel(module_loader=lambda module: False)
    yield k
    k.close()


def test_ipv6_addresses_on_the_dummy_link_beside_ipv4(linux):
    # This kernel has no dummy links; the address calls do not care what
    # kind the link is (the VM tests use the real dummy).
    sh("ip", "link", "add", "kube-ipvs0", "type", "bridge")
    sh("ip", "link", "set", "kube-ipvs0", "up")
    linux.addresses.add_address("kube-ipvs0", "10.96.0.10")
    linux.addresses.add_address("kube-ipvs0", "fd00:96::10")
    linux.addresses.add_address("kube-ipvs0", "2001:db8::7")
    # the link's own fe80:: address is not ours and is not listed
    assert linux.addresses.list_addresses("kube-ipvs0") == {"10.96.0.10", "fd00:96::10", "2001:db8::7"}
    shown = sh("ip", "-6", "addr", "show", "kube-ipvs0")
    assert "inet6 fd00:96::10/128 scope global nodad" in shown  # usable at once, no DAD wait
    with pytest.raises(Exists):
        linux.addresses.add_address("kube-ipvs0", "fd00:96::10")
    linux.addresses.delete_address("kube-ipvs0", "fd00:96::10")
    assert linux.addresses.list_addresses("kube-ipvs0") == {"10.96.0.10", "2001:db8::7"}


def test_inet6_ipsets_take_ipv6_members(linux):
    for spec in ipsets.SPECS6:
        linux.ipset.ensure_ipset(spec)
    cluster = ipsets.for_family(ipsets.CLUSTER_IP, 6)
    loop = ipsets.for_family(ipsets.LOOP_BACK, 6)
    members = {(cluster, IPSetEntry("fd00:96::10", "tcp", 80)), (cluster, IPSetEntry("fd00:96::10", "udp", 53)),
               (loop, IPSetEntry("fd00:244::5", "tcp", 8080, "fd00:244::5")),
               (ipsets.for_family(ipsets.NODE_PORT_TCP, 6), IPSetEntry(port=30080))}
    for name, entry in members:
        linux.ipset.add_ipset_entry(name, entry)
    assert "family inet6" in sh("ipset", "list", cluster)
    assert linux.ipset.list_ipset(cluster) == {IPSetEntry("fd00:96::10", "tcp", 80), IPSetEntry("fd00:96::10", "udp", 53)}
    assert linux.ipset.list_ipset(loop) == {IPSetEntry("fd00:244::5", "tcp", 8080, "fd00:244::5")}
    linux.ipset.delete_ipset_entry(cluster, IPSetEntry("fd00:96::10", "udp", 53))
    assert linux.ipset.list_ipset(cluster) == {IPSetEntry("fd00:96::10", "tcp", 80)}


def test_ip6tables_rules_are_accepted_and_cleaned_up(ns):
    v4, v6 = LinuxKernel(), LinuxFirewall(iptables="ip6tables")
    try:
        for spec in ipsets.SPECS6:
            v4.ipset.ensure_ipset(spec)
        opts = iptables.RuleOptions(cluster_cidr="10.244.0.0/16,fd00:244::/48")
        v6.restore_iptables(iptables.render(opts, family=6))
        v6.ensure_iptables_rules([(j.table, j.chain, j.rule) for j in iptables.JUMPS])
        saved = sh("ip6tables-save")
        assert re.search(r"KUBE-SERVICES ! -s fd00:244::/48 .*--match-set KUBE-6-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ",
                         saved)
        assert "-j KUBE-SERVICES" in saved
        assert "KUBE-" not in sh("iptables-save")  # the IPv4 tables untouched
        for j in iptables.JUMPS:
            v6.delete_iptables_rule(j.table, j.chain, j.rule)
        v6.restore_iptables(iptables.render_cleanup())
        assert "KUBE-" not in sh("ip6tables-save")
    finally:
        v4.close()
