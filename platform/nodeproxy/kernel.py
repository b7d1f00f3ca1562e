"""The node proxy's door to the kernel in IPVS mode: one small interface per subsystem.

Everything the IPVS mode does to a node goes through one of five protocols,
each a few methods, bundled by :class:`Kernel`:

* :class:`IPVS` -- virtual and real servers;
* :class:`Addresses` -- the dummy link that holds service addresses;
* :class:`IPSets` -- ipsets and their members;
* :class:`Firewall` -- our iptables chains and jumps, and conntrack entries;
* :class:`Sysctl` -- kernel parameters.

(The nftables mode has its own door, :class:`~.nftkernel.NftKernel`.)
The changes done by the thousand are typed operations (:class:`AddRealServer`,
:class:`AddAddress`, :class:`AddIPSetEntry`, ...), applied in bulk by their
subsystem's ``apply``. Three implementations:

* ``kernel_linux.LinuxKernel`` -- one adapter module per subsystem
  (``kernel_ipvs``, ``kernel_addresses``, ``kernel_ipsets``,
  ``kernel_firewall``, ``kernel_sysctl``): hand-encoded netlink in batches
  for IPVS, the dummy link's addresses and ipsets, the iptables and
  conntrack tools, ``/proc/sys``; the only modules that talk to the kernel.
* ``fakekernel.FakeKernel`` -- an in-memory model with the kernel's semantics
  (EEXIST, ENOENT, weights, connection counters) for unit tests and benchmarks;
  one object that is all five subsystems. ``dryrun.DryRunKernel`` wraps it
  and prints every change.

Contract shared by every implementation
---------------------------------------
* Values are immutable typed records and strings; nothing returned is shared
  with the implementation's internal state (callers may keep it). The ones
  made by the ten thousand per sync (:class:`VirtualServer`,
  :class:`RealServer`, :class:`RealServerState`, :class:`IPSetEntry` and the
  ops) are named tuples rather than frozen dataclasses: they are built,
  hashed and compared in C, about 4 times faster, which is what a
  10,000-Service sync costs under emulation. They compare by value and
  order field by field, exactly as dataclasses would; unlike them they also
  unpack like tuples.
* Errors are translated at the boundary into the exceptions below, never raw
  ``OSError``/``NetlinkError``: ENOENT/ESRCH -> :class:`NotFound`,
  EEXIST -> :class:`Exists`, a missing kernel feature -> :class:`IPVSUnavailable`,
  everything else -> :class:`KernelError` (with errno when there is one).
* Methods are synchronous: when one returns, the kernel has the change.
* Bulk: each subsystem's ``apply`` takes many of its ops at once, with
  exactly the semantics of doing each in turn (:func:`apply_one_by_one`),
  and :meth:`IPVS.list_ipvs` reads all of IPVS at once. The proxier uses
  them for every sync, so the number of kernel round trips does not grow
  with the number of Services.
* IPv4 only for now (addresses are dotted quads; host routes are /32).
* Thread-safety: one thread at a time, with one exception.
  ``addresses.apply`` may run on one thread while another thread uses any
  other subsystem (IPVS and ipset ``apply`` and listings, iptables,
  sysctls, conntrack). The proxier uses it to add thousands of addresses,
  slow under RTNL, while it applies real servers. Each implementation keeps
  those two doors apart (separate sockets, or one lock).
"""

from __future__ import annotations

import errno as _errno
from dataclasses import dataclass
from typing import Any, Iterable, NamedTuple, Protocol, Sequence, Union, runtime_checkable

# --- protocols and constants -------------------------------------------------

TCP = "TCP"
UDP = "UDP"
SCTP = "SCTP"
PROTOCOLS = (TCP, UDP, SCTP)
#: IP protocol numbers, for adapters.
PROTOCOL_NUMBERS = {TCP: 6, UDP: 17, SCTP: 132}

#: IPVS schedulers kube-proxy accepts (``--ipvs-scheduler``).
SCHEDULERS = ("rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", "mh")

#: IPVS service flag bits (``include/uapi/linux/ip_vs.h``) that may appear in
#: :attr:`VirtualServer.flags`. Persistence is NOT one of them: it is expressed
#: by ``persistence_timeout > 0`` and the adapter sets IP_VS_SVC_F_PERSISTENT.
FLAG_ONEPACKET = 0x0004
FLAG_SCHED1 = 0x0008  # sh: fallback / mh: fallback
FLAG_SCHED2 = 0x0010  # sh, mh: port
FLAG_SCHED3 = 0x0020

