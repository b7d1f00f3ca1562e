"""IPVS generic netlink messages, encoded and decoded by hand.

Why not pyroute2: see :mod:`.netlink` (its per-call cost; 40 ms per
operation under the VM's emulation against a few microseconds in the kernel).
This module only builds and parses message payloads; :class:`.netlink.NetlinkSocket`
sends them in batches.

Numbers, from ``include/uapi/linux/ip_vs.h`` (Linux 6.1; stable ABI) and the
attribute policies in ``net/netfilter/ipvs/ip_vs_ctl.c``:

==============================  ==  =====================================
command                         id
==============================  ==  =====================================
IPVS_CMD_NEW/SET/DEL_SERVICE    1/2/3
IPVS_CMD_GET_SERVICE            4   (dump: every service)
IPVS_CMD_NEW/SET/DEL_DEST       5/6/7
IPVS_CMD_GET_DEST               8   (dump only, for one service)
IPVS_CMD_SET_CONFIG             12
==============================  ==  =====================================

``IPVS_CMD_ATTR_``: SERVICE 1 (nested), DEST 2 (nested), TIMEOUT_TCP 4,
TIMEOUT_TCP_FIN 5, TIMEOUT_UDP 6 (u32 seconds).

``IPVS_SVC_ATTR_``: AF 1 (u16), PROTOCOL 2 (u16), ADDR 3 (binary, up to 16
bytes of ``union nf_inet_addr``; 4 for IPv4, 16 for IPv6), PORT 4 (be16),
FWMARK 5 (u32), SCHED_NAME 6 (NUL-terminated), FLAGS 7 (``struct ip_vs_flags``:
u32 flags, u32 mask), TIMEOUT 8 (u32 seconds), NETMASK 9 (be32; for IPv6 the
kernel reads it as a prefix length in host order, 1..128, else EINVAL). NEW/SET
need the "full" set: SCHED_NAME, FLAGS, TIMEOUT and NETMASK, else EINVAL.

``IPVS_DEST_ATTR_``: ADDR 1 (binary), PORT 2 (be16), FWD_METHOD 3 (u32;
0 = masquerade), WEIGHT 4 (u32), U_THRESH 5, L_THRESH 6 (u32), ACTIVE_CONNS 7,
INACT_CONNS 8 (u32), ADDR_FAMILY 11 (u16; when absent the service's family).
NEW/SET need FWD_METHOD, WEIGHT, U_THRESH and L_THRESH. Answers carry ADDR as
the whole 16-byte union and ADDR_FAMILY, so a dest is read without its service.

IPv6 services and dests are the same messages with AF_INET6 and 16-byte
addresses (the IPVS mode's dual-stack half, as kube-proxy's IPVS mode does it).

Kernel answers worth knowing: a missing service is ESRCH for SET/DEL
service and for any DEST command, a missing dest is ENOENT, an existing one
EEXIST; an unknown scheduler is ENOENT; a GET_DEST dump of a missing service
is empty, not an error.
"""

from __future__ import annotations

import functools
import socket
import struct
from typing import Iterable

from .kernel import PROTOCOL_NUMBERS, RealServer, RealServerState, VirtualServer
from .netlink import (
    NLA_F_NESTED,
    asciiz,
    attr,
    get_be16,
    get_str,
    get_u16,
    get_u32,
    nested,
    parse_attrs,
    u16,
    u32,
)

FAMILY = "IPVS"
GENL_VERSION = 1

CMD_NEW_SERVICE, CMD_SET_SERVICE, CMD_DEL_SERVICE, CMD_GET_SERVICE = 1, 2, 3, 4
CMD_NEW_DEST, CMD_SET_DEST, CMD_DEL_DEST, CMD_GET_DEST = 5, 6, 7, 8
CMD_SET_CONFIG = 12

CMD_ATTR_SERVICE, CMD_ATTR_DEST = 1, 2
CMD_ATTR_TIMEOUT_TCP, CMD_ATTR_TIMEOUT_TCP_FIN, CMD_ATTR_TIMEOUT_UDP = 4, 5, 6

SVC_AF, SVC_PROTOCOL, SVC_ADDR, SVC_PORT, SVC_FWMARK = 1, 2, 3, 4, 5
SVC_SCHED_NAME, SVC_FLAGS, SVC_TIMEOUT, SVC_NETMASK = 6, 7, 8, 9

