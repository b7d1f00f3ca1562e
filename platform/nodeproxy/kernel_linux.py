"""The real :class:`~platformd.nodeproxy.kernel.Kernel`: netlink and iptables.

IPVS, ipsets and links are driven over netlink with pyroute2 (``IPVS``,
``IPSet``, ``IPRoute``); iptables through ``iptables-restore``/``iptables``
(their text format is the stable interface, and the nft backend has no other);
sysctls through ``/proc/sys``; conntrack entries with the ``conntrack`` tool.
This is the only module of the node proxy that touches netlink; every error
leaves it as one of the exceptions in :mod:`.kernel`.

pyroute2 0.9.7 pitfalls this module works around (each one was met on a real
kernel, see the tests in ``tests/nodeproxy_realkernel``):

* ``IPVSDest`` defaults to direct routing (``fwd_method=3``); every real server
  here is masqueraded, so ``fwd_method=0`` is always passed explicitly.
* ``ipvs.dest("update", ...)`` sends a *delete*; a weight change uses ``"set"``.
* ``IPVSService.from_message``/``IPVSDest.from_message`` report the class
  defaults rather than what the kernel returned, so state is read back from
  the raw netlink attributes (:func:`_attrs`).
* ipset port members need ``PortEntry(port, protocol=N)``; the ``"tcp:80"``
  text form is not understood.
* The IPVS timeouts have no typed attribute in pyroute2 (they are declared
  ``hex``), so :class:`_IPVSConfigMsg` declares them as ``uint32``.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import subprocess
from pathlib import Path
from typing import Callable, Iterable

from pyroute2 import IPVS, IPRoute, IPSet, IPVSDest, IPVSService
from pyroute2.ipset import PortEntry
from pyroute2.netlink import genlmsg
from pyroute2.netlink.generic import ipvs as genl_ipvs

from .kernel import (
    DUMMY_LINK,
    PROTOCOL_NUMBERS,
    Exists,
    IPSetEntry,
    IPSetSpec,
    IPVSUnavailable,
    KernelError,
    NotFound,
    RealServer,
    RealServerState,
    VirtualServer,
)

__all__ = ["LinuxKernel", "modprobe"]

_PROTOCOL_NAMES = {number: name for name, number in PROTOCOL_NUMBERS.items()}

# include/uapi/linux/ip_vs.h
_IP_VS_SVC_F_PERSISTENT = 0x0001
_IP_VS_SVC_F_HASHED = 0x0002  # internal: set on every listed service
_IP_VS_CONN_F_MASQ = 0
_HOST_NETMASK = "255.255.255.255"
# The scheduler probe creates and deletes a firewall-mark service; this mark
# is far above anything iptables rules of the node proxy use.
_PROBE_FWMARK = 0x7FFF_FFF0

# ipset error numbers (include/uapi/linux/netfilter/ipset/ip_set.h).
_IPSET_ERR_FIND_TYPE = 4098
_IPSET_ERR_BUSY = 4100
_IPSET_ERR_EXIST = 4103

# ipset set type -> pyroute2's "etype" (the member's parts, in order).
_IPSET_ETYPES = {
    "hash:ip": "ip",
    "hash:ip,port": "ip,port",
    "hash:ip,port,ip": "ip,port,ip",
    "hash:ip,port,net": "ip,port,net",
    "hash:net": "net",
    "bitmap:port": "port",
}

_SYSCTL_ROOT = Path("/proc/sys")
_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


class _IPVSConfigMsg(genlmsg):
    """An IPVS generic netlink message whose timeout attributes are uint32
    (pyroute2 declares them ``hex``).

    It derives from ``genlmsg``, not ``ipvsmsg``: pyroute2 marks a message
    class compiled on first use and a subclass inherits that mark, so a
    subclass of an already used class would encode with its parent's table.
    """

    prefix = "IPVS_CMD_ATTR_"
    nla_map = (
        ("IPVS_CMD_ATTR_UNSPEC", "none"),
        ("IPVS_CMD_ATTR_SERVICE", "hex"),
        ("IPVS_CMD_ATTR_DEST", "hex"),
        ("IPVS_CMD_ATTR_DAEMON", "hex"),
        ("IPVS_CMD_ATTR_TIMEOUT_TCP", "uint32"),
        ("IPVS_CMD_ATTR_TIMEOUT_TCP_FIN", "uint32"),
        ("IPVS_CMD_ATTR_TIMEOUT_UDP", "uint32"),
    )


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


def _attrs(nla) -> dict:
    """The raw netlink attributes of a message part, by name (last one wins)."""
    return {name: value for name, value in nla.get("attrs", [])}


def _errno_of(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    if code is None:
        code = getattr(exc, "errno", None)
    return abs(code) if isinstance(code, int) else None


def _translate(exc: BaseException, what: str) -> KernelError:
    """The exception of :mod:`.kernel` for a netlink/OS error about ``what``."""
    code = _errno_of(exc)
    if code in (errno.ENOENT, errno.ESRCH, errno.ENODEV, errno.EADDRNOTAVAIL):
        return NotFound(f"{what}: {os.strerror(code)}")
    if code == errno.EEXIST:
        return Exists(f"{what}: {os.strerror(code)}")
    detail = os.strerror(code) if code and code < 4096 else str(exc)
    return KernelError(f"{what}: {detail}", code)


class LinuxKernel:
    """:class:`~platformd.nodeproxy.kernel.Kernel` on the running Linux kernel.

    Sockets are opened on first use, so constructing one never fails; the
    IPVS socket needs the ``ip_vs`` module, which :meth:`probe` loads. Each
    socket stays in the network namespace of the thread that first used it,
    while the tools (iptables, conntrack) and /proc/sys follow the calling
    thread: use one instance from one namespace.
    ``module_loader`` loads one kernel module by name and says whether it
    worked (default :func:`modprobe`). Not thread-safe (the proxier
    serialises its calls, as the interface says).
    """

    def __init__(self, *, module_loader: Callable[[str], bool] = modprobe,
                 iptables: str = "iptables", conntrack: str = "conntrack") -> None:
        self._load_module = module_loader
        self._iptables = iptables
        self._conntrack = conntrack
        self._ipvs = None
        self._ipset = None
        self._ipr = None
        self._set_types: dict[str, str] = {}  # ipset name -> type, see _etype

    # -- sockets ----------------------------------------------------------------
    def _ipvs_socket(self):
        if self._ipvs is None:
            try:
                self._ipvs = IPVS()
            except Exception as exc:  # the generic netlink family is missing
                raise IPVSUnavailable("ip_vs", f"generic netlink family IPVS: {exc}") from exc
        return self._ipvs

    def _ipset_socket(self):
        if self._ipset is None:
            try:
                self._ipset = IPSet()
            except Exception as exc:
                raise IPVSUnavailable("ip_set", str(exc)) from exc
        return self._ipset

    def _iproute(self):
        if self._ipr is None:
            self._ipr = IPRoute()
        return self._ipr

    def close(self) -> None:
        for sock in (self._ipvs, self._ipset, self._ipr):
            if sock is not None:
                sock.close()
        self._ipvs = self._ipset = self._ipr = None

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
        ipvs = self._ipvs_socket()
        probe = IPVSService(af=socket.AF_INET, fwmark=_PROBE_FWMARK, sched_name=scheduler,
                            netmask=_HOST_NETMASK)
        try:
            ipvs.service("add", service=probe)
        except Exception as exc:
            if _errno_of(exc) != errno.EEXIST:
                raise IPVSUnavailable(f"ip_vs_{scheduler}", f"scheduler rejected: {exc}") from exc
        try:
            ipvs.service("del", service=probe)
        except Exception as exc:
            raise _translate(exc, "deleting the scheduler probe service") from exc

    def kernel_version(self) -> tuple[int, int, int]:
        match = _RELEASE.match(os.uname().release)
        if match is None:
            raise KernelError(f"cannot parse kernel release {os.uname().release!r}")
        major, minor, patch = match.groups()
        return (int(major), int(minor), int(patch or 0))

    # -- IPVS virtual servers ----------------------------------------------------
    @staticmethod
    def _service(vs: VirtualServer, full: bool = True):
        fields = dict(addr=vs.address, port=vs.port, protocol=PROTOCOL_NUMBERS[vs.protocol])
        if full:
            flags = vs.flags | (_IP_VS_SVC_F_PERSISTENT if vs.persistence_timeout > 0 else 0)
            fields.update(sched_name=vs.scheduler, timeout=vs.persistence_timeout,
                          flags={"flags": flags, "mask": 0xFFFF_FFFF}, netmask=_HOST_NETMASK)
        return IPVSService(**fields)

    @staticmethod
    def _virtual_server(msg) -> VirtualServer | None:
        attrs = _attrs(msg.get("IPVS_CMD_ATTR_SERVICE"))
        if "IPVS_SVC_ATTR_FWMARK" in attrs and attrs.get("IPVS_SVC_ATTR_FWMARK"):
            return None  # firewall-mark services are not ours
        if attrs.get("IPVS_SVC_ATTR_AF") != socket.AF_INET:
            return None  # IPv4 only, as the interface says
        protocol = _PROTOCOL_NAMES.get(attrs.get("IPVS_SVC_ATTR_PROTOCOL"))
        if protocol is None:
            return None
        flags = attrs.get("IPVS_SVC_ATTR_FLAGS", {}).get("flags", 0)
        return VirtualServer(
            protocol=protocol,
            address=attrs["IPVS_SVC_ATTR_ADDR"],
            port=attrs["IPVS_SVC_ATTR_PORT"],
            scheduler=attrs.get("IPVS_SVC_ATTR_SCHED_NAME", ""),
            persistence_timeout=attrs.get("IPVS_SVC_ATTR_TIMEOUT", 0)
            if flags & _IP_VS_SVC_F_PERSISTENT else 0,
            flags=flags & ~(_IP_VS_SVC_F_PERSISTENT | _IP_VS_SVC_F_HASHED),
        )

    def _ipvs_call(self, what: str, method: str, *args, **kwargs):
        ipvs = self._ipvs_socket()
        try:
            return list(getattr(ipvs, method)(*args, **kwargs))
        except Exception as exc:
            if isinstance(exc, KernelError):
                raise
            raise _translate(exc, what) from exc

    def list_virtual_servers(self) -> list[VirtualServer]:
        found = (self._virtual_server(m) for m in self._ipvs_call("listing IPVS services",
                                                                     "service", "dump"))
        return sorted(vs for vs in found if vs is not None)

    def add_virtual_server(self, vs: VirtualServer) -> None:
        self._ipvs_call(f"adding virtual server {vs}", "service", "add", service=self._service(vs))

    def update_virtual_server(self, vs: VirtualServer) -> None:
        self._ipvs_call(f"updating virtual server {vs}", "service", "set", service=self._service(vs))

    def delete_virtual_server(self, vs: VirtualServer) -> None:
        self._ipvs_call(f"deleting virtual server {vs}", "service", "del",
                        service=self._service(vs, full=False))

    # -- IPVS real servers -------------------------------------------------------
    @staticmethod
    def _dest(rs: RealServer, with_weight: bool = True):
        fields = dict(addr=rs.address, port=rs.port, fwd_method=_IP_VS_CONN_F_MASQ)
        if with_weight:
            fields["weight"] = rs.weight
        return IPVSDest(**fields)

    def list_real_servers(self, vs: VirtualServer) -> list[RealServerState]:
        what = f"listing real servers of {vs}"
        messages = self._ipvs_call(what, "dest", "dump", service=self._service(vs, full=False))
        if not messages:
            # A dump for a missing service is empty rather than an error.
            self._ipvs_call(what, "service", "get", service=self._service(vs, full=False))
        states = []
        for msg in messages:
            attrs = _attrs(msg.get("IPVS_CMD_ATTR_DEST"))
            server = RealServer(attrs["IPVS_DEST_ATTR_ADDR"], attrs["IPVS_DEST_ATTR_PORT"],
                                attrs.get("IPVS_DEST_ATTR_WEIGHT", 0))
            states.append(RealServerState(server, attrs.get("IPVS_DEST_ATTR_ACTIVE_CONNS", 0),
                                          attrs.get("IPVS_DEST_ATTR_INACT_CONNS", 0)))
        return sorted(states, key=lambda s: s.server.key)

    def add_real_server(self, vs: VirtualServer, rs: RealServer) -> None:
        self._ipvs_call(f"adding real server {rs} to {vs}", "dest", "add",
                        service=self._service(vs, full=False), dest=self._dest(rs))

    def update_real_server(self, vs: VirtualServer, rs: RealServer) -> None:
        # "set", not "update": pyroute2 0.9.7 maps "update" to a delete.
        self._ipvs_call(f"setting weight of {rs} in {vs}", "dest", "set",
                        service=self._service(vs, full=False), dest=self._dest(rs))

    def delete_real_server(self, vs: VirtualServer, rs: RealServer) -> None:
        self._ipvs_call(f"deleting real server {rs} from {vs}", "dest", "del",
                        service=self._service(vs, full=False), dest=self._dest(rs, with_weight=False))

    def set_ipvs_timeouts(self, tcp: int, tcp_fin: int, udp: int) -> None:
        attrs = [(name, value) for name, value in (
            ("IPVS_CMD_ATTR_TIMEOUT_TCP", tcp),
            ("IPVS_CMD_ATTR_TIMEOUT_TCP_FIN", tcp_fin),
            ("IPVS_CMD_ATTR_TIMEOUT_UDP", udp),
        ) if value]
        if not attrs:
            return
        msg = _IPVSConfigMsg()
        msg["cmd"] = genl_ipvs.IPVS_CMD_SET_CONFIG
        msg["version"] = genl_ipvs.GENL_VERSION
        msg["attrs"] = attrs
        ipvs = self._ipvs_socket()
        try:
            # pyroute2 has no public call for IPVS_CMD_SET_CONFIG; this is
            # the same path its service()/dest() take.
            ipvs._run_with_cleanup(ipvs.asyncore._do_request, msg)
        except Exception as exc:
            raise _translate(exc, "setting IPVS timeouts") from exc

    # -- the dummy link and its addresses ----------------------------------------
    @staticmethod
    def _link_index(name: str) -> int:
        # One ioctl in this thread's namespace; pyroute2's link_lookup dumps
        # every link, which adds up over thousands of address changes.
        try:
            return socket.if_nametoindex(name)
        except OSError:
            raise NotFound(f"link {name} not found") from None

    def ensure_dummy_link(self, name: str = DUMMY_LINK) -> None:
        ipr = self._iproute()
        try:
            index = self._link_index(name)
        except NotFound:
            try:
                ipr.link("add", ifname=name, kind="dummy")
            except Exception as exc:
                code = _errno_of(exc)
                if code in (errno.EOPNOTSUPP, errno.ENOTSUP) or "Unknown device type" in str(exc):
                    raise IPVSUnavailable("dummy", f"creating link {name}: {exc}") from exc
                if code != errno.EEXIST:
                    raise _translate(exc, f"creating dummy link {name}") from exc
            index = self._link_index(name)
        try:
            ipr.link("set", index=index, state="up")
        except Exception as exc:
            raise _translate(exc, f"setting link {name} up") from exc

    def delete_link(self, name: str) -> None:
        index = self._link_index(name)
        try:
            self._iproute().link("del", index=index)
        except Exception as exc:
            raise _translate(exc, f"deleting link {name}") from exc

    def list_addresses(self, link: str) -> set[str]:
        index = self._link_index(link)
        try:
            messages = list(self._iproute().get_addr(family=socket.AF_INET, index=index))
        except Exception as exc:
            raise _translate(exc, f"listing addresses of {link}") from exc
        return {m.get_attr("IFA_LOCAL") or m.get_attr("IFA_ADDRESS") for m in messages}

    def add_address(self, link: str, address: str) -> None:
        index = self._link_index(link)
        try:
            self._iproute().addr("add", index=index, address=address, prefixlen=32)
        except Exception as exc:
            raise _translate(exc, f"adding {address} to {link}") from exc

    def delete_address(self, link: str, address: str) -> None:
        index = self._link_index(link)
        try:
            self._iproute().addr("del", index=index, address=address, prefixlen=32)
        except Exception as exc:
            raise _translate(exc, f"deleting {address} from {link}") from exc

    # -- ipsets ------------------------------------------------------------------
    def _ipset_call(self, what: str, method: str, *args, on_exist=None, **kwargs):
        """Call IPSet.method; ipset's own "element exists/missing" code maps
        to ``on_exist`` (it is the same number for add and delete)."""
        try:
            result = getattr(self._ipset_socket(), method)(*args, **kwargs)
            return list(result) if result is not None and not isinstance(result, (int, str)) else result
        except KernelError:
            raise
        except Exception as exc:
            code = _errno_of(exc)
            if code == _IPSET_ERR_EXIST and on_exist is not None:
                raise on_exist(what) from exc
            if code == _IPSET_ERR_BUSY:
                raise KernelError(f"{what}: set is in use by a kernel component", errno.EBUSY) from exc
            if code == _IPSET_ERR_FIND_TYPE:
                raise IPVSUnavailable("ip_set", f"{what}: set type not supported") from exc
            raise _translate(exc, what) from exc

    def _set_type(self, name: str) -> str:
        """The set's type, read from the kernel (and remembered for _etype)."""
        self._set_types.pop(name, None)
        messages = self._ipset_call(f"reading ipset {name}", "headers", name)
        for msg in messages:
            typename = msg.get_attr("IPSET_ATTR_TYPENAME")
            if typename:
                self._set_types[name] = typename
                return typename
        raise NotFound(f"ipset {name} not found")

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
        kwargs = dict(stype=spec.set_type, family=family, exclusive=False)
        if bitmap:
            kwargs["bitmap_ports_range"] = spec.port_range
        self._ipset_call(f"creating ipset {spec.name}", "create", spec.name, **kwargs)
        self._set_types[spec.name] = spec.set_type

    @staticmethod
    def _member(entry: IPSetEntry, etype: str):
        parts = []
        for kind in etype.split(","):
            if kind == "port":
                if entry.ip is None:
                    parts.append(entry.port)
                else:
                    protocol = PROTOCOL_NUMBERS[(entry.protocol or "tcp").upper()]
                    parts.append(PortEntry(entry.port, protocol=protocol))
            elif not parts:
                parts.append(entry.ip)
            else:
                parts.append(entry.ip2)
        return tuple(parts) if len(parts) > 1 else parts[0]

    @staticmethod
    def _entry(data) -> IPSetEntry:
        # pyroute2 declares two names for attribute 1 (IP, IP_FROM) and 4
        # (PORT, PORT_FROM); a decoded message carries the later name.
        def first(*names):
            for name in names:
                value = data.get_attr(name)
                if value is not None:
                    return value
            return None

        def ip_of(*names):
            nested = first(*names)
            return nested.get_attr("IPSET_ATTR_IPADDR_IPV4") if nested is not None else None

        ip = ip_of("IPSET_ATTR_IP_FROM", "IPSET_ATTR_IP")
        port = first("IPSET_ATTR_PORT_FROM", "IPSET_ATTR_PORT")
        proto = data.get_attr("IPSET_ATTR_PROTO")
        ip2 = ip_of("IPSET_ATTR_IP2")
        cidr2 = data.get_attr("IPSET_ATTR_CIDR2")
        if ip2 is not None and cidr2 is not None:
            ip2 = f"{ip2}/{cidr2}"
        protocol = _PROTOCOL_NAMES.get(proto, str(proto)).lower() if port is not None and ip else None
        return IPSetEntry(ip=ip, protocol=protocol, port=port, ip2=ip2)

    def _etype(self, name: str) -> str:
        # A member's encoding depends on the set's type. It is remembered
        # rather than read before every add/delete (half the netlink calls);
        # a failed add/delete forgets it, so a set re-created by hand with
        # another type costs one error, then is read again.
        set_type = self._set_types.get(name) or self._set_type(name)
        try:
            return _IPSET_ETYPES[set_type]
        except KeyError:
            raise KernelError(f"ipset {name}: type {set_type} is not supported by the node proxy") from None

    def list_ipset(self, name: str) -> set[IPSetEntry]:
        members: set[IPSetEntry] = set()
        for msg in self._ipset_call(f"listing ipset {name}", "list", name):
            adt = msg.get_attr("IPSET_ATTR_ADT")
            if adt is None:
                continue
            for data in adt.get_attrs("IPSET_ATTR_DATA"):
                members.add(self._entry(data))
        return members

    def add_ipset_entry(self, name: str, entry: IPSetEntry) -> None:
        self._change_member("add", f"adding {entry} to ipset {name}", name, entry, Exists)

    def delete_ipset_entry(self, name: str, entry: IPSetEntry) -> None:
        self._change_member("delete", f"deleting {entry} from ipset {name}", name, entry, NotFound)

    def _change_member(self, method: str, what: str, name: str, entry: IPSetEntry, on_exist) -> None:
        etype = self._etype(name)
        try:
            self._ipset_call(what, method, name, self._member(entry, etype), etype=etype, on_exist=on_exist)
        except (Exists, NotFound):
            raise
        except KernelError:
            self._set_types.pop(name, None)  # perhaps not the type we think
            raise

    def flush_ipset(self, name: str) -> None:
        self._set_type(name)  # flushing a missing set is not an error otherwise
        self._ipset_call(f"flushing ipset {name}", "flush", name)

    def destroy_ipset(self, name: str) -> None:
        self._set_types.pop(name, None)
        self._ipset_call(f"destroying ipset {name}", "destroy", name)

    # -- iptables ------------------------------------------------------------------
    def _run(self, argv: list[str], what: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
        except FileNotFoundError as exc:
            raise KernelError(f"{what}: {argv[0]} is not installed", errno.ENOENT) from exc
        except subprocess.TimeoutExpired as exc:
            raise KernelError(f"{what}: {argv[0]} timed out", errno.ETIMEDOUT) from exc

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
        done = self._rule_command("-I", table, chain, rule)
        if done.returncode != 0:
            if self._missing(done):
                raise NotFound(f"iptables {table}/{chain}: {done.stderr.strip()}")
            raise KernelError(f"iptables -I {chain}: {done.stderr.strip()}")
        return True

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
