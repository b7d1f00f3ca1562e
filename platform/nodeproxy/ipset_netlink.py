"""ipset member messages (nfnetlink subsystem IPSET), encoded and decoded by hand.

Adding, deleting and listing members -- what happens in bulk, so that
thousands of members cost a few round trips -- and creating, flushing and
destroying sets (see :mod:`.netlink` for why not pyroute2: besides its
per-call cost, importing it takes 7-18 s under the test VM's emulation).

Numbers, from ``include/uapi/linux/netfilter/ipset/ip_set.h`` and
``include/uapi/linux/netfilter/nfnetlink.h`` (stable ABI):

* message type = ``NFNL_SUBSYS_IPSET (6) << 8 | command``; commands
  CREATE 2, DESTROY 3, FLUSH 4, LIST 7, ADD 9, DEL 10, HEADER 12, TYPE 13;
  the payload starts with ``struct nfgenmsg`` (family u8, version u8 = 0,
  res_id be16 = 0).
* command attributes: PROTOCOL 1 (u8, required in every message; the kernel
  accepts 6 and 7), SETNAME 2 (string), TYPENAME 3 (string), REVISION 4 (u8),
  FAMILY 5 (u8), DATA 7 (nested), ADT 8 (nested list of DATA in LIST answers).
  CREATE needs TYPENAME, REVISION and FAMILY; the revision is one the kernel
  supports for that type, which TYPE answers (REVISION: the highest).
  ``bitmap:port`` needs its range in DATA: PORT 4 and PORT_TO 5 (be16).
* member (DATA) attributes: IP 1 (nested: IPADDR_IPV4 1 or IPADDR_IPV6 2, with
  NLA_F_NET_BYTEORDER; a set of family inet6 takes only the latter), CIDR 3 (u8), PORT 4 (be16, NLA_F_NET_BYTEORDER required),
  PROTO 7 (u8), IP2 20 (nested like IP), CIDR2 21 (u8).
* errors: a member already present (ADD) or missing (DEL) is
  IPSET_ERR_EXIST 4103 -- only when the request carries ``NLM_F_EXCL``;
  without it the kernel treats both as success. A missing set is ENOENT.
"""

from __future__ import annotations

import functools
import socket
import struct

from .kernel import PROTOCOL_NUMBERS, IPSetEntry
from .netlink import NLA_F_NESTED, NLA_F_NET_BYTEORDER, attr, asciiz, get_str, iter_attrs, nested, parse_attrs, u8

SUBSYS = 6
CMD_CREATE, CMD_DESTROY, CMD_FLUSH = 2, 3, 4
CMD_LIST, CMD_ADD, CMD_DEL, CMD_HEADER, CMD_TYPE = 7, 9, 10, 12, 13
PROTOCOL = 6

ATTR_PROTOCOL, ATTR_SETNAME, ATTR_TYPENAME, ATTR_REVISION, ATTR_FAMILY = 1, 2, 3, 4, 5
ATTR_DATA, ATTR_ADT = 7, 8
ATTR_IP, ATTR_CIDR, ATTR_PORT, ATTR_PORT_TO, ATTR_PROTO, ATTR_IP2, ATTR_CIDR2 = 1, 3, 4, 5, 7, 20, 21
ATTR_IPADDR_IPV4, ATTR_IPADDR_IPV6 = 1, 2

ERR_EXIST = 4103

_PROTOCOL_NAMES = {number: name.lower() for name, number in PROTOCOL_NUMBERS.items()}


def msg_type(cmd: int) -> int:
    return SUBSYS << 8 | cmd


def _header(family: int = socket.AF_INET) -> bytes:
    return struct.pack("=BBH", family, 0, 0)


def _ip(kind: int, address: str) -> bytes:
    if ":" in address:
        return nested(kind, attr(ATTR_IPADDR_IPV6 | NLA_F_NET_BYTEORDER, socket.inet_pton(socket.AF_INET6, address)))
    return nested(kind, attr(ATTR_IPADDR_IPV4 | NLA_F_NET_BYTEORDER, socket.inet_aton(address)))


def _port(port: int) -> bytes:
    return attr(ATTR_PORT | NLA_F_NET_BYTEORDER, struct.pack("!H", port))


# hash:ip,port members (one per Service port) packed in one go: DATA { IP {
# IPADDR_IPV4 }, PORT, PROTO }. Thousands per sync, and under the test VM's
# emulation each attr() call counts.
_IP_PORT = struct.Struct("=HH" "HH" "HH4s" "HH2s2x" "HHB3x")


