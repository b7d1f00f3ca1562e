"""An in-memory kernel with the semantics the node proxy relies on.

:class:`FakeKernel` implements :class:`~platformd.nodeproxy.kernel.Kernel`
faithfully enough for unit tests and benchmarks: creating what exists raises
``Exists``, touching what is missing raises ``NotFound``, deleting a virtual
server drops its real servers, weights are kept per real server and
connection counters are kept per real server (tests set them with
:meth:`FakeKernel.set_connections`; IPVS itself never resets them on a weight
change). ``fail_next`` injects an error into the next call of a method.

iptables is modelled as tables of chains of rule strings, enough to check
what ``restore_iptables`` left behind; it does not evaluate rules.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Iterable, Sequence

from .kernel import (
    SCHEDULERS,
    AnyOp,
    apply_one_by_one,
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

_BUILTIN_CHAINS = {
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
}

DEFAULT_SYSCTLS = {
    "net/ipv4/vs/conntrack": "0",
    "net/ipv4/vs/conn_reuse_mode": "1",
    "net/ipv4/vs/expire_nodest_conn": "0",
    "net/ipv4/vs/expire_quiescent_template": "0",
    "net/ipv4/ip_forward": "0",
    "net/ipv6/conf/all/forwarding": "0",
    "net/ipv4/conf/all/arp_ignore": "0",
    "net/ipv4/conf/all/arp_announce": "0",
    "net/bridge/bridge-nf-call-iptables": "1",
}


class _Dest:
    __slots__ = ("weight", "active", "inactive")

    def __init__(self, weight: int) -> None:
        self.weight = weight
        self.active = 0
        self.inactive = 0


class FakeKernel:
    """In-memory :class:`Kernel`. Thread-safe (one lock around everything).

    One object is all five subsystems (:class:`~.kernel.IPVS`,
    ``Addresses``, ``IPSets``, ``Firewall``, ``Sysctl``): they share one
    state and one lock, and ``apply`` takes any op.
    """

    @property
    def ipvs(self) -> "FakeKernel":
        return self

    @property
    def addresses(self) -> "FakeKernel":
        return self

    @property
    def ipset(self) -> "FakeKernel":
        return self

    @property
    def firewall(self) -> "FakeKernel":
        return self

    @property
    def sysctl(self) -> "FakeKernel":
        return self

    def __init__(self, *, ipvs: bool = True, version: tuple[int, int, int] = (6, 1, 0),
                 sysctls: dict[str, str] | None = None) -> None:
        self._lock = threading.RLock()
        self.ipvs_available = ipvs
        self.version = version
        self.virtual: dict[tuple, VirtualServer] = {}
        self.reals: dict[tuple, dict[tuple, _Dest]] = {}
        self.links: dict[str, set[str]] = {}
        self.ipsets: dict[str, tuple[IPSetSpec, set[IPSetEntry]]] = {}
        self.iptables: dict[str, dict[str, list[str]]] = {
            t: {c: [] for c in chains} for t, chains in _BUILTIN_CHAINS.items()}
        self.sysctls: dict[str, str] = dict(DEFAULT_SYSCTLS if sysctls is None else sysctls)
        self.timeouts = (0, 0, 0)
        self.conntrack_cleared: list[tuple[str, str, int, str | None]] = []
        self.calls: list[str] = []
        self._failures: dict[str, list[KernelError]] = defaultdict(list)

    # -- test hooks ---------------------------------------------------------
    def fail_next(self, method: str, error: KernelError | None = None) -> None:
        """Make the next call of ``method`` raise ``error`` (a KernelError by default)."""
        with self._lock:
            self._failures[method].append(error or KernelError(f"injected failure in {method}"))

    def set_connections(self, vs: VirtualServer, rs: RealServer, active: int, inactive: int = 0) -> None:
        with self._lock:
            dest = self._dest(vs, rs)
            dest.active, dest.inactive = active, inactive

    def snapshot(self) -> dict[VirtualServer, dict[tuple[str, int], int]]:
        """Virtual servers mapped to {real server key: weight}, for assertions."""
        with self._lock:
            return {vs: {k: d.weight for k, d in self.reals[key].items()}
                    for key, vs in self.virtual.items()}

    def _enter(self, method: str) -> None:
        self.calls.append(method)
        pending = self._failures.get(method)
        if pending:
            raise pending.pop(0)

    def _need_ipvs(self) -> None:
        if not self.ipvs_available:
            raise IPVSUnavailable("ip_vs", "Generic Netlink family IPVS not found")

    # -- availability -------------------------------------------------------
    def probe(self, schedulers: Iterable[str] = ("rr",)) -> None:
        with self._lock:
            self._enter("probe")
            self._need_ipvs()
            for s in schedulers:
                if s not in SCHEDULERS:
                    raise IPVSUnavailable(f"ip_vs_{s}")

    def kernel_version(self) -> tuple[int, int, int]:
        return self.version

    # -- bulk -----------------------------------------------------------------
    def apply(self, ops: Sequence[AnyOp]) -> list[KernelError | None]:
        """Each op through its own method, so ``calls`` and ``fail_next`` see it."""
        with self._lock:
            return apply_one_by_one(self, ops)

    def list_ipvs(self) -> dict[VirtualServer, list[RealServerState]]:
        with self._lock:
            self._enter("list_ipvs")
            self._need_ipvs()
            return {vs: [RealServerState(RealServer(a, p, d.weight), d.active, d.inactive)
                         for (a, p), d in self.reals[key].items()]
                    for key, vs in self.virtual.items()}

    # -- IPVS -----------------------------------------------------------------
    def list_virtual_servers(self) -> list[VirtualServer]:
        with self._lock:
            self._enter("list_virtual_servers")
            self._need_ipvs()
            return list(self.virtual.values())

    def add_virtual_server(self, vs: VirtualServer) -> None:
        with self._lock:
            self._enter("add_virtual_server")
            self._need_ipvs()
            if vs.scheduler not in SCHEDULERS:
                raise KernelError(f"unknown scheduler {vs.scheduler}", 2)
            if vs.key in self.virtual:
                raise Exists(f"virtual server {vs} exists")
            self.virtual[vs.key] = vs
            self.reals[vs.key] = {}

    def update_virtual_server(self, vs: VirtualServer) -> None:
        with self._lock:
            self._enter("update_virtual_server")
            self._need_ipvs()
            if vs.key not in self.virtual:
                raise NotFound(f"virtual server {vs} not found")
            self.virtual[vs.key] = vs

    def delete_virtual_server(self, vs: VirtualServer) -> None:
        with self._lock:
            self._enter("delete_virtual_server")
            self._need_ipvs()
            if vs.key not in self.virtual:
                raise NotFound(f"virtual server {vs} not found")
            del self.virtual[vs.key]
            del self.reals[vs.key]

    def _dest_map(self, vs: VirtualServer) -> dict[tuple, _Dest]:
        try:
            return self.reals[vs.key]
        except KeyError:
            raise NotFound(f"virtual server {vs} not found") from None

    def _dest(self, vs: VirtualServer, rs: RealServer) -> _Dest:
        try:
            return self._dest_map(vs)[rs.key]
        except KeyError:
            raise NotFound(f"real server {rs} of {vs} not found") from None

    def list_real_servers(self, vs: VirtualServer) -> list[RealServerState]:
        with self._lock:
            self._enter("list_real_servers")
            self._need_ipvs()
            return [RealServerState(RealServer(a, p, d.weight), d.active, d.inactive)
                    for (a, p), d in self._dest_map(vs).items()]

    def add_real_server(self, vs: VirtualServer, rs: RealServer) -> None:
        with self._lock:
            self._enter("add_real_server")
            self._need_ipvs()
            dests = self._dest_map(vs)
            if rs.key in dests:
                raise Exists(f"real server {rs} of {vs} exists")
            dests[rs.key] = _Dest(rs.weight)

    def update_real_server(self, vs: VirtualServer, rs: RealServer) -> None:
        with self._lock:
            self._enter("update_real_server")
            self._need_ipvs()
            self._dest(vs, rs).weight = rs.weight

    def delete_real_server(self, vs: VirtualServer, rs: RealServer) -> None:
        with self._lock:
            self._enter("delete_real_server")
            self._need_ipvs()
            self._dest(vs, rs)
            del self.reals[vs.key][rs.key]

    def set_ipvs_timeouts(self, tcp: int, tcp_fin: int, udp: int) -> None:
        with self._lock:
            self._enter("set_ipvs_timeouts")
            self._need_ipvs()
            old = self.timeouts
            self.timeouts = (tcp or old[0], tcp_fin or old[1], udp or old[2])

    # -- links ------------------------------------------------------------
    def ensure_dummy_link(self, name: str) -> None:
        with self._lock:
            self._enter("ensure_dummy_link")
            self.links.setdefault(name, set())

    def delete_link(self, name: str) -> None:
        with self._lock:
            self._enter("delete_link")
            if name not in self.links:
                raise NotFound(f"link {name} not found")
            del self.links[name]

    def _link(self, name: str) -> set[str]:
        try:
            return self.links[name]
        except KeyError:
            raise NotFound(f"link {name} not found") from None

    def list_addresses(self, link: str) -> set[str]:
        with self._lock:
            self._enter("list_addresses")
            return set(self._link(link))

    def add_address(self, link: str, address: str) -> None:
        with self._lock:
            self._enter("add_address")
            addrs = self._link(link)
            if address in addrs:
                raise Exists(f"address {address} exists on {link}")
            addrs.add(address)

    def delete_address(self, link: str, address: str) -> None:
        with self._lock:
            self._enter("delete_address")
            addrs = self._link(link)
            if address not in addrs:
                raise NotFound(f"address {address} not on {link}")
            addrs.remove(address)

    # -- ipsets -------------------------------------------------------------
    def _set(self, name: str) -> set[IPSetEntry]:
        try:
            return self.ipsets[name][1]
        except KeyError:
            raise NotFound(f"ipset {name} not found") from None

    def ensure_ipset(self, spec: IPSetSpec) -> None:
        with self._lock:
            self._enter("ensure_ipset")
            existing = self.ipsets.get(spec.name)
            if existing is None:
                self.ipsets[spec.name] = (spec, set())
            elif existing[0].set_type != spec.set_type:
                raise KernelError(f"ipset {spec.name} exists with type {existing[0].set_type}")

    def list_ipset(self, name: str) -> set[IPSetEntry]:
        with self._lock:
            self._enter("list_ipset")
            return set(self._set(name))

    def add_ipset_entry(self, name: str, entry: IPSetEntry) -> None:
        with self._lock:
            self._enter("add_ipset_entry")
            members = self._set(name)
            if entry in members:
                raise Exists(f"{entry} is already in {name}")
            if entry.ip is not None and (":" in entry.ip) != (self.ipsets[name][0].family == "inet6"):
                # the kernel refuses an address of the other family (IPSET_ERR_IPADDR_IPV4/6)
                raise KernelError(f"{entry.ip} is not of the family of ipset {name}")
            members.add(entry)

    def delete_ipset_entry(self, name: str, entry: IPSetEntry) -> None:
        with self._lock:
            self._enter("delete_ipset_entry")
            members = self._set(name)
            if entry not in members:
                raise NotFound(f"{entry} is not in {name}")
            members.remove(entry)

    def flush_ipset(self, name: str) -> None:
        with self._lock:
            self._enter("flush_ipset")
            self._set(name).clear()

    def destroy_ipset(self, name: str) -> None:
        with self._lock:
            self._enter("destroy_ipset")
            self._set(name)
            for chains in self.iptables.values():
                for rules in chains.values():
                    if any(f"--match-set {name} " in r for r in rules):
                        raise KernelError(f"ipset {name} is in use by a kernel component", 16)
            del self.ipsets[name]

    # -- iptables -------------------------------------------------------------
    def restore_iptables(self, text: str) -> None:
        with self._lock:
            self._enter("restore_iptables")
            staged = {t: {c: list(r) for c, r in chains.items()} for t, chains in self.iptables.items()}
            table: dict[str, list[str]] | None = None
            for lineno, raw in enumerate(text.splitlines(), 1):
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                if line.startswith("*"):
                    table = staged.setdefault(line[1:], {})
                elif table is None:
                    raise KernelError(f"iptables-restore: line {lineno}: no table")
                elif line == "COMMIT":
                    table = None
                elif line.startswith(":"):
                    table[line[1:].split()[0]] = []
                elif line.startswith("-X "):
                    name = line.split()[1]
                    if name not in table:
                        raise KernelError(f"iptables-restore: line {lineno}: no chain {name}")
                    del table[name]
                elif line.startswith("-A "):
                    _, chain, rest = line.split(" ", 2)
                    if chain not in table:
                        raise KernelError(f"iptables-restore: line {lineno}: no chain {chain}")
                    target = f" {rest}".split(" -j ")[-1].split()[0] if " -j " in f" {rest}" else None
                    if target and target.startswith("KUBE-") and target not in table:
                        raise KernelError(f"iptables-restore: line {lineno}: no chain {target}")
                    table[chain].append(rest)
                else:
                    raise KernelError(f"iptables-restore: line {lineno}: cannot parse {line!r}")
            if table is not None:
                raise KernelError("iptables-restore: missing COMMIT")
            self.iptables = staged

    def ensure_iptables_rule(self, table: str, chain: str, rule: tuple[str, ...]) -> bool:
        with self._lock:
            self._enter("ensure_iptables_rule")
            rules = self.iptables.setdefault(table, {}).get(chain)
            if rules is None:
                raise NotFound(f"chain {chain} not in table {table}")
            text = " ".join(rule)
            if text in rules:
                return False
            rules.insert(0, text)
            return True

    def ensure_iptables_rules(self, rules: Sequence[tuple[str, str, tuple[str, ...]]]) -> list[bool]:
        with self._lock:
            self._enter("ensure_iptables_rules")
        return [self.ensure_iptables_rule(table, chain, rule) for table, chain, rule in rules]

    def delete_iptables_rule(self, table: str, chain: str, rule: tuple[str, ...]) -> None:
        with self._lock:
            self._enter("delete_iptables_rule")
            rules = self.iptables.get(table, {}).get(chain, [])
            text = " ".join(rule)
            if text not in rules:
                raise NotFound(f"rule {text!r} not in {table}/{chain}")
            rules.remove(text)

    # -- sysctl, conntrack -------------------------------------------------------
    def read_sysctl(self, name: str) -> str:
        with self._lock:
            self._enter("read_sysctl")
            if name.startswith("net/ipv4/vs/") and not self.ipvs_available:
                raise NotFound(f"sysctl {name} not found")
            try:
                return self.sysctls[name]
            except KeyError:
                raise NotFound(f"sysctl {name} not found") from None

    def write_sysctl(self, name: str, value: str) -> None:
        with self._lock:
            self._enter("write_sysctl")
            if name not in self.sysctls or (name.startswith("net/ipv4/vs/") and not self.ipvs_available):
                raise NotFound(f"sysctl {name} not found")
            self.sysctls[name] = str(value)

    def clear_conntrack(self, protocol: str, address: str, port: int, real_address: str | None = None) -> int:
        with self._lock:
            self._enter("clear_conntrack")
            self.conntrack_cleared.append((protocol, address, port, real_address))
            return 0

    def close(self) -> None:
        pass
