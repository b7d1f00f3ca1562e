"""Kernel.apply and list_ipvs: the reference semantics (fake and dry-run
kernels) and the operation counting; plus the hand-written netlink codecs,
checked without a kernel."""

from __future__ import annotations

import io
import socket
import struct

import pytest

from platformd.nodeproxy import ipset_netlink as ipsetnl
from platformd.nodeproxy import ipvs_netlink as ipvsnl
from platformd.nodeproxy.counting import CountingKernel
from platformd.nodeproxy.dryrun import DryRunKernel
from platformd.nodeproxy.fakekernel import FakeKernel
from platformd.nodeproxy.kernel import (
    FLAG_SCHED2, AddRealServer, AddVirtualServer, DeleteRealServer, IPSetEntry, IPVSUnavailable, KernelError,
    RealServer, UpdateRealServer, VirtualServer, ops_of)
from platformd.nodeproxy.netlink import attr, nested, parse_attrs

VS = VirtualServer("TCP", "10.96.0.1", 80)
RS1 = RealServer("10.1.0.1", 8080)
RS2 = RealServer("10.1.0.2", 8080, 3)


def _names(results):
    return [type(r).__name__ if r is not None else None for r in results]


# -- apply: the semantics every kernel shares -------------------------------------


def test_apply_returns_one_result_per_op_and_applies_the_rest():
    k = FakeKernel()
    results = k.apply([
        AddVirtualServer(VS),
        AddVirtualServer(VS),
        AddRealServer(VS, RS1),
        AddRealServer(VirtualServer("TCP", "10.96.0.9", 80), RS1),
        UpdateRealServer(VS, RS2),
        AddRealServer(VS, RS2),
        DeleteRealServer(VS, RealServer("10.9.9.9", 1)),
    ])
    assert _names(results) == [None, "Exists", None, "NotFound", "NotFound", None, "NotFound"]
    assert k.snapshot() == {VS: {RS1.key: 1, RS2.key: 3}}


def test_apply_sees_injected_failures_per_method():
    k = FakeKernel()
    k.add_virtual_server(VS)
    k.fail_next("add_real_server")
    results = k.apply([AddRealServer(VS, RS1), AddRealServer(VS, RS2)])
    assert isinstance(results[0], KernelError) and results[1] is None
    assert k.snapshot() == {VS: {RS2.key: 3}}


def test_apply_raises_when_ipvs_is_missing():
    with pytest.raises(IPVSUnavailable):
        FakeKernel(ipvs=False).apply([AddVirtualServer(VS)])


def test_list_ipvs_equals_one_listing_per_virtual_server():
    k = FakeKernel()
    other = VirtualServer("UDP", "10.96.0.2", 53)
    k.apply([AddVirtualServer(VS), AddVirtualServer(other),
             AddRealServer(VS, RS1)])
    k.set_connections(VS, RS1, 2, 1)
    assert k.list_ipvs() == {vs: k.list_real_servers(vs) for vs in k.list_virtual_servers()}


def test_dry_run_prints_each_op_of_a_batch():
    out = io.StringIO()
    k = DryRunKernel(out)
    results = k.apply([AddVirtualServer(VS), AddRealServer(VS, RS1),
                       AddVirtualServer(VS)])
    assert _names(results) == [None, None, "Exists"]
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("dry-run: add_virtual_server tcp:10.96.0.1:80")
    assert lines[1] == "dry-run: add_real_server tcp:10.96.0.1:80 10.1.0.1:8080 weight=1"
    assert len(lines) == 3


def test_counting_counts_logical_ops_and_batches():
    k = CountingKernel(FakeKernel())
    k.ipvs.apply([AddVirtualServer(VS), AddRealServer(VS, RS1), AddRealServer(VS, RS2)])
    k.ipvs.list_real_servers(VS)
    assert dict(k.counts) == {"add_virtual_server": 1, "add_real_server": 2, "list_real_servers": 1}
    assert (k.writes, k.reads, k.batches, k.round_trips) == (3, 1, 2, 2)
    # time inside the kernel, per method; a mixed batch under its methods joined
    assert set(k.seconds) == {"add_real_server+add_virtual_server", "list_real_servers"}
    k.reset()
    k.ipvs.apply([])
    assert (k.batches, sum(k.counts.values()), dict(k.seconds)) == (0, 0, {})


