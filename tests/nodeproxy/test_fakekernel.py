import pytest

from platformd.nodeproxy.fakekernel import FakeKernel
from platformd.nodeproxy.kernel import (
    Exists, IPSetEntry, IPSetSpec, IPVSUnavailable, KernelError, NotFound, RealServer, VirtualServer)

VS = VirtualServer("TCP", "10.96.0.1", 80)
RS = RealServer("10.1.0.1", 8080)


def test_ipvs_semantics():
    k = FakeKernel()
    k.add_virtual_server(VS)
    with pytest.raises(Exists):
        k.add_virtual_server(VS)
    k.add_real_server(VS, RS)
    with pytest.raises(Exists):
        k.add_real_server(VS, RS)
    k.set_connections(VS, RS, 3, 2)
    k.update_real_server(VS, RealServer("10.1.0.1", 8080, 0))
    [st] = k.list_real_servers(VS)
    assert (st.server.weight, st.active_connections, st.inactive_connections) == (0, 3, 2)
    k.delete_virtual_server(VS)
    with pytest.raises(NotFound):
        k.list_real_servers(VS)
    with pytest.raises(NotFound):
        k.add_real_server(VS, RS)


def test_without_ipvs():
    k = FakeKernel(ipvs=False)
    with pytest.raises(IPVSUnavailable) as exc:
        k.probe()
    assert exc.value.module == "ip_vs"
    with pytest.raises(NotFound):
        k.read_sysctl("net/ipv4/vs/conntrack")


def test_links_ipsets_and_iptables():
    k = FakeKernel()
    with pytest.raises(NotFound):
        k.add_address("kube-ipvs0", "10.0.0.1")
    k.ensure_dummy_link("kube-ipvs0")
    k.add_address("kube-ipvs0", "10.0.0.1")
    with pytest.raises(Exists):
        k.add_address("kube-ipvs0", "10.0.0.1")
    k.ensure_ipset(IPSetSpec("S", "hash:ip,port"))
    k.add_ipset_entry("S", IPSetEntry("10.0.0.1", "tcp", 80))
    k.ensure_ipset(IPSetSpec("S", "hash:ip,port"))  # kept
    assert k.list_ipset("S") == {IPSetEntry.parse("10.0.0.1,tcp:80")}
    with pytest.raises(KernelError):
        k.ensure_ipset(IPSetSpec("S", "bitmap:port"))
    k.restore_iptables("*nat\n:KUBE-X - [0:0]\n-A KUBE-X -m set --match-set S dst,dst -j RETURN\nCOMMIT\n")
    with pytest.raises(KernelError):
        k.destroy_ipset("S")  # in use
    with pytest.raises(KernelError):
        k.restore_iptables("*nat\n-A KUBE-NOPE -j RETURN\nCOMMIT\n")
    assert k.iptables["nat"]["KUBE-X"]  # a rejected restore changes nothing