DEST_ADDR, DEST_PORT, DEST_FWD_METHOD, DEST_WEIGHT = 1, 2, 3, 4
DEST_U_THRESH, DEST_L_THRESH, DEST_ACTIVE_CONNS, DEST_INACT_CONNS = 5, 6, 7, 8
DEST_ADDR_FAMILY = 11

SVC_F_PERSISTENT = 0x0001
SVC_F_HASHED = 0x0002  # set by the kernel on every service; never ours to compare
CONN_F_MASQ = 0

_PROTOCOL_NAMES = {number: name for name, number in PROTOCOL_NUMBERS.items()}


def _genl(cmd: int, *attrs: bytes) -> bytes:
    return struct.pack("=BBH", cmd, GENL_VERSION, 0) + b"".join(attrs)


_GENL = {cmd: _genl(cmd) for cmd in range(1, 18)}


def service(cmd: int, vs: VirtualServer) -> bytes:
    """NEW/SET (full attributes) or DEL/GET (identity only) of one service."""
    ident = _service_nest(vs.protocol, vs.address, vs.port)
    if cmd not in (CMD_NEW_SERVICE, CMD_SET_SERVICE):
        return _GENL[cmd] + ident
    settings = _service_settings(vs.scheduler, vs.persistence_timeout, vs.flags, ":" in vs.address)
    # The identity nest with the settings appended inside it: a new nest header.
    return (_GENL[cmd] + _NESTED_SERVICE.pack(len(ident) + len(settings), CMD_ATTR_SERVICE | NLA_F_NESTED)
            + ident[4:] + settings)


# NETMASK: a /32 mask for IPv4; for IPv6 the prefix length 128, native order
# (the kernel casts the be32 attribute to a plain u32 and checks 1..128).
_NETMASK = {False: attr(SVC_NETMASK, b"\xff\xff\xff\xff"), True: u32(SVC_NETMASK, 128)}


@functools.lru_cache(maxsize=256)
def _service_settings(scheduler: str, persistence_timeout: int, flags: int, ipv6: bool = False) -> bytes:
    """SCHED_NAME, FLAGS, TIMEOUT, NETMASK: the same for most services, so cached."""
    flags |= SVC_F_PERSISTENT if persistence_timeout > 0 else 0
    return (asciiz(SVC_SCHED_NAME, scheduler) + attr(SVC_FLAGS, struct.pack("=II", flags, 0xFFFF_FFFF))
            + u32(SVC_TIMEOUT, persistence_timeout) + _NETMASK[ipv6])


def fwmark_service(cmd: int, fwmark: int, scheduler: str) -> bytes:
    """A firewall-mark service (the scheduler probe)."""
    parts = [u16(SVC_AF, socket.AF_INET), u32(SVC_FWMARK, fwmark)]
    if cmd == CMD_NEW_SERVICE:
        parts += [asciiz(SVC_SCHED_NAME, scheduler), attr(SVC_FLAGS, struct.pack("=II", 0, 0xFFFF_FFFF)),
                  u32(SVC_TIMEOUT, 0), attr(SVC_NETMASK, b"\xff\xff\xff\xff")]
    return _genl(cmd, nested(CMD_ATTR_SERVICE, *parts))


# The messages sent by the thousand are packed in one go: under the test VM's
# emulation every Python call counts (attribute-by-attribute encoding took
# ~30 us per message on the host, ~20 times that in the VM).
_NESTED_SERVICE = struct.Struct("=HH")
_SERVICE_ID = struct.Struct("=HH" "HHH2x" "HHH2x" "HH4s" "HH2s2x")
_SERVICE_ID6 = struct.Struct("=HH" "HHH2x" "HHH2x" "HH16s" "HH2s2x")
_DEST_ID = struct.Struct("=HH" "HH4s" "HH2s2x")
# IPv6 dests also name their family: the kernel would take the service's,
# but a dest read back (or printed) on its own should say what it is.
_DEST_ID6 = struct.Struct("=HH" "HH16s" "HH2s2x" "HHH2x")
_DEST_SETTINGS = struct.Struct("=HHI" "HHI" "HHI" "HHI")
_DEST_FULL = struct.Struct(_DEST_ID.format + _DEST_SETTINGS.format[1:])  # the nest's full length