def test_ops_of_builds_ops_equal_to_calling_the_class():
    assert ops_of(AddRealServer, [(VS, RS1), (VS, RS2)]) == [AddRealServer(VS, RS1), AddRealServer(VS, RS2)]
    assert all(type(op) is AddVirtualServer for op in ops_of(AddVirtualServer, [(VS,)]))
    assert AddRealServer(VS, RS1).rs == RS1 and AddRealServer.method == "add_real_server"


# -- codecs -------------------------------------------------------------------------


def _as_answer(payload: bytes) -> memoryview:
    """A request payload read back the way the parsers read kernel answers."""
    return memoryview(payload)


@pytest.mark.parametrize("vs", [
    VS,
    VirtualServer("UDP", "10.96.0.10", 53, scheduler="wrr"),
    VirtualServer("SCTP", "192.168.1.1", 30000, scheduler="sh", persistence_timeout=10800, flags=FLAG_SCHED2),
])
def test_service_encoding_reads_back(vs):
    assert ipvsnl.parse_service(_as_answer(ipvsnl.service(ipvsnl.CMD_NEW_SERVICE, vs))) == vs


def test_service_identity_only_for_delete():
    top = parse_attrs(ipvsnl.service(ipvsnl.CMD_DEL_SERVICE, VS), 4)
    svc = parse_attrs(top[ipvsnl.CMD_ATTR_SERVICE])
    assert set(svc) == {ipvsnl.SVC_AF, ipvsnl.SVC_PROTOCOL, ipvsnl.SVC_ADDR, ipvsnl.SVC_PORT}
    assert bytes(svc[ipvsnl.SVC_PORT]) == struct.pack("!H", 80)  # network order


def test_dest_encoding_is_masquerade_with_thresholds():
    payload = ipvsnl.dest(ipvsnl.CMD_NEW_DEST, VS, RS2)
    state = ipvsnl.parse_dest(_as_answer(payload))
    assert state.server == RS2 and state.active_connections == 0
    d = parse_attrs(parse_attrs(payload, 4)[ipvsnl.CMD_ATTR_DEST])
    assert {ipvsnl.DEST_FWD_METHOD, ipvsnl.DEST_U_THRESH, ipvsnl.DEST_L_THRESH} <= set(d)
    assert struct.unpack("=I", d[ipvsnl.DEST_FWD_METHOD])[0] == 0


def test_fwmark_services_and_ipv6_are_skipped():
    fw = ipvsnl.fwmark_service(ipvsnl.CMD_NEW_SERVICE, 7, "rr")
    assert ipvsnl.parse_service(_as_answer(fw)) is None


PROC = """IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A60000A:0050 rr 
  -> 0AF40205:1F90      Masq    3      2          1         
  -> 0AF40105:1F90      Masq    1      0          0         
UDP  0A60000A:0035 wrr 
FWM  00000007 rr 
  -> 0A000001:0000      Masq    1      0          0         
TCP  0A600014:01BB sh persistent 10800 
  -> 0AF40404:01BB      Masq    0      0          5         
"""


def test_proc_ip_vs_gives_every_real_server():
    found = ipvsnl.parse_proc_dests(PROC)
    assert set(found) == {("TCP", "10.96.0.10", 80), ("UDP", "10.96.0.10", 53), ("TCP", "10.96.0.20", 443)}
    assert [(s.server, s.active_connections, s.inactive_connections) for s in found[("TCP", "10.96.0.10", 80)]] == [
        (RealServer("10.244.2.5", 8080, 3), 2, 1), (RealServer("10.244.1.5", 8080, 1), 0, 0)]
    assert found[("UDP", "10.96.0.10", 53)] == []
    assert found[("TCP", "10.96.0.20", 443)][0].server.weight == 0


