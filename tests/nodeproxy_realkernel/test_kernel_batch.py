"""The Linux subsystems' bulk path on a real kernel: ``apply`` and ``list_ipvs``.

``apply`` must mean exactly "each op called on its own" -- per-op errors,
the rest applied -- while sending many ops per netlink round trip.
Checked against ipvsadm/ipset/ip, as in test_kernel_contract.py.
"""

from __future__ import annotations

import re

from platformd.nodeproxy.kernel import (
    FLAG_SCHED2,
    Exists,
    IPSetEntry,
    IPSetSpec,
    AddAddress,
    AddIPSetEntry,
    AddRealServer,
    AddVirtualServer,
    DeleteAddress,
    DeleteIPSetEntry,
    DeleteRealServer,
    DeleteVirtualServer,
    NotFound,
    RealServer,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
)

from .netns import sh

VS = VirtualServer("TCP", "10.96.0.10", 80)
MISSING = VirtualServer("TCP", "10.96.0.99", 80)
RS1 = RealServer("10.244.1.5", 8080, weight=1)
RS2 = RealServer("10.244.2.7", 8080, weight=3)


def _kinds(results):
    return [type(r).__name__ if r is not None else None for r in results]


def test_apply_reports_errors_per_op_and_applies_the_rest(kernel):
    results = kernel.ipvs.apply([
        AddVirtualServer(VS),
        AddVirtualServer(VirtualServer("TCP", "10.96.0.10", 80, scheduler="wrr")),
        AddRealServer(VS, RS1),
        AddRealServer(MISSING, RS1),
        AddRealServer(VS, RealServer(RS1.address, RS1.port, 7)),
        UpdateRealServer(VS, RS2),
        AddRealServer(VS, RS2),
        DeleteRealServer(VS, RealServer("10.244.9.9", 80)),
        UpdateVirtualServer(MISSING),
        DeleteVirtualServer(MISSING),
    ])
    assert _kinds(results) == [None, "Exists", None, "NotFound", "Exists", "NotFound", None,
                               "NotFound", "NotFound", "NotFound"]
    assert kernel.ipvs.list_virtual_servers() == [VS]  # the failed second add changed nothing
    assert [s.server for s in kernel.ipvs.list_real_servers(VS)] == [RS1, RS2]
    listing = sh("ipvsadm", "-Ln", "-t", "10.96.0.10:80")
    assert re.search(r"-> 10\.244\.1\.5:8080\s+Masq\s+1\s", listing), listing
    assert re.search(r"-> 10\.244\.2\.7:8080\s+Masq\s+3\s", listing), listing


def test_apply_of_addresses_and_ipset_members_reports_errors_per_op(kernel):
    kernel.addresses.ensure_dummy_link("kube-ipvs0")
    kernel.ipset.ensure_ipset(IPSetSpec("KUBE-TEST", "hash:ip,port"))
    member = IPSetEntry(ip="10.96.0.10", protocol="tcp", port=80)
    addresses = kernel.addresses.apply([
        AddAddress("kube-ipvs0", "10.96.0.10"),
        AddAddress("kube-ipvs0", "10.96.0.10"),
        AddAddress("nosuch0", "10.96.0.10"),
        DeleteAddress("kube-ipvs0", "10.96.0.77"),
    ])
    members = kernel.ipset.apply([
        AddIPSetEntry("KUBE-TEST", member),
        AddIPSetEntry("KUBE-TEST", member),
        DeleteIPSetEntry("KUBE-TEST", IPSetEntry(ip="10.96.0.11", protocol="tcp", port=80)),
        AddIPSetEntry("KUBE-NOSUCH", member),
    ])
    ipvs = kernel.ipvs.apply([AddVirtualServer(VS), AddRealServer(VS, RS1)])
    assert _kinds(addresses) == [None, "Exists", "NotFound", "NotFound"]
    assert _kinds(members) == [None, "Exists", "NotFound", "NotFound"]
    assert _kinds(ipvs) == [None, None]
    assert kernel.addresses.list_addresses("kube-ipvs0") == {"10.96.0.10"}
    assert "add KUBE-TEST 10.96.0.10,tcp:80" in sh("ipset", "save", "KUBE-TEST")
    assert [s.server for s in kernel.ipvs.list_real_servers(VS)] == [RS1]


def test_a_large_batch_is_split_under_the_socket_buffer_and_fully_applied(kernel):
    kernel.ipvs.add_virtual_server(VS)
    servers = [RealServer(f"10.244.{i // 250}.{i % 250 + 1}", 8080) for i in range(3000)]
    before = kernel.round_trips
    assert kernel.ipvs.apply([AddRealServer(VS, rs) for rs in servers]) == [None] * 3000
    trips = kernel.round_trips - before
    assert 1 < trips <= 3000 // 256 + 1, trips  # chunked, yet far fewer trips than ops
    # Every op failing: each error ack must come back, none lost to a full buffer.
    again = kernel.ipvs.apply([AddRealServer(VS, rs) for rs in servers])
    assert all(isinstance(e, Exists) for e in again)
    assert len(kernel.ipvs.list_real_servers(VS)) == 3000
    assert sh("ipvsadm", "-Ln").count("Masq") == 3000
    gone = kernel.ipvs.apply([DeleteRealServer(VS, rs) for rs in servers[::2]])
    assert gone == [None] * 1500
    assert len(kernel.ipvs.list_real_servers(VS)) == 1500


def test_the_single_calls_raise_what_apply_returns(kernel):
    [error] = kernel.ipvs.apply([AddRealServer(MISSING, RS1)])
    assert isinstance(error, NotFound)
    kernel.ipvs.add_virtual_server(VS)
    [error] = kernel.ipvs.apply([AddVirtualServer(VS)])
    assert isinstance(error, Exists) and "10.96.0.10" in str(error)


def test_list_ipvs_reads_services_and_real_servers_in_bulk(kernel):
    sticky = VirtualServer("TCP", "10.96.0.20", 443, scheduler="sh", persistence_timeout=10800,
                           flags=FLAG_SCHED2)
    udp = VirtualServer("UDP", "10.96.0.10", 53, scheduler="wrr")
    empty = VirtualServer("TCP", "10.96.0.30", 8080)
    ops = [AddVirtualServer(vs) for vs in (VS, sticky, udp, empty)]
    ops += [AddRealServer(VS, RS1), AddRealServer(VS, RS2),
            AddRealServer(udp, RealServer("10.244.3.3", 53, 0)),
            AddRealServer(sticky, RealServer("10.244.4.4", 443, 65535))]
    assert kernel.ipvs.apply(ops) == [None] * len(ops)
    sh("ipvsadm", "-A", "-f", "7", "-s", "rr")  # firewall-mark services are not ours to model
    bulk = kernel.ipvs.list_ipvs()
    one_by_one = {vs: kernel.ipvs.list_real_servers(vs) for vs in kernel.ipvs.list_virtual_servers()}
    assert bulk == one_by_one
    assert set(bulk) == {VS, sticky, udp, empty}
    assert bulk[empty] == []
