"""The real :class:`~platformd.nodeproxy.kernel.Kernel`: netlink and iptables.

What goes through which door, and why:

* IPVS services and destinations, the dummy link's addresses and ipset
  members -- the objects counted by the thousand -- through
  :class:`.netlink.NetlinkSocket`: plain netlink sockets opened once,
  messages encoded by hand (:mod:`.ipvs_netlink`, :mod:`.ipset_netlink`,
  ``_addr_message`` below), many per ``sendmsg``, errors mapped back per
  message. pyroute2 costs 1.3-2.7 ms per call on the host and ~40 ms under
  the test VM's emulation (one endpoint change took 0.24 s there, a
  1,000-Service initial sync 325 s for 8,032 calls, a full resync 143 s);
  the kernel needs microseconds per operation, so the round trip is what
  must be shared. :meth:`LinuxKernel.apply` is the bulk door.
* Creating, raising and deleting the dummy link (rtnetlink) and creating,
  flushing and destroying ipsets (nfnetlink, with the set type's highest
  revision asked of the kernel first) through the same sockets. pyroute2
  is not used at all: importing it alone takes 7-18 s under the test VM's
  emulation (0.3 s on the host), before any work.
* iptables through ``iptables-restore``/``iptables`` (their text format is
  the stable interface, and the nft backend has no other); sysctls through
  ``/proc/sys``; conntrack entries with the ``conntrack`` tool.
* Bulk reading of IPVS (:meth:`LinuxKernel.list_ipvs`): one GET_SERVICE dump
  plus one read of ``/proc/thread-self/net/ip_vs`` for every destination
  (the netlink API needs a dump per service; the file has everything a
  destination needs here, but not the services' scheduler flags).

This is the only module of the node proxy that talks to the kernel; every
error leaves it as one of the exceptions in :mod:`.kernel`.

Hand-encoded messages also avoid pyroute2 0.9.7's pitfalls met on a real
kernel (``IPVSDest`` defaulting to direct routing, ``dest("update")``
sending a delete, untyped timeout attributes, ipset port members needing
``PortEntry``, ``from_message`` reporting class defaults).
"""

from __future__ import annotations

import errno
import operator
import os
import re
import shlex
import socket
import struct
import subprocess
import time
from itertools import groupby
from pathlib import Path
from typing import Callable, Iterable, Sequence

from . import ipset_netlink as ipsetnl
from . import ipvs_netlink as ipvsnl
from .kernel import (
    DUMMY_LINK,
    Exists,
    IPSetEntry,
    IPSetSpec,
    IPVSUnavailable,
    KernelError,
    NotFound,
    Op,
    RealServer,
    RealServerState,
    VirtualServer,
)
from .netlink import (
    NETLINK_GENERIC,
    NETLINK_NETFILTER,
    NETLINK_ROUTE,
    NLM_F_CREATE,
    NLM_F_EXCL,
    NetlinkSocket,
    asciiz,
    attr,
    genl_family,
    nested,
    parse_attrs,
)

__all__ = ["LinuxKernel", "modprobe"]

# The scheduler probe creates and deletes a firewall-mark service; this mark
# is far above anything iptables rules of the node proxy use.
_PROBE_FWMARK = 0x7FFF_FFF0

# ipset error numbers (include/uapi/linux/netfilter/ipset/ip_set.h).
_IPSET_ERR_FIND_TYPE = 4098
_IPSET_ERR_BUSY = 4100
_IPSET_ERR_EXIST = 4103
_IPSET_CMD_HEADER = 12

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

_IPVS_METHODS = {
    "add_virtual_server": ipvsnl.CMD_NEW_SERVICE,
    "update_virtual_server": ipvsnl.CMD_SET_SERVICE,
    "delete_virtual_server": ipvsnl.CMD_DEL_SERVICE,
    "add_real_server": ipvsnl.CMD_NEW_DEST,
    "update_real_server": ipvsnl.CMD_SET_DEST,
    "delete_real_server": ipvsnl.CMD_DEL_DEST,
}
_ADDRESS_METHODS = {"add_address": _RTM_NEWADDR, "delete_address": _RTM_DELADDR}
_IPSET_METHODS = {"add_ipset_entry": ipsetnl.CMD_ADD, "delete_ipset_entry": ipsetnl.CMD_DEL}
_IPVS, _ADDRESS, _IPSET = "ipvs", "address", "ipset"
_KINDS = {**dict.fromkeys(_IPVS_METHODS, _IPVS), **dict.fromkeys(_ADDRESS_METHODS, _ADDRESS),
          **dict.fromkeys(_IPSET_METHODS, _IPSET)}