ENTRIES = [
    ("hash:ip", IPSetEntry(ip="10.96.0.10")),
    ("hash:ip,port", IPSetEntry(ip="10.96.0.10", protocol="udp", port=53)),
    ("hash:ip,port,ip", IPSetEntry(ip="10.244.1.5", protocol="tcp", port=8080, ip2="10.244.1.5")),
    ("hash:ip,port,net", IPSetEntry(ip="10.96.0.10", protocol="tcp", port=80, ip2="192.168.0.0/16")),
    ("bitmap:port", IPSetEntry(port=30080)),
]


@pytest.mark.parametrize("set_type,entry", ENTRIES, ids=[t for t, _ in ENTRIES])
def test_ipset_member_encoding_reads_back(set_type, entry):
    data = ipsetnl.member(set_type, entry)
    # A LIST answer: nfgenmsg, then ADT holding the members' DATA attributes.
    answer = struct.pack("=BBH", socket.AF_INET, 0, 0) + attr(ipsetnl.ATTR_TYPENAME, set_type.encode() + b"\0") \
        + nested(ipsetnl.ATTR_ADT, data, data)
    assert ipsetnl.parse_list([memoryview(answer)]) == (set_type, {entry})


def test_ipset_port_carries_the_network_byte_order_flag():
    data = ipsetnl.member("bitmap:port", IPSetEntry(port=30080))
    inner = data[4:]
    length, kind = struct.unpack_from("=HH", inner)
    assert kind & 0x4000 and kind & 0x3FFF == ipsetnl.ATTR_PORT
    assert inner[4:6] == struct.pack("!H", 30080)


def test_unsupported_set_type_is_refused():
    with pytest.raises(ValueError):
        ipsetnl.member("hash:mac", IPSetEntry(ip="10.0.0.1"))



# -- IPv6 (the IPVS mode's dual-stack half) -----------------------------------------

VS6 = VirtualServer("TCP", "fd00:96::a", 80)


@pytest.mark.parametrize("vs", [
    VS6,
    VirtualServer("UDP", "fd00:96::10", 53, scheduler="wrr"),
    VirtualServer("SCTP", "2001:db8::1", 30000, scheduler="sh", persistence_timeout=10800, flags=FLAG_SCHED2),
])
def test_ipv6_service_encoding_reads_back(vs):
    payload = ipvsnl.service(ipvsnl.CMD_NEW_SERVICE, vs)
    assert ipvsnl.parse_service(_as_answer(payload)) == vs
    svc = parse_attrs(parse_attrs(payload, 4)[ipvsnl.CMD_ATTR_SERVICE])
    assert struct.unpack("=H", svc[ipvsnl.SVC_AF])[0] == socket.AF_INET6
    assert bytes(svc[ipvsnl.SVC_ADDR]) == socket.inet_pton(socket.AF_INET6, vs.address)
    # For IPv6 the kernel reads NETMASK as a prefix length, 1..128, else EINVAL.
    assert struct.unpack("=I", svc[ipvsnl.SVC_NETMASK])[0] == 128


def test_ipv4_netmask_stays_a_mask_beside_ipv6():
    ipvsnl.service(ipvsnl.CMD_NEW_SERVICE, VS6)  # fills the settings cache first
    svc = parse_attrs(parse_attrs(ipvsnl.service(ipvsnl.CMD_NEW_SERVICE, VS), 4)[ipvsnl.CMD_ATTR_SERVICE])
    assert bytes(svc[ipvsnl.SVC_NETMASK]) == b"\xff\xff\xff\xff"


@pytest.mark.parametrize("cmd", [ipvsnl.CMD_NEW_DEST, ipvsnl.CMD_DEL_DEST])
def test_ipv6_dest_encoding_reads_back(cmd):
    rs = RealServer("fd00:244:1::5", 8080, 2)
    payload = ipvsnl.dest(cmd, VS6, rs)
    top = parse_attrs(payload, 4)
    assert ipvsnl.parse_service(memoryview(ipvsnl.service(ipvsnl.CMD_GET_SERVICE, VS6))) is not None
    d = parse_attrs(top[ipvsnl.CMD_ATTR_DEST])
    assert struct.unpack("=H", d[ipvsnl.DEST_ADDR_FAMILY])[0] == socket.AF_INET6
    state = ipvsnl.parse_dest(_as_answer(payload))
    assert state.server.address == rs.address and state.server.port == 8080
    if cmd == ipvsnl.CMD_NEW_DEST:
        assert state.server == rs and struct.unpack("=I", d[ipvsnl.DEST_FWD_METHOD])[0] == 0