DUMMY_LINK = "kube-ipvs0"


# --- exceptions --------------------------------------------------------------


class KernelError(Exception):
    """A kernel operation failed. ``errno`` is set when the kernel gave one."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class NotFound(KernelError):
    """The object named does not exist (ENOENT/ESRCH)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, _errno.ENOENT)


class Exists(KernelError):
    """The object to create already exists (EEXIST)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, _errno.EEXIST)


class IPVSUnavailable(KernelError):
    """The kernel lacks a feature the node proxy needs.

    ``module`` names the kernel module (``ip_vs``, ``ip_vs_wrr``, ``dummy``,
    ``ip_set``, ...). ``str(exc)`` is one line fit to show the operator.
    """

    def __init__(self, module: str, detail: str = "") -> None:
        msg = f"kernel module {module!r} is not available"
        if detail:
            msg += f": {detail}"
        super().__init__(msg, None)
        self.module = module


# --- values ------------------------------------------------------------------


def host_port(address: str, port: int) -> str:
    """``address:port``, an IPv6 address in brackets (``[fd00::1]:80``), as
    ipvsadm writes it: unambiguous in logs and dry-run lines."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


class VirtualServer(NamedTuple):
    """One IPVS service. Identity is ``key`` = (protocol, address, port).

    ``scheduler`` is an IPVS scheduler name (:data:`SCHEDULERS`).
    ``persistence_timeout`` is in seconds; 0 means no persistence (sessionAffinity
    None); > 0 means IP_VS_SVC_F_PERSISTENT with that timeout and netmask /32.
    ``flags`` holds only the FLAG_* bits above. Forwarding for every real server
    is masquerade (NAT).
    """

    protocol: str
    address: str
    port: int
    scheduler: str = "rr"
    persistence_timeout: int = 0
    flags: int = 0

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.protocol, self.address, self.port)

    def __str__(self) -> str:
        return f"{self.protocol.lower()}:{host_port(self.address, self.port)}"


class RealServer(NamedTuple):
    """One IPVS destination of a virtual server, always forwarded by masquerade.

    Identity within its virtual server is ``key`` = (address, port); ``weight``
    is the only mutable attribute (0 = quiesced: no new connections).
    """

    address: str
    port: int
    weight: int = 1

    @property
    def key(self) -> tuple[str, int]:
        return (self.address, self.port)

    def __str__(self) -> str:
        return host_port(self.address, self.port)


class RealServerState(NamedTuple):
    """A real server as listed by the kernel, with IPVS's connection counters."""

    server: RealServer
    active_connections: int = 0
    inactive_connections: int = 0


class IPSetEntry(NamedTuple):
    """One ipset member, in the parts ipset(8) writes as text.

    Which parts are set depends on the set type:

    ==================  =====================================  ===========================
    type                fields                                 text
    ==================  =====================================  ===========================
    ``hash:ip``         ip                                     ``10.0.0.1``
    ``hash:ip,port``    ip, protocol, port                     ``10.0.0.1,tcp:80``
    ``hash:ip,port,ip`` ip, protocol, port, ip2                ``10.0.0.1,tcp:80,10.0.0.1``
    ``hash:ip,port,net`` ip, protocol, port, ip2 (a CIDR)      ``10.0.0.1,tcp:80,10.0.0.0/8``
    ``bitmap:port``     port                                   ``30080``
    ==================  =====================================  ===========================

    ``protocol`` is lower case (``tcp``/``udp``/``sctp``) as ipset prints it.
    """

    ip: str | None = None
    protocol: str | None = None
    port: int | None = None
    ip2: str | None = None

    def __str__(self) -> str:
        if self.ip is None:
            return str(self.port)
        text = self.ip
        if self.port is not None:
            text += f",{self.protocol}:{self.port}"
        if self.ip2 is not None:
            text += f",{self.ip2}"
        return text

    @classmethod
    def parse(cls, text: str) -> "IPSetEntry":
        parts = text.split(",")
        if len(parts) == 1 and parts[0].isdigit():
            return cls(port=int(parts[0]))
        ip = parts[0]
        protocol = port = ip2 = None
        if len(parts) >= 2:
            proto, _, num = parts[1].rpartition(":")
            protocol, port = (proto or "tcp"), int(num)
        if len(parts) >= 3:
            ip2 = parts[2]
        return cls(ip=ip, protocol=protocol, port=port, ip2=ip2)