@functools.lru_cache(maxsize=65536)
def _service_nest(protocol: str, address: str, port: int) -> bytes:
    """CMD_ATTR_SERVICE with the identity attributes (AF, PROTOCOL, ADDR, PORT)."""
    if ":" in address:
        return _SERVICE_ID6.pack(_SERVICE_ID6.size, CMD_ATTR_SERVICE | NLA_F_NESTED,
                                 6, SVC_AF, socket.AF_INET6, 6, SVC_PROTOCOL, PROTOCOL_NUMBERS[protocol],
                                 20, SVC_ADDR, socket.inet_pton(socket.AF_INET6, address),
                                 6, SVC_PORT, port.to_bytes(2, "big"))
    return _SERVICE_ID.pack(_SERVICE_ID.size, CMD_ATTR_SERVICE | NLA_F_NESTED,
                            6, SVC_AF, socket.AF_INET, 6, SVC_PROTOCOL, PROTOCOL_NUMBERS[protocol],
                            8, SVC_ADDR, socket.inet_aton(address), 6, SVC_PORT, port.to_bytes(2, "big"))


def dest(cmd: int, vs: VirtualServer, rs: RealServer) -> bytes:
    """NEW/SET (masquerade, weight, no thresholds) or DEL of one real server."""
    return dests(cmd, ((vs, rs),))[0]


def dests(cmd: int, pairs: Iterable[tuple[VirtualServer, RealServer]]) -> list[bytes]:
    """:func:`dest` of each ``(vs, rs)``: the encoding of a sync's tens of
    thousands of real servers, in one loop with what they share built once
    (the service part per virtual server, the settings per weight)."""
    full = cmd in (CMD_NEW_DEST, CMD_SET_DEST)
    size = _DEST_FULL.size if full else _DEST_ID.size
    pack, aton, nest = _DEST_ID.pack, socket.inet_aton, CMD_ATTR_DEST | NLA_F_NESTED
    payloads = []
    last: VirtualServer | None = None
    head = b""
    for vs, (address, port, weight) in pairs:
        if vs is not last:
            head, last = _dest_head(cmd, vs[0], vs[1], vs[2]), vs  # (protocol, address, port): vs.key
        if ":" in address:
            ident = _dest_id6(address, port, full)
        else:
            ident = pack(size, nest, 8, DEST_ADDR, aton(address), 6, DEST_PORT, port.to_bytes(2, "big"))
        payloads.append(head + ident + _dest_settings(weight) if full else head + ident)
    return payloads


def _dest_id6(address: str, port: int, full: bool) -> bytes:
    """The dest nest's header and identity (ADDR, PORT, ADDR_FAMILY) of an IPv6 real server."""
    size = _DEST_ID6.size + (_DEST_SETTINGS.size if full else 0)
    return _DEST_ID6.pack(size, CMD_ATTR_DEST | NLA_F_NESTED, 20, DEST_ADDR,
                          socket.inet_pton(socket.AF_INET6, address), 6, DEST_PORT, port.to_bytes(2, "big"),
                          6, DEST_ADDR_FAMILY, socket.AF_INET6)


@functools.lru_cache(maxsize=65536)
def _dest_head(cmd: int, protocol: str, address: str, port: int) -> bytes:
    """The genetlink header and the service's identity nest: the same for
    every real server of one virtual server, so built once per service."""
    return _GENL[cmd] + _service_nest(protocol, address, port)


@functools.lru_cache(maxsize=256)
def _dest_settings(weight: int) -> bytes:
    """FWD_METHOD (masquerade), WEIGHT, U_THRESH, L_THRESH: inside the dest
    nest, after its identity (the nest's length counts them)."""
    return _DEST_SETTINGS.pack(8, DEST_FWD_METHOD, CONN_F_MASQ, 8, DEST_WEIGHT, weight,
                               8, DEST_U_THRESH, 0, 8, DEST_L_THRESH, 0)


def get_dests(vs: VirtualServer) -> bytes:
    return _GENL[CMD_GET_DEST] + _service_nest(vs.protocol, vs.address, vs.port)


def get_services() -> bytes:
    return _genl(CMD_GET_SERVICE)


def set_timeouts(tcp: int, tcp_fin: int, udp: int) -> bytes:
    parts = [u32(kind, value) for kind, value in ((CMD_ATTR_TIMEOUT_TCP, tcp),
                                                   (CMD_ATTR_TIMEOUT_TCP_FIN, tcp_fin),
                                                   (CMD_ATTR_TIMEOUT_UDP, udp)) if value]
    return _genl(CMD_SET_CONFIG, *parts)


# -- decoding -------------------------------------------------------------------