def member(set_type: str, entry: IPSetEntry) -> bytes:
    """The DATA attribute of ``entry`` in a set of ``set_type``.

    Raises ValueError for a type the node proxy does not use.
    """
    if set_type == "hash:ip,port" and "/" not in entry.ip and ":" not in entry.ip:
        return _IP_PORT.pack(32, ATTR_DATA | NLA_F_NESTED, 12, ATTR_IP | NLA_F_NESTED,
                             8, ATTR_IPADDR_IPV4 | NLA_F_NET_BYTEORDER, socket.inet_aton(entry.ip),
                             6, ATTR_PORT | NLA_F_NET_BYTEORDER, entry.port.to_bytes(2, "big"),
                             5, ATTR_PROTO, PROTOCOL_NUMBERS[(entry.protocol or "tcp").upper()])
    if set_type == "bitmap:port":
        return nested(ATTR_DATA, _port(entry.port))
    kinds = set_type.split(":", 1)[1].split(",")
    parts = [_ip(ATTR_IP, entry.ip.split("/")[0])]
    if kinds[0] == "net":
        parts.append(u8(ATTR_CIDR, int(entry.ip.split("/")[1]) if "/" in entry.ip else _host_prefix(entry.ip)))
    if len(kinds) >= 2:
        if kinds[1] != "port":
            raise ValueError(f"set type {set_type} is not supported")
        parts += [_port(entry.port), u8(ATTR_PROTO, PROTOCOL_NUMBERS[(entry.protocol or "tcp").upper()])]
    if len(kinds) >= 3:
        address, _, cidr = (entry.ip2 or "").partition("/")
        parts.append(_ip(ATTR_IP2, address))
        if kinds[2] == "net":
            parts.append(u8(ATTR_CIDR2, int(cidr) if cidr else _host_prefix(address)))
    if len(kinds) > 3 or kinds[0] not in ("ip", "net"):
        raise ValueError(f"set type {set_type} is not supported")
    return nested(ATTR_DATA, *parts)


def _host_prefix(address: str) -> int:
    return 128 if ":" in address else 32


def change(cmd: int, name: str, set_type: str, entry: IPSetEntry) -> bytes:
    """ADD or DEL of one member (payload after the netlink header)."""
    return _change_head(name, set_type) + member(set_type, entry)


@functools.lru_cache(maxsize=256)
def _change_head(name: str, set_type: str) -> bytes:
    family = socket.AF_UNSPEC if set_type.startswith("bitmap:") else socket.AF_INET
    return _header(family) + u8(ATTR_PROTOCOL, PROTOCOL) + asciiz(ATTR_SETNAME, name)


def type_request(set_type: str, family: int) -> bytes:
    """TYPE: which revisions of ``set_type`` the kernel has (loading its module)."""
    return (_header(family) + u8(ATTR_PROTOCOL, PROTOCOL) + asciiz(ATTR_TYPENAME, set_type)
            + u8(ATTR_FAMILY, family))


def parse_revision(bodies: list[memoryview]) -> int | None:
    """The highest revision in a TYPE answer."""
    for body in bodies:
        revision = parse_attrs(body, 4).get(ATTR_REVISION)
        if revision is not None:
            return revision[0]
    return None


def create(name: str, set_type: str, family: int, revision: int,
           port_range: tuple[int, int] | None = None) -> bytes:
    """CREATE of set ``name`` (``port_range`` for ``bitmap:port``)."""
    data = b""
    if port_range is not None:
        data = nested(ATTR_DATA, _port(port_range[0]),
                      attr(ATTR_PORT_TO | NLA_F_NET_BYTEORDER, struct.pack("!H", port_range[1])))
    return (_header(family) + u8(ATTR_PROTOCOL, PROTOCOL) + asciiz(ATTR_SETNAME, name)
            + asciiz(ATTR_TYPENAME, set_type) + u8(ATTR_REVISION, revision) + u8(ATTR_FAMILY, family) + data)


def list_request(name: str) -> bytes:
    """The payload naming one set: for LIST, HEADER, FLUSH and DESTROY."""
    return _header(socket.AF_UNSPEC) + u8(ATTR_PROTOCOL, PROTOCOL) + asciiz(ATTR_SETNAME, name)


def parse_list(bodies: list[memoryview]) -> tuple[str | None, set[IPSetEntry]]:
    """(set type, members) from the answers to a LIST dump."""
    set_type = None
    members: set[IPSetEntry] = set()
    for body in bodies:
        top = parse_attrs(body, 4)
        if ATTR_TYPENAME in top:
            set_type = get_str(top[ATTR_TYPENAME])
        if ATTR_ADT not in top:
            continue
        for kind, data in iter_attrs(top[ATTR_ADT]):
            if kind == ATTR_DATA:
                members.add(_entry(parse_attrs(data)))
    return set_type, members


def _address(nest: memoryview) -> str:
    a = parse_attrs(nest)
    if ATTR_IPADDR_IPV6 in a:
        return socket.inet_ntop(socket.AF_INET6, bytes(a[ATTR_IPADDR_IPV6][:16]))
    return socket.inet_ntoa(bytes(a[ATTR_IPADDR_IPV4][:4]))


def _entry(a: dict) -> IPSetEntry:
    ip = _address(a[ATTR_IP]) if ATTR_IP in a else None
    port = struct.unpack_from("!H", a[ATTR_PORT])[0] if ATTR_PORT in a else None
    if ip is not None and ATTR_CIDR in a and a[ATTR_CIDR][0] != _host_prefix(ip):
        ip = f"{ip}/{a[ATTR_CIDR][0]}"
    protocol = None
    if ip is not None and port is not None:
        number = a[ATTR_PROTO][0] if ATTR_PROTO in a else 6
        protocol = _PROTOCOL_NAMES.get(number, str(number))
    ip2 = _address(a[ATTR_IP2]) if ATTR_IP2 in a else None
    if ip2 is not None and ATTR_CIDR2 in a:
        ip2 = f"{ip2}/{a[ATTR_CIDR2][0]}"
    return IPSetEntry(ip=ip, protocol=protocol, port=port, ip2=ip2)