@dataclass(frozen=True)
class IPSetSpec:
    """How to create an ipset: name, type (``hash:ip,port`` ...), family and comment.

    For ``bitmap:port`` sets ``port_range`` gives the range (inclusive).
    """

    name: str
    set_type: str
    comment: str = ""
    family: str = "inet"
    port_range: tuple[int, int] = (0, 65535)


# --- typed operations ----------------------------------------------------------
#
# One class per state change done by the thousand, applied in bulk by the
# ``apply`` of its subsystem (:class:`IPVS`, :class:`Addresses`,
# :class:`IPSets`). They are named tuples of their arguments, like the values
# above and for the same reason (a sync builds them by the ten thousand):
# ``AddRealServer(vs, rs)`` unpacks as ``(vs, rs)``. ``method`` names the
# one-op method of the subsystem that does the same (for counting and
# printing); :meth:`call` does it.


class AddVirtualServer(NamedTuple):
    """Create ``vs``. Fails with :class:`Exists` when its key exists already."""

    vs: VirtualServer
    method = "add_virtual_server"

    def call(self, ipvs: "IPVS") -> None:
        ipvs.add_virtual_server(self.vs)


class UpdateVirtualServer(NamedTuple):
    """Set scheduler, persistence and flags of the existing ``vs.key``; real
    servers are kept. Fails with :class:`NotFound`."""

    vs: VirtualServer
    method = "update_virtual_server"

    def call(self, ipvs: "IPVS") -> None:
        ipvs.update_virtual_server(self.vs)


class DeleteVirtualServer(NamedTuple):
    """Delete ``vs.key`` and all its real servers. Fails with :class:`NotFound`."""

    vs: VirtualServer
    method = "delete_virtual_server"

    def call(self, ipvs: "IPVS") -> None:
        ipvs.delete_virtual_server(self.vs)


class AddRealServer(NamedTuple):
    """Add ``rs`` (masquerade forwarding, ``rs.weight``) to ``vs.key``. Fails
    with :class:`Exists` when ``rs.key`` is there already, :class:`NotFound`
    when the virtual server is missing."""

    vs: VirtualServer
    rs: RealServer
    method = "add_real_server"

    def call(self, ipvs: "IPVS") -> None:
        ipvs.add_real_server(self.vs, self.rs)


class UpdateRealServer(NamedTuple):
    """Set the weight of the existing ``rs.key`` in ``vs.key`` to ``rs.weight``;
    connections and counters are kept. Fails with :class:`NotFound`."""

    vs: VirtualServer
    rs: RealServer
    method = "update_real_server"

    def call(self, ipvs: "IPVS") -> None:
        ipvs.update_real_server(self.vs, self.rs)


class DeleteRealServer(NamedTuple):
    """Remove ``rs.key`` from ``vs.key``. Fails with :class:`NotFound`."""

    vs: VirtualServer
    rs: RealServer
    method = "delete_real_server"

    def call(self, ipvs: "IPVS") -> None:
        ipvs.delete_real_server(self.vs, self.rs)


class AddAddress(NamedTuple):
    """Add ``address``/32 to ``link``. Fails with :class:`Exists`, :class:`NotFound` (link)."""

    link: str
    address: str
    method = "add_address"

    def call(self, addresses: "Addresses") -> None:
        addresses.add_address(self.link, self.address)


class DeleteAddress(NamedTuple):
    """Remove ``address`` from ``link``. Fails with :class:`NotFound`."""

    link: str
    address: str
    method = "delete_address"

    def call(self, addresses: "Addresses") -> None:
        addresses.delete_address(self.link, self.address)


class AddIPSetEntry(NamedTuple):
    """Add one member to set ``name``. Fails with :class:`Exists`, :class:`NotFound` (set)."""

    name: str
    entry: IPSetEntry
    method = "add_ipset_entry"

    def call(self, ipset: "IPSets") -> None:
        ipset.add_ipset_entry(self.name, self.entry)


class DeleteIPSetEntry(NamedTuple):
    """Remove one member of set ``name``. Fails with :class:`NotFound` (set or member)."""

    name: str
    entry: IPSetEntry
    method = "delete_ipset_entry"

    def call(self, ipset: "IPSets") -> None:
        ipset.delete_ipset_entry(self.name, self.entry)


IPVSOp = Union[AddVirtualServer, UpdateVirtualServer, DeleteVirtualServer,
               AddRealServer, UpdateRealServer, DeleteRealServer]