def parse_service(body: memoryview) -> VirtualServer | None:
    """The virtual server in one GET_SERVICE answer; None for what is not ours
    to model (firewall-mark services, families other than IPv4 and IPv6,
    unknown protocols)."""
    top = parse_attrs(body, 4)
    if CMD_ATTR_SERVICE not in top:
        return None
    a = parse_attrs(top[CMD_ATTR_SERVICE])
    if SVC_FWMARK in a and get_u32(a[SVC_FWMARK]):
        return None
    family = get_u16(a[SVC_AF]) if SVC_AF in a else None
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None
    protocol = _PROTOCOL_NAMES.get(get_u16(a[SVC_PROTOCOL])) if SVC_PROTOCOL in a else None
    if protocol is None:
        return None
    flags = struct.unpack_from("=I", a[SVC_FLAGS])[0] if SVC_FLAGS in a else 0
    timeout = get_u32(a[SVC_TIMEOUT]) if SVC_TIMEOUT in a else 0
    return VirtualServer(
        protocol=protocol,
        address=_address(family, a[SVC_ADDR]),
        port=get_be16(a[SVC_PORT]),
        scheduler=get_str(a[SVC_SCHED_NAME]) if SVC_SCHED_NAME in a else "",
        persistence_timeout=timeout if flags & SVC_F_PERSISTENT else 0,
        flags=flags & ~(SVC_F_PERSISTENT | SVC_F_HASHED),
    )


def parse_dest(body: memoryview) -> RealServerState | None:
    """The real server in one GET_DEST answer."""
    top = parse_attrs(body, 4)
    if CMD_ATTR_DEST not in top:
        return None
    a = parse_attrs(top[CMD_ATTR_DEST])
    family = get_u16(a[DEST_ADDR_FAMILY]) if DEST_ADDR_FAMILY in a else socket.AF_INET
    server = RealServer(_address(family, a[DEST_ADDR]), get_be16(a[DEST_PORT]),
                        get_u32(a[DEST_WEIGHT]) if DEST_WEIGHT in a else 0)
    return RealServerState(server,
                           get_u32(a[DEST_ACTIVE_CONNS]) if DEST_ACTIVE_CONNS in a else 0,
                           get_u32(a[DEST_INACT_CONNS]) if DEST_INACT_CONNS in a else 0)


def _address(family: int, raw: memoryview) -> str:
    """An address attribute (the kernel sends the whole 16-byte union) as text;
    IPv6 in its canonical form, as translate writes it."""
    if family == socket.AF_INET6:
        return socket.inet_ntop(socket.AF_INET6, bytes(raw[:16]))
    return socket.inet_ntoa(bytes(raw[:4]))


def _proc_address(text: str) -> str:
    """``0A60000A`` or ``[fd00:0000:...:000a]`` (``%pI6``, uncompressed) as text."""
    if text.startswith("["):
        return socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, text[1:-1]))
    return socket.inet_ntoa(bytes.fromhex(text))


def parse_proc_dests(text: str) -> dict[tuple[str, str, int], list[RealServerState]]:
    """Real servers of every TCP/UDP/SCTP service in ``/proc/net/ip_vs``.

    One read lists every destination of every service, where the netlink API
    needs one dump per service. The file lacks the service flags (sh-port...)
    and the dest thresholds, so services are still read over netlink; for
    destinations it has all the interface needs: address, port, weight and
    the active/inactive connection counters. Lines look like::

        TCP  0A60000A:0050 rr
          -> 0AF40105:1F90      Masq    1      0          0
        TCP  [fd00:0000:0000:0000:0000:0000:0000:000a]:0050 rr
          -> [fd00:0000:0000:0000:0000:0000:0001:0005]:1F90      Masq    1      0          0
    """
    found: dict[tuple[str, str, int], list[RealServerState]] = {}
    current: list[RealServerState] | None = None
    for line in text.splitlines():
        if line.startswith("  -> "):
            if current is None:
                continue
            fields = line.split()
            addr, _, port = fields[1].rpartition(":")
            current.append(RealServerState(RealServer(_proc_address(addr), int(port, 16), int(fields[3])),
                                           int(fields[4]), int(fields[5])))
        elif line[:3] in ("TCP", "UDP") or line.startswith("SCTP"):
            fields = line.split()
            addr, _, port = fields[1].rpartition(":")
            current = found.setdefault((fields[0], _proc_address(addr), int(port, 16)), [])
        else:
            current = None  # headers, FWM services
    return found