def test_dests_mix_families_in_one_batch():
    pairs = [(VS, RS1), (VS6, RealServer("fd00:244:1::5", 8080)), (VS, RS2)]
    payloads = ipvsnl.dests(ipvsnl.CMD_NEW_DEST, pairs)
    assert [ipvsnl.parse_dest(memoryview(p)).server for p in payloads] == [rs for _, rs in pairs]


def test_kernel_dest_answer_with_the_whole_union_reads_as_ipv4():
    # The kernel sends ADDR as all 16 bytes of union nf_inet_addr, and ADDR_FAMILY.
    answer = struct.pack("=BBH", ipvsnl.CMD_NEW_DEST, 1, 0) + nested(
        ipvsnl.CMD_ATTR_DEST, attr(ipvsnl.DEST_ADDR, socket.inet_aton("10.1.0.1") + bytes(12)),
        attr(ipvsnl.DEST_PORT, struct.pack("!H", 8080)), attr(ipvsnl.DEST_WEIGHT, struct.pack("=I", 1)),
        attr(ipvsnl.DEST_ADDR_FAMILY, struct.pack("=H", socket.AF_INET)))
    assert ipvsnl.parse_dest(memoryview(answer)).server == RS1


PROC6 = """IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A60000A:0050 rr 
  -> 0AF40105:1F90      Masq    1      0          0         
TCP  [fd00:0096:0000:0000:0000:0000:0000:000a]:0050 rr 
  -> [fd00:0244:0001:0000:0000:0000:0000:0005]:1F90      Masq    2      1          0         
UDP  [fd00:0096:0000:0000:0000:0000:0000:0010]:0035 rr 
"""


def test_proc_ip_vs_reads_ipv6_services_in_canonical_form():
    found = ipvsnl.parse_proc_dests(PROC6)
    assert set(found) == {("TCP", "10.96.0.10", 80), ("TCP", "fd00:96::a", 80), ("UDP", "fd00:96::10", 53)}
    assert [(s.server, s.active_connections) for s in found[("TCP", "fd00:96::a", 80)]] == [
        (RealServer("fd00:244:1::5", 8080, 2), 1)]
    assert found[("UDP", "fd00:96::10", 53)] == []


ENTRIES6 = [
    ("hash:ip,port", IPSetEntry(ip="fd00:96::a", protocol="tcp", port=80)),
    ("hash:ip,port,ip", IPSetEntry(ip="fd00:244:1::5", protocol="tcp", port=8080, ip2="fd00:244:1::5")),
    ("hash:ip,port,net", IPSetEntry(ip="fd00:96::a", protocol="udp", port=53, ip2="fd00::/48")),
    ("hash:ip", IPSetEntry(ip="2001:db8::1")),
]


@pytest.mark.parametrize("set_type,entry", ENTRIES6, ids=[t for t, _ in ENTRIES6])
def test_ipv6_ipset_member_encoding_reads_back(set_type, entry):
    data = ipsetnl.member(set_type, entry)
    answer = struct.pack("=BBH", socket.AF_INET6, 0, 0) + attr(ipsetnl.ATTR_TYPENAME, set_type.encode() + b"\0") \
        + nested(ipsetnl.ATTR_ADT, data)
    assert ipsetnl.parse_list([memoryview(answer)]) == (set_type, {entry})
    ip = parse_attrs(parse_attrs(parse_attrs(data)[ipsetnl.ATTR_DATA])[ipsetnl.ATTR_IP])
    assert set(ip) == {ipsetnl.ATTR_IPADDR_IPV6}