_METHOD = operator.itemgetter(0)  # Op.method


def _kind(op: Op) -> str:
    return _KINDS[op[0]]


_DEST_COMMANDS = {method: cmd for method, cmd in _IPVS_METHODS.items() if method.endswith("_real_server")}

_SYSCTL_ROOT = Path("/proc/sys")
_PROC_IP_VS = Path("/proc/thread-self/net/ip_vs")
_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def modprobe(module: str) -> bool:
    """Load ``module`` with modprobe; False when it failed or cannot work.

    A kernel built without loadable modules has no ``/proc/modules``; running
    modprobe there only prints noise, so it is not attempted.
    """
    if not os.path.exists("/proc/modules"):
        return False
    try:
        done = subprocess.run(["modprobe", "-q", module], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _errno_of(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    if code is None:
        code = getattr(exc, "errno", None)
    return abs(code) if isinstance(code, int) else None


def _error(code: int | None, what: str, detail: str = "") -> KernelError:
    """The exception of :mod:`.kernel` for errno ``code`` about ``what``."""
    if code in (errno.ENOENT, errno.ESRCH, errno.ENODEV, errno.EADDRNOTAVAIL):
        return NotFound(f"{what}: {os.strerror(code)}")
    if code == errno.EEXIST:
        return Exists(f"{what}: {os.strerror(code)}")
    detail = detail or (os.strerror(code) if code and code < 4096 else f"error {code}")
    return KernelError(f"{what}: {detail}", code)


def _translate(exc: BaseException, what: str) -> KernelError:
    code = _errno_of(exc)
    return _error(code, what, "" if code and code < 4096 else str(exc))


def _batch(sock: NetlinkSocket, requests: list) -> list[int]:
    """``sock.batch``, with a failure of the socket itself (ENOBUFS...) as KernelError."""
    try:
        return sock.batch(requests)
    except OSError as exc:
        raise KernelError(f"netlink batch of {len(requests)} requests: {exc.strerror or exc}", exc.errno) from exc


def _describe(op: Op) -> str:
    args = op.args
    return {
        "add_virtual_server": lambda: f"adding virtual server {args[0]}",
        "update_virtual_server": lambda: f"updating virtual server {args[0]}",
        "delete_virtual_server": lambda: f"deleting virtual server {args[0]}",
        "add_real_server": lambda: f"adding real server {args[1]} to {args[0]}",
        "update_real_server": lambda: f"setting weight of {args[1]} in {args[0]}",
        "delete_real_server": lambda: f"deleting real server {args[1]} from {args[0]}",
        "add_address": lambda: f"adding {args[1]} to {args[0]}",
        "delete_address": lambda: f"deleting {args[1]} from {args[0]}",
        "add_ipset_entry": lambda: f"adding {args[1]} to ipset {args[0]}",
        "delete_ipset_entry": lambda: f"deleting {args[1]} from ipset {args[0]}",
    }[op.method]()


class LinuxKernel:
    """:class:`~platformd.nodeproxy.kernel.Kernel` on the running Linux kernel.

    Sockets are opened on first use, so constructing one never fails; the
    IPVS socket needs the ``ip_vs`` module, which :meth:`probe` loads. Each
    socket stays in the network namespace of the thread that first used it,
    while the tools (iptables, conntrack), /proc and /proc/sys follow the
    calling thread: use one instance from one namespace.
    ``module_loader`` loads one kernel module by name and says whether it
    worked (default :func:`modprobe`). Thread-safe exactly as far as the
    interface allows: address ops go through the rtnetlink socket only, so
    an :meth:`apply` of them may run alongside calls that use the IPVS and
    ipset sockets or the tools; anything else must not overlap.

    ``round_trips`` counts exchanges with the kernel: netlink round trips
    and tool runs; :attr:`busy_seconds` the time they took.
    """

    def __init__(self, *, module_loader: Callable[[str], bool] = modprobe,
                 iptables: str = "iptables", conntrack: str = "conntrack") -> None:
        self._load_module = module_loader
        self._iptables = iptables
        self._conntrack = conntrack
        self._ipvs: NetlinkSocket | None = None
        self._ipvs_family = 0
        self._rtnl: NetlinkSocket | None = None
        self._nfnl: NetlinkSocket | None = None
        self._set_types: dict[str, str] = {}  # ipset name -> type, see _set_type_cached
        self._revisions: dict[tuple[str, int], int] = {}  # (set type, family) -> highest revision
        self._other_trips = 0
        self._tool_seconds = 0.0
        self._proc_seconds = 0.0

    @property
    def round_trips(self) -> int:
        lean = sum(s.round_trips for s in (self._ipvs, self._rtnl, self._nfnl) if s is not None)
        return lean + self._other_trips

    @property
    def busy_seconds(self) -> dict[str, float]:
        """Seconds spent so far waiting on the kernel, by door: ``ipvs``
        (generic netlink and ``/proc/net/ip_vs``), ``rtnetlink`` (the dummy
        link and its addresses), ``ipset`` (nfnetlink) and ``tools``
        (iptables, conntrack). What is left of a call's time is this
        module's Python (encoding, decoding). For the benchmark's breakdown.
        """
        def busy(sock: NetlinkSocket | None) -> float:
            return sock.busy_seconds if sock is not None else 0.0
        return {"ipvs": busy(self._ipvs) + self._proc_seconds, "rtnetlink": busy(self._rtnl),
                "ipset": busy(self._nfnl), "tools": self._tool_seconds}

    # -- sockets ----------------------------------------------------------------
    def _ipvs_socket(self) -> NetlinkSocket:
        if self._ipvs is None:
            sock = NetlinkSocket(NETLINK_GENERIC)
            try:
                self._ipvs_family = genl_family(sock, ipvsnl.FAMILY)
            except OSError as exc:
                sock.close()
                raise IPVSUnavailable("ip_vs", f"generic netlink family IPVS: {exc.strerror}") from exc
            self._ipvs = sock
        return self._ipvs

    def _rtnl_socket(self) -> NetlinkSocket:
        if self._rtnl is None:
            self._rtnl = NetlinkSocket(NETLINK_ROUTE)
        return self._rtnl

    def _nfnl_socket(self) -> NetlinkSocket:
        if self._nfnl is None:
            self._nfnl = NetlinkSocket(NETLINK_NETFILTER)
        return self._nfnl

    def close(self) -> None:
        for sock in (self._ipvs, self._rtnl, self._nfnl):
            if sock is not None:
                sock.close()
        self._ipvs = self._rtnl = self._nfnl = None

    # -- availability -------------------------------------------------------------
    def probe(self, schedulers: Iterable[str] = ("rr",)) -> None:
        self._require_module("ip_vs", lambda: os.path.exists("/proc/net/ip_vs"))
        for scheduler in schedulers:
            self._probe_scheduler(scheduler)
        # Both have module parameters, so /sys/module/NAME exists whether they
        # are built in or loaded.
        self._require_module("dummy", lambda: os.path.exists("/sys/module/dummy"))
        self._require_module("ip_set", lambda: os.path.exists("/sys/module/ip_set"))

    def _require_module(self, module: str, present: Callable[[], bool]) -> None:
        if present():
            return
        loaded = self._load_module(module)
        if not present():
            how = "modprobe failed" if loaded is False else "loaded but not usable"
            raise IPVSUnavailable(module, f"not built in and {how}")

    def _probe_scheduler(self, scheduler: str) -> None:
        # The kernel loads ip_vs_<name> on demand when a service asks for it;
        # creating a throw-away firewall-mark service is the one test that
        # covers built-in, loadable and missing schedulers alike.
        sock = self._ipvs_socket()
        add = ipvsnl.fwmark_service(ipvsnl.CMD_NEW_SERVICE, _PROBE_FWMARK, scheduler)
        delete = ipvsnl.fwmark_service(ipvsnl.CMD_DEL_SERVICE, _PROBE_FWMARK, scheduler)
        [code] = _batch(sock, [(self._ipvs_family, 0, add)])
        if code and code != errno.EEXIST:
            raise IPVSUnavailable(f"ip_vs_{scheduler}", f"scheduler rejected: {os.strerror(code)}")
        [code] = _batch(sock, [(self._ipvs_family, 0, delete)])
        if code:
            raise _error(code, "deleting the scheduler probe service")

    def kernel_version(self) -> tuple[int, int, int]:
        match = _RELEASE.match(os.uname().release)
        if match is None:
            raise KernelError(f"cannot parse kernel release {os.uname().release!r}")
        major, minor, patch = match.groups()
        return (int(major), int(minor), int(patch or 0))

    # -- bulk ------------------------------------------------------------------------
    def apply(self, ops: Sequence[Op]) -> list[KernelError | None]:
        """Runs of consecutive ops of one kind (IPVS, addresses, ipset members)
        each go to their socket as one batch, in order."""
        results: list[KernelError | None] = []
        for kind, run in groupby(ops, key=_kind):
            run = list(run)
            if kind == _IPVS:
                results += self._apply_ipvs(run)
            elif kind == _ADDRESS:
                results += self._apply_addresses(run)
            else:
                results += self._apply_ipset(run)
        return results

    def _one(self, op: Op) -> None:
        [error] = self.apply([op])
        if error is not None:
            raise error

    def _apply_ipvs(self, ops: Sequence[Op]) -> list[KernelError | None]:
        sock = self._ipvs_socket()
        family = self._ipvs_family
        requests: list[tuple[int, int, bytes]] = []
        for method, run in groupby(ops, key=_METHOD):
            if method in _DEST_COMMANDS:  # the many: encoded in one go
                payloads = ipvsnl.dests(_DEST_COMMANDS[method], [args for _method, args in run])
            else:  # virtual servers
                cmd = _IPVS_METHODS[method]
                payloads = [ipvsnl.service(cmd, vs) for _method, (vs,) in run]
            requests += [(family, 0, payload) for payload in payloads]
        codes = _batch(sock, requests)
        if not any(codes):
            return [None] * len(ops)
        return [None if code == 0 else _error(code, _describe(op)) for op, code in zip(ops, codes)]

    def _apply_addresses(self, ops: Sequence[Op]) -> list[KernelError | None]:
        results: list[KernelError | None] = [None] * len(ops)
        requests, positions = [], []
        indexes: dict[str, int | KernelError] = {}
        for i, (method, (link, address)) in enumerate(ops):
            index = indexes.get(link)
            if index is None:
                try:
                    index = indexes[link] = self._link_index(link)
                except NotFound as err:
                    index = indexes[link] = err
            if isinstance(index, KernelError):
                results[i] = NotFound(f"{_describe(ops[i])}: {index}")
                continue
            kind = _ADDRESS_METHODS[method]
            requests.append((kind, NLM_F_CREATE | NLM_F_EXCL if kind == _RTM_NEWADDR else 0,
                             _addr_message(index, address)))
            positions.append(i)
        for i, code in zip(positions, _batch(self._rtnl_socket(), requests) if requests else ()):
            if code:
                results[i] = _error(code, _describe(ops[i]))
        return results

    def _apply_ipset(self, ops: Sequence[Op]) -> list[KernelError | None]:
        results: list[KernelError | None] = [None] * len(ops)
        requests, positions = [], []
        for i, op in enumerate(ops):
            name, entry = op.args
            try:
                set_type = self._set_type_cached(name)
                payload = ipsetnl.change(_IPSET_METHODS[op.method], name, set_type, entry)
            except KernelError as err:
                results[i] = err
                continue
            except (ValueError, TypeError, AttributeError, KeyError, OSError) as exc:
                results[i] = KernelError(f"{_describe(op)}: {exc}", errno.EINVAL)
                continue
            # Without NLM_F_EXCL the kernel takes an existing (ADD) or missing
            # (DEL) member as success (IPSET_FLAG_EXIST); the interface wants
            # Exists/NotFound, as ipset(8) without -exist reports them.
            requests.append((ipsetnl.msg_type(_IPSET_METHODS[op.method]), NLM_F_EXCL, payload))
            positions.append(i)
        codes = _batch(self._nfnl_socket(), requests) if requests else []
        for i, code in zip(positions, codes):
            if code:
                op = ops[i]
                results[i] = self._ipset_error(code, _describe(op),
                                               Exists if op.method == "add_ipset_entry" else NotFound)
                if not isinstance(results[i], (Exists, NotFound)):
                    self._set_types.pop(op.args[0], None)  # perhaps not the type we think
        return results

    @staticmethod
    def _ipset_error(code: int, what: str, on_exist=None) -> KernelError:
        if code == _IPSET_ERR_EXIST and on_exist is not None:
            return on_exist(what)
        if code == _IPSET_ERR_BUSY:
            return KernelError(f"{what}: set is in use by a kernel component", errno.EBUSY)
        if code == _IPSET_ERR_FIND_TYPE:
            return IPVSUnavailable("ip_set", f"{what}: set type not supported")
        return _error(code, what)

    def list_ipvs(self) -> dict[VirtualServer, list[RealServerState]]:
        services = self.list_virtual_servers()
        started = time.perf_counter()
        try:
            text = _PROC_IP_VS.read_text()
        except OSError:
            return {vs: self.list_real_servers(vs) for vs in services}
        finally:
            self._proc_seconds += time.perf_counter() - started
        dests = ipvsnl.parse_proc_dests(text)
        return {vs: sorted(dests.get(vs.key, ()), key=lambda s: s.server.key) for vs in services}

    # -- IPVS virtual servers ----------------------------------------------------
    def _ipvs_dump(self, payload: bytes, what: str):
        sock = self._ipvs_socket()
        try:
            return sock.dump(self._ipvs_family, payload)
        except OSError as exc:
            raise _translate(exc, what) from exc

    def list_virtual_servers(self) -> list[VirtualServer]:
        bodies = self._ipvs_dump(ipvsnl.get_services(), "listing IPVS services")
        return sorted(vs for vs in map(ipvsnl.parse_service, bodies) if vs is not None)

    def add_virtual_server(self, vs: VirtualServer) -> None:
        self._one(Op("add_virtual_server", (vs,)))

    def update_virtual_server(self, vs: VirtualServer) -> None:
        self._one(Op("update_virtual_server", (vs,)))

    def delete_virtual_server(self, vs: VirtualServer) -> None:
        self._one(Op("delete_virtual_server", (vs,)))

    # -- IPVS real servers -------------------------------------------------------
    def list_real_servers(self, vs: VirtualServer) -> list[RealServerState]:
        what = f"listing real servers of {vs}"
        bodies = self._ipvs_dump(ipvsnl.get_dests(vs), what)
        if not bodies:
            # A dump for a missing service is empty rather than an error.
            try:
                self._ipvs_socket().request(self._ipvs_family, ipvsnl.service(ipvsnl.CMD_GET_SERVICE, vs))
            except OSError as exc:
                raise _translate(exc, what) from exc
        states = [s for s in map(ipvsnl.parse_dest, bodies) if s is not None]
        return sorted(states, key=lambda s: s.server.key)

    def add_real_server(self, vs: VirtualServer, rs: RealServer) -> None:
        self._one(Op("add_real_server", (vs, rs)))

    def update_real_server(self, vs: VirtualServer, rs: RealServer) -> None:
        self._one(Op("update_real_server", (vs, rs)))

    def delete_real_server(self, vs: VirtualServer, rs: RealServer) -> None:
        self._one(Op("delete_real_server", (vs, rs)))

    def set_ipvs_timeouts(self, tcp: int, tcp_fin: int, udp: int) -> None:
        if not (tcp or tcp_fin or udp):
            return
        [code] = _batch(self._ipvs_socket(), [(self._ipvs_family, 0, ipvsnl.set_timeouts(tcp, tcp_fin, udp))])
        if code:
            raise _error(code, "setting IPVS timeouts")

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
        [code] = _batch(self._rtnl_socket(), [(kind, flags, payload)])
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
            bodies = self._rtnl_socket().dump(_RTM_GETADDR, request)
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
        self._one(Op("add_address", (link, address)))

    def delete_address(self, link: str, address: str) -> None:
        self._one(Op("delete_address", (link, address)))

    # -- ipsets ------------------------------------------------------------------
    def _ipset_command(self, cmd: int, payload: bytes, what: str, flags: int = 0) -> None:
        """One acked ipset request (create, flush, destroy)."""
        [code] = _batch(self._nfnl_socket(), [(ipsetnl.msg_type(cmd), flags, payload)])
        if code:
            raise self._ipset_error(code, what)

    def _ipset_revision(self, set_type: str, family: int) -> int:
        """The highest revision of ``set_type`` this kernel has (remembered)."""
        key = (set_type, family)
        if key not in self._revisions:
            what = f"ipset type {set_type}"
            try:
                bodies = self._nfnl_socket().request(ipsetnl.msg_type(ipsetnl.CMD_TYPE),
                                                     ipsetnl.type_request(set_type, family))
            except OSError as exc:
                raise self._ipset_error(exc.errno, what) from exc
            revision = ipsetnl.parse_revision(bodies)
            if revision is None:
                raise IPVSUnavailable("ip_set", f"{what}: the kernel named no revision")
            self._revisions[key] = revision
        return self._revisions[key]

    def _set_type(self, name: str) -> str:
        """The set's type, read from the kernel (and remembered)."""
        self._set_types.pop(name, None)
        try:
            bodies = self._nfnl_socket().request(ipsetnl.msg_type(_IPSET_CMD_HEADER), ipsetnl.list_request(name))
        except OSError as exc:
            raise self._ipset_error(exc.errno, f"reading ipset {name}") from exc
        for body in bodies:
            typename = parse_attrs(body, 4).get(ipsetnl.ATTR_TYPENAME)
            if typename is not None:
                set_type = bytes(typename).split(b"\0", 1)[0].decode()
                self._set_types[name] = set_type
                return set_type
        raise NotFound(f"ipset {name} not found")

    def _set_type_cached(self, name: str) -> str:
        # A member's encoding depends on the set's type. It is remembered
        # rather than read before every add/delete (half the round trips);
        # a failed add/delete forgets it, so a set re-created by hand with
        # another type costs one error, then is read again.
        return self._set_types.get(name) or self._set_type(name)

    def ensure_ipset(self, spec: IPSetSpec) -> None:
        # The spec's comment is for people reading our code: the kernel has no
        # per-set comment (only per-member ones), so it is not stored.
        try:
            existing = self._set_type(spec.name)
        except NotFound:
            existing = None
        if existing is not None:
            if existing != spec.set_type:
                raise KernelError(f"ipset {spec.name} exists with type {existing}, not {spec.set_type}")
            return
        bitmap = spec.set_type.startswith("bitmap:")
        if bitmap:
            family = socket.AF_UNSPEC  # bitmap:port holds no addresses
        else:
            family = socket.AF_INET6 if spec.family == "inet6" else socket.AF_INET
        payload = ipsetnl.create(spec.name, spec.set_type, family, self._ipset_revision(spec.set_type, family),
                                 spec.port_range if bitmap else None)
        self._ipset_command(ipsetnl.CMD_CREATE, payload, f"creating ipset {spec.name}")
        self._set_types[spec.name] = spec.set_type

    def list_ipset(self, name: str) -> set[IPSetEntry]:
        try:
            bodies = self._nfnl_socket().dump(ipsetnl.msg_type(ipsetnl.CMD_LIST), ipsetnl.list_request(name))
        except OSError as exc:
            raise self._ipset_error(exc.errno, f"listing ipset {name}") from exc
        set_type, members = ipsetnl.parse_list(bodies)
        if set_type is not None:
            self._set_types[name] = set_type
        return members

    def add_ipset_entry(self, name: str, entry: IPSetEntry) -> None:
        self._one(Op("add_ipset_entry", (name, entry)))

    def delete_ipset_entry(self, name: str, entry: IPSetEntry) -> None:
        self._one(Op("delete_ipset_entry", (name, entry)))

    def flush_ipset(self, name: str) -> None:
        self._set_type(name)  # flushing a missing set is not an error otherwise
        self._ipset_command(ipsetnl.CMD_FLUSH, ipsetnl.list_request(name), f"flushing ipset {name}")

    def destroy_ipset(self, name: str) -> None:
        self._set_types.pop(name, None)
        # Without NLM_F_EXCL the kernel takes a missing set as destroyed
        # (IPSET_FLAG_EXIST); the interface wants NotFound.
        self._ipset_command(ipsetnl.CMD_DESTROY, ipsetnl.list_request(name), f"destroying ipset {name}", NLM_F_EXCL)

    # -- iptables ------------------------------------------------------------------
    def _run(self, argv: list[str], what: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        self._other_trips += 1
        started = time.perf_counter()
        try:
            return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
        except FileNotFoundError as exc:
            raise KernelError(f"{what}: {argv[0]} is not installed", errno.ENOENT) from exc
        except subprocess.TimeoutExpired as exc:
            raise KernelError(f"{what}: {argv[0]} timed out", errno.ETIMEDOUT) from exc
        finally:
            self._tool_seconds += time.perf_counter() - started

    def restore_iptables(self, text: str) -> None:
        text = _flush_before_delete(text)
        done = self._run([f"{self._iptables}-restore", "-w", "--noflush"], "iptables-restore", text)
        if done.returncode != 0:
            raise KernelError(f"iptables-restore: {done.stderr.strip() or done.stdout.strip()}")

    def _rule_command(self, op: str, table: str, chain: str,
                      rule: tuple[str, ...]) -> subprocess.CompletedProcess:
        return self._run([self._iptables, "-w", "-t", table, op, chain, *rule],
                         f"iptables {op} {table}/{chain}")

    @staticmethod
    def _missing(done: subprocess.CompletedProcess) -> bool:
        message = done.stderr
        return "No chain/target/match" in message or "does a matching rule exist" in message

    def ensure_iptables_rule(self, table: str, chain: str, rule: tuple[str, ...]) -> bool:
        if self._rule_command("-C", table, chain, rule).returncode == 0:
            return False
        return self._insert_rule(table, chain, rule)

    def _insert_rule(self, table: str, chain: str, rule: tuple[str, ...]) -> bool:
        done = self._rule_command("-I", table, chain, rule)
        if done.returncode != 0:
            if self._missing(done):
                raise NotFound(f"iptables {table}/{chain}: {done.stderr.strip()}")
            raise KernelError(f"iptables -I {chain}: {done.stderr.strip()}")
        return True

    def ensure_iptables_rules(self, rules: Sequence[tuple[str, str, tuple[str, ...]]]) -> list[bool]:
        # One iptables-save instead of one "-C" run per rule, and one
        # iptables-restore for every insertion (a tool run costs 0.3-1 s under
        # the test VM's emulation). A rule found there as iptables-save writes
        # it is present. A rule whose target its chain never jumps to is
        # missing. Only in between (a jump to that target written otherwise)
        # is "-C" asked: the kernel's answer, never a duplicate because our
        # spelling differs from the tool's.
        done = self._run([f"{self._iptables}-save"], "iptables-save")
        if done.returncode != 0:
            raise KernelError(f"iptables-save: {done.stderr.strip() or done.stdout.strip()}")
        saved = _saved_rules(done.stdout)
        results: list[bool] = []
        missing: list[int] = []
        for table, chain, rule in rules:
            present = saved.get((table, chain))
            if present is not None and tuple(rule) in present:
                results.append(False)
            elif present is not None and not any(r[-1:] == tuple(rule[-1:]) for r in present):
                results.append(True)
                missing.append(len(results) - 1)
            else:
                results.append(self.ensure_iptables_rule(table, chain, rule))
        if missing and not self._insert_rules([rules[i] for i in missing]):
            # One at a time, for the error of the very rule; "-C" first, as
            # a table that did commit may hold some of them already.
            for i in missing:
                self.ensure_iptables_rule(*rules[i])
        return results

    def _insert_rules(self, rules: Sequence[tuple[str, str, tuple[str, ...]]]) -> bool:
        """Insert every rule at the top of its chain in one iptables-restore
        (in order, as many ``-I`` would). False when the text cannot say a
        rule (a quote or backslash in an argument) or the tool refused it;
        each table's block is all or nothing, the tables are not."""
        tables: dict[str, list[str]] = {}
        for table, chain, rule in rules:
            if any(c in arg for arg in rule for c in '"\\\n') or any(not arg for arg in rule):
                return False
            words = (f'"{arg}"' if " " in arg else arg for arg in rule)
            tables.setdefault(table, []).append(f"-I {chain} 1 {' '.join(words)}")
        text = "".join(f"*{table}\n" + "\n".join(lines) + "\nCOMMIT\n" for table, lines in tables.items())
        done = self._run([f"{self._iptables}-restore", "-w", "--noflush"], "iptables-restore", text)
        return done.returncode == 0

    def delete_iptables_rule(self, table: str, chain: str, rule: tuple[str, ...]) -> None:
        done = self._rule_command("-D", table, chain, rule)
        if done.returncode != 0:
            if self._missing(done):
                raise NotFound(f"iptables {table}/{chain}: rule {' '.join(rule)!r} not found")
            raise KernelError(f"iptables -D {chain}: {done.stderr.strip()}")

    # -- sysctl and conntrack -------------------------------------------------------
    @staticmethod
    def _sysctl_path(name: str) -> Path:
        if name.startswith("/") or ".." in name.split("/"):
            raise KernelError(f"invalid sysctl name {name!r}", errno.EINVAL)
        return _SYSCTL_ROOT / name

    def read_sysctl(self, name: str) -> str:
        try:
            return self._sysctl_path(name).read_text().strip()
        except FileNotFoundError:
            raise NotFound(f"sysctl {name} not found") from None
        except OSError as exc:
            raise KernelError(f"reading sysctl {name}: {exc.strerror}", exc.errno) from exc

    def write_sysctl(self, name: str, value: str) -> None:
        path = self._sysctl_path(name)
        try:
            with open(path, "w") as f:
                f.write(f"{value}\n")
        except FileNotFoundError:
            raise NotFound(f"sysctl {name} not found") from None
        except OSError as exc:
            raise KernelError(f"writing sysctl {name}: {exc.strerror}", exc.errno) from exc

    def clear_conntrack(self, protocol: str, address: str, port: int, real_address: str | None = None) -> int:
        argv = [self._conntrack, "-D", "-p", protocol.lower(), "--orig-dst", address, "--dport", str(port)]
        if real_address is not None:
            argv += ["--reply-src", real_address]
        done = self._run(argv, "clearing conntrack entries")
        # "conntrack v1.4.7 (conntrack-tools): 2 flow entries have been deleted."
        # The exit status is 1 when nothing matched, which is not an error here.
        for line in (done.stderr + done.stdout).splitlines():
            if "flow entries have been deleted" in line or "flow entry has been deleted" in line:
                words = line.split(":")[-1].split()
                return int(words[0]) if words and words[0].isdigit() else 0
        if done.returncode != 0:
            raise KernelError(f"conntrack -D: {done.stderr.strip()}")
        return 0


def _saved_rules(text: str) -> dict[tuple[str, str], set[tuple[str, ...]]]:
    """``iptables-save`` output as {(table, chain): {rule arguments after "-A CHAIN"}};
    every chain declared (``:NAME``) has an entry, empty when it holds no rule."""
    rules: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    table = ""
    for line in text.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
        elif line.startswith(":"):
            rules.setdefault((table, line[1:].split()[0]), set())
        elif line.startswith("-A "):
            try:
                words = shlex.split(line)
            except ValueError:
                continue  # unbalanced quotes: such a rule is none of ours
            rules.setdefault((table, words[1]), set()).add(tuple(words[2:]))
    return rules


def _flush_before_delete(text: str) -> str:
    """Declare every chain that a ``-X`` line deletes, right after its ``*table``.

    The kernel only deletes empty chains (EBUSY otherwise), while the
    interface promises ``-X NAME`` deletes the chain whatever it holds;
    declaring it in the same transaction flushes it first, atomically.
    """
    lines = text.splitlines()
    out: list[str] = []
    table_at = None
    declared: set[str] = set()
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("*"):
            table_at, declared = len(out), set()
        elif stripped.startswith(":"):
            declared.add(stripped[1:].split()[0])
        elif stripped.startswith("-X ") and table_at is not None:
            name = stripped.split()[1]
            if name not in declared:
                out.insert(table_at + 1, f":{name} - [0:0]")
                declared.add(name)
        out.append(line)
    return "\n".join(out) + "\n"


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
