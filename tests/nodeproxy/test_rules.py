from platformd.nodeproxy import iptables, sysctls
from platformd.nodeproxy.fakekernel import FakeKernel


def test_rules_depend_on_flags_only_and_are_accepted():
    plain = iptables.render(iptables.RuleOptions())
    assert plain == iptables.render(iptables.RuleOptions())
    # without a flag only node traffic from a service address is masqueraded
    assert "--match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ" in plain
    assert "--match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ" not in plain
    assert plain.index("-j KUBE-NODE-PORT") < plain.index("--match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT")
    cidr = iptables.render(iptables.RuleOptions(cluster_cidr="10.244.0.0/16"))
    assert "--match-set KUBE-CLUSTER-IP dst,dst ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ" in cidr
    every = iptables.render(iptables.RuleOptions(masquerade_all=True))
    assert "--match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ" in every
    assert "--match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE" in every
    k = FakeKernel()
    k.restore_iptables(every)
    k.restore_iptables(iptables.render_cleanup())
    assert not any(c.startswith("KUBE-") for t in k.iptables.values() for c in t)


def test_sysctls_by_kernel_version():
    names = lambda v, arp=False: {s.name: s.value for s in sysctls.wanted(v, arp)}  # noqa: E731
    assert names((5, 4, 0))["net/ipv4/vs/conn_reuse_mode"] == "0"
    assert "net/ipv4/vs/conn_reuse_mode" not in names((5, 9, 0))
    assert "net/ipv4/vs/conn_reuse_mode" not in names((4, 0, 0))
    strict = names((6, 1, 0), True)
    assert strict["net/ipv4/conf/all/arp_ignore"] == "1" and strict["net/ipv4/conf/all/arp_announce"] == "2"
    k = FakeKernel()
    assert sysctls.apply(k, sysctls.wanted((6, 1, 0), False)) == []
    assert k.sysctls["net/ipv4/vs/conntrack"] == "1" and k.sysctls["net/ipv4/ip_forward"] == "1"
    k.calls.clear()
    sysctls.apply(k, sysctls.wanted((6, 1, 0), False))
    assert "write_sysctl" not in k.calls  # already set: only read