AddressOp = Union[AddAddress, DeleteAddress]
IPSetOp = Union[AddIPSetEntry, DeleteIPSetEntry]
AnyOp = Union[IPVSOp, AddressOp, IPSetOp]


def ops_of(op_type: type, args: Iterable[tuple[Any, ...]]) -> list:
    """``[op_type(*a) for a in args]``, built in C without the per-op call.

    A sync makes these by the ten thousand; this costs a third of calling
    the class each time. ``args`` must have the op's number of fields.
    """
    new = tuple.__new__
    return [new(op_type, a) for a in args]


def apply_one_by_one(target: Any, ops: Sequence[AnyOp]) -> list["KernelError | None"]:
    """A subsystem's ``apply`` by calling each op's method in turn: the
    reference semantics."""
    results: list[KernelError | None] = []
    for op in ops:
        try:
            op.call(target)
            results.append(None)
        except IPVSUnavailable:
            raise
        except KernelError as err:
            results.append(err)
    return results


# --- the interfaces: one per subsystem ----------------------------------------
#
# Each implementation also has the one-op methods the ops name
# (``add_virtual_server(vs)``, ``add_address(link, address)``, ...): the same
# as ``apply`` of that one op, raising its error. They are conveniences for
# tests and tools, not part of the interfaces.

_APPLY_DOC = """Do ``ops`` in order; one result per op: None (done) or the error
        the op fails with (:class:`Exists`, :class:`NotFound`, :class:`KernelError`).

        Exactly the semantics of doing each op in turn
        (:func:`apply_one_by_one`): an op that fails changes nothing and does
        not stop the ops after it, so a partial failure leaves the rest
        applied. The point is the cost: an implementation sends many ops per
        kernel round trip. Only :class:`IPVSUnavailable` (and errors of the
        transport itself) are raised instead of returned.
        """


@runtime_checkable
class IPVS(Protocol):
    """IPVS virtual servers and their real servers.

    Virtual servers are identified by ``VirtualServer.key`` and real servers
    by ``RealServer.key``; other attributes are ignored when looking an
    object up.
    """

    def apply(self, ops: Sequence[IPVSOp]) -> list[KernelError | None]:
        ...

    apply.__doc__ = _APPLY_DOC

    def list_ipvs(self) -> dict[VirtualServer, list[RealServerState]]:
        """Every IPVS virtual server with its real servers, read in bulk.

        The same as :meth:`list_virtual_servers` plus :meth:`list_real_servers`
        of each, without one round trip per virtual server.
        """
        ...

    def list_virtual_servers(self) -> list[VirtualServer]:
        """Every IPVS virtual server on the node (ours and anybody's)."""
        ...

    def list_real_servers(self, vs: VirtualServer) -> list[RealServerState]:
        """Real servers of ``vs.key`` with weights and connection counters.

        Raises :class:`NotFound` when the virtual server does not exist.
        """
        ...

    def set_ipvs_timeouts(self, tcp: int, tcp_fin: int, udp: int) -> None:
        """Set IPVS connection timeouts in seconds; 0 leaves that one unchanged."""
        ...


@runtime_checkable
class Addresses(Protocol):
    """The dummy link that holds service addresses, and its addresses."""

    def apply(self, ops: Sequence[AddressOp]) -> list[KernelError | None]:
        ...

    apply.__doc__ = _APPLY_DOC

    def ensure_dummy_link(self, name: str) -> None:
        """Create dummy link ``name`` if missing, and set it up. Idempotent."""
        ...

    def delete_link(self, name: str) -> None:
        """Delete link ``name``. Raises :class:`NotFound`."""
        ...

    def list_addresses(self, link: str) -> set[str]:
        """Addresses (no prefix length) on ``link``: IPv4 ones and IPv6 ones of
        scope global (not the link's own fe80::). Raises :class:`NotFound`."""
        ...


@runtime_checkable
class IPSets(Protocol):
    """ipsets and their members."""

    def apply(self, ops: Sequence[IPSetOp]) -> list[KernelError | None]:
        ...

    apply.__doc__ = _APPLY_DOC

    def ensure_ipset(self, spec: IPSetSpec) -> None:
        """Create the set if missing. An existing set of the same name and type
        is left as it is (entries kept); one of another type raises
        :class:`KernelError`."""
        ...

    def list_ipset(self, name: str) -> set[IPSetEntry]:
        """Members of set ``name``. Raises :class:`NotFound`."""
        ...

    def flush_ipset(self, name: str) -> None:
        """Remove every member of set ``name``. Raises :class:`NotFound`."""
        ...

    def destroy_ipset(self, name: str) -> None:
        """Destroy set ``name``. Raises :class:`NotFound`; :class:`KernelError`
        (EBUSY) while an iptables rule still references it."""
        ...


