"""The dummy link and its addresses on Linux: :class:`~.kernel.Addresses`
through rtnetlink.

Addresses are added and deleted by the thousand, many messages per
``sendmsg`` on one socket opened once, encoded by hand (``_addr_message``);
the link itself is looked up with one ioctl. This socket is apart from the
others, which is what lets an :meth:`LinuxAddresses.apply` run alongside the
other subsystems (:mod:`.kernel`, thread-safety).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from typing import Sequence

from .kernel import (
    DUMMY_LINK,
    AddAddress,
    AddressOp,
    DeleteAddress,
    IPVSUnavailable,
    KernelError,
    NotFound,
)
from .kernel_common import NetlinkSubsystem, _batch, _error, _translate
from .netlink import NETLINK_ROUTE, NLM_F_CREATE, NLM_F_EXCL, NetlinkSocket, asciiz, nested, parse_attrs

__all__ = ["LinuxAddresses"]

# rtnetlink (include/uapi/linux/rtnetlink.h, if_link.h, if_addr.h).
_RTM_NEWLINK, _RTM_DELLINK = 16, 17
_RTM_NEWADDR, _RTM_DELADDR, _RTM_GETADDR = 20, 21, 22
_IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
_IFF_UP = 0x1
_IFLA_IFNAME, _IFLA_LINKINFO, _IFLA_INFO_KIND = 3, 18, 1
_IFA_ADDRESS, _IFA_LOCAL = 1, 2
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
_ADDR_MESSAGE = struct.Struct("=BBBBI" "HH4s" "HH4s")  # packed in one go: thousands per sync
_ADDR_MESSAGE6 = struct.Struct("=BBBBI" "HH16s" "HH16s")
_IFA_F_NODAD = 0x02

_ADDRESS_METHODS = {AddAddress: _RTM_NEWADDR, DeleteAddress: _RTM_DELADDR}


def _describe(op: AddressOp) -> str:
    if type(op) is AddAddress:
        return f"adding {op.address} to {op.link}"
    return f"deleting {op.address} from {op.link}"


class LinuxAddresses(NetlinkSubsystem[AddressOp]):
    """:class:`~.kernel.Addresses` on the running kernel (an rtnetlink socket opened on first use)."""

    def _open(self) -> NetlinkSocket:
        return NetlinkSocket(NETLINK_ROUTE)

    def _apply(self, ops: Sequence[AddressOp]) -> list[KernelError | None]:
        results: list[KernelError | None] = [None] * len(ops)
        requests, positions = [], []
        indexes: dict[str, int | KernelError] = {}
        for i, (link, address) in enumerate(ops):
            index = indexes.get(link)
            if index is None:
                try:
                    index = indexes[link] = self._link_index(link)
                except NotFound as err:
                    index = indexes[link] = err
            if isinstance(index, KernelError):
                results[i] = NotFound(f"{_describe(ops[i])}: {index}")
                continue
            kind = _ADDRESS_METHODS[type(ops[i])]
            requests.append((kind, NLM_F_CREATE | NLM_F_EXCL if kind == _RTM_NEWADDR else 0,
                             _addr_message(index, address)))
            positions.append(i)
        for i, code in zip(positions, _batch(self._socket(), requests) if requests else ()):
            if code:
                results[i] = _error(code, _describe(ops[i]))
        return results

    # -- the dummy link and its addresses ----------------------------------------
    @staticmethod
    def _link_index(name: str) -> int:
        # One ioctl in this thread's namespace; pyroute2's link_lookup dumps
        # every link, which adds up over thousands of address changes.
        try:
            return socket.if_nametoindex(name)
        except OSError:
            raise NotFound(f"link {name} not found") from None

    def _rtnl_one(self, kind: int, flags: int, payload: bytes) -> int:
        """One acked rtnetlink request; its errno (0 = done)."""
        [code] = _batch(self._socket(), [(kind, flags, payload)])
        return code

    def ensure_dummy_link(self, name: str = DUMMY_LINK) -> None:
        try:
            index = self._link_index(name)
        except NotFound:
            code = self._rtnl_one(_RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, _new_link_message(name, "dummy"))
            if code in (errno.EOPNOTSUPP, errno.ENOTSUP):
                raise IPVSUnavailable("dummy", f"creating link {name}: {os.strerror(code)}") from None
            if code and code != errno.EEXIST:
                raise _error(code, f"creating dummy link {name}") from None
            index = self._link_index(name)
        code = self._rtnl_one(_RTM_NEWLINK, 0, _IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, _IFF_UP, _IFF_UP))
        if code:
            raise _error(code, f"setting link {name} up")

    def delete_link(self, name: str) -> None:
        index = self._link_index(name)
        code = self._rtnl_one(_RTM_DELLINK, 0, _IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, 0, 0))
        if code:
            raise _error(code, f"deleting link {name}")

    def list_addresses(self, link: str) -> set[str]:
        index = self._link_index(link)
        request = _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        try:
            bodies = self._socket().dump(_RTM_GETADDR, request)
        except OSError as exc:
            raise _translate(exc, f"listing addresses of {link}") from exc
        found = set()
        for body in bodies:
            family, _prefix, _flags, scope, ifindex = _IFADDRMSG.unpack_from(body)
            if ifindex != index:
                continue
            attrs = parse_attrs(body, _IFADDRMSG.size)
            value = attrs.get(_IFA_LOCAL) or attrs.get(_IFA_ADDRESS)
            if value is None:
                continue
            if family == socket.AF_INET:
                found.add(socket.inet_ntoa(bytes(value[:4])))
            elif family == socket.AF_INET6 and scope == 0:  # not the link's own fe80:: address
                found.add(socket.inet_ntop(socket.AF_INET6, bytes(value[:16])))
        return found

    def add_address(self, link: str, address: str) -> None:
        self._one(AddAddress(link, address))

    def delete_address(self, link: str, address: str) -> None:
        self._one(DeleteAddress(link, address))


def _new_link_message(name: str, kind: str) -> bytes:
    """RTM_NEWLINK payload creating link ``name`` of ``kind`` (``ip link add NAME type KIND``)."""
    return (_IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + asciiz(_IFLA_IFNAME, name)
            + nested(_IFLA_LINKINFO, asciiz(_IFLA_INFO_KIND, kind)))


def _addr_message(index: int, address: str) -> bytes:
    """RTM_NEWADDR/RTM_DELADDR payload for ``address``/32 (IPv6: /128, no
    duplicate address detection, usable at once) on link ``index`` (scope
    global, as ``ip addr add`` gives it): ifaddrmsg, IFA_LOCAL, IFA_ADDRESS."""
    if ":" in address:
        packed = socket.inet_pton(socket.AF_INET6, address)
        return _ADDR_MESSAGE6.pack(socket.AF_INET6, 128, _IFA_F_NODAD, 0, index,
                                   20, _IFA_LOCAL, packed, 20, _IFA_ADDRESS, packed)
    packed = socket.inet_aton(address)
    return _ADDR_MESSAGE.pack(socket.AF_INET, 32, 0, 0, index, 8, _IFA_LOCAL, packed, 8, _IFA_ADDRESS, packed)