@runtime_checkable
class Firewall(Protocol):
    """Our iptables chains and the jumps to them, and conntrack entries."""

    def restore_iptables(self, text: str) -> None:
        """Apply ``text`` (iptables-restore format, one or more ``*table`` ...
        ``COMMIT`` blocks) atomically per table, like ``iptables-restore --noflush``.

        Chains declared in the text (``:NAME - [0:0]``) are created or flushed
        and get exactly the rules that follow; ``-X NAME`` deletes a chain; chains
        not named are left untouched. Raises :class:`KernelError` with the
        tool's message when the text is rejected (nothing is changed then).
        """
        ...

    def ensure_iptables_rule(self, table: str, chain: str, rule: tuple[str, ...]) -> bool:
        """Insert ``rule`` (iptables arguments after ``-A CHAIN``) at the top of
        ``chain`` in ``table`` unless an identical rule exists. Returns True
        when it was inserted."""
        ...

    def ensure_iptables_rules(self, rules: Sequence[tuple[str, str, tuple[str, ...]]]) -> list[bool]:
        """:meth:`ensure_iptables_rule` for each ``(table, chain, rule)``, in
        order; one result per rule. The point is the cost: the existing rules
        are read once, not probed rule by rule (each probe is a tool run)."""
        ...

    def delete_iptables_rule(self, table: str, chain: str, rule: tuple[str, ...]) -> None:
        """Delete one identical rule. Raises :class:`NotFound`."""
        ...

    def clear_conntrack(self, protocol: str, address: str, port: int, real_address: str | None = None) -> int:
        """Delete conntrack entries of ``protocol`` (``UDP`` or ``SCTP``) whose
        original destination is ``address``:``port`` and, if ``real_address`` is
        given, whose reply comes from it (the NAT destination). Returns how many
        were deleted (0 when there were none: not an error)."""
        ...


@runtime_checkable
class Sysctl(Protocol):
    """Kernel parameters under ``/proc/sys``."""

    def read_sysctl(self, name: str) -> str:
        """Value of sysctl ``name`` (slash form: ``net/ipv4/vs/conntrack``), stripped.

        Raises :class:`NotFound` when the sysctl does not exist."""
        ...

    def write_sysctl(self, name: str, value: str) -> None:
        """Set sysctl ``name``. Raises :class:`NotFound`, :class:`KernelError` (EPERM, EROFS...)."""
        ...


@runtime_checkable
class Kernel(Protocol):
    """Everything the IPVS mode asks of a node's kernel: the bundle of its
    subsystems, plus the checks and the release that concern them all.

    The subsystems may be one object (the in-memory fake) or several (Linux:
    one socket or tool each); callers only use each through its interface.
    """

    ipvs: IPVS
    addresses: Addresses
    ipset: IPSets
    firewall: Firewall
    sysctl: Sysctl

    def probe(self, schedulers: Iterable[str] = ("rr",)) -> None:
        """Check IPVS (and the given schedulers), dummy links and ipset work.

        Raises :class:`IPVSUnavailable` naming the first missing module
        (e.g. ``ip_vs``, ``ip_vs_wrr``). Side effects: may load modules.
        """
        ...

    def kernel_version(self) -> tuple[int, int, int]:
        """The running kernel's (major, minor, patch), e.g. (6, 1, 0)."""
        ...

    def close(self) -> None:
        """Release sockets. The object must not be used afterwards."""
        ...


#: Subsystem methods (and op methods) that change state; the rest only read.
#: Used for counting and printing.
MUTATING_METHODS = frozenset({
    "add_virtual_server", "update_virtual_server", "delete_virtual_server",
    "add_real_server", "update_real_server", "delete_real_server", "set_ipvs_timeouts",
    "ensure_dummy_link", "delete_link", "add_address", "delete_address",
    "ensure_ipset", "add_ipset_entry", "delete_ipset_entry", "flush_ipset", "destroy_ipset",
    "restore_iptables", "ensure_iptables_rule", "ensure_iptables_rules", "delete_iptables_rule",
    "write_sysctl", "clear_conntrack",
})

READING_METHODS = frozenset({
    "probe", "kernel_version", "list_virtual_servers", "list_real_servers", "list_ipvs",
    "list_addresses", "list_ipset", "read_sysctl",
})
