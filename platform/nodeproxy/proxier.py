"""The node proxy's sync: make the kernel match the Services, touching only what changed.

Data flow::

    informer handlers --update(prev, cur)--> change trackers --take()--> sync
    sync: changes -> per-Service ServiceState (translate) -> DesiredState.set
          -> Touched (the kernel objects that may differ) -> minimal kernel ops

Two kinds of sync, both run by the bounded-frequency runner through
:meth:`Proxier.sync`:

* **partial** (on changes): looks only at the touched objects and compares
  them with ``_applied``, our record of what we put in the kernel. One
  endpoint change costs a few kernel operations whatever the number of
  Services.
* **full** (every ``sync_period``, at start, and after any failure): reads
  the kernel's actual state (our virtual servers with their real servers,
  the dummy link's addresses, our ipsets), rewrites our iptables chains, and
  compares everything. This repairs drift such as a virtual server deleted by
  hand.

Both hand the kernel whole batches (each subsystem's ``apply``): one for the dummy
link's addresses, one for ipset members, one for virtual servers, one for
real servers, plus rare follow-ups; a full sync reads IPVS with one
``list_ipvs``. So the number of kernel round trips does not grow with the
number of Services (the operations themselves do).

Two kinds of work run on threads of their own (:mod:`.background`), each
waited for before the sync goes on past it: a full sync's fixed parts
(dummy link, ipsets, iptables) while the Services are translated, and
adding addresses to the dummy link while ipset members and real servers
are applied (see :meth:`Proxier._apply` for why that order is safe). The
kernel allows exactly that overlap (``kernel.py``, thread-safety).

Invariants: ``_applied`` only ever records what the kernel confirmed (it is
updated from each operation's result), so a failure midway leaves it true;
the failure is raised to the runner (which retries) and forces the next sync
to be full. Real servers being gracefully terminated belong to the
:class:`~.graceful.GracefulTerminationManager`, not to ``_applied``.
``EEXIST`` on create and ``ENOENT`` on delete mean the kernel already is as
wanted; they are not errors.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

from platformd.common import gcpause
from platformd.common.clock import REAL_CLOCK, Clock

from . import iptables, ipsets, sysctls
from .background import Background
from .changetracker import EndpointSliceChangeTracker, ServiceChangeTracker
from .cleanup import remove_everything
from .desired import DesiredState, Entry, Touched, VSKey
from .graceful import DEFAULT_TIMEOUT, GracefulTerminationManager, clear_conntrack
from .health import ProxierHealth, node_eligible
from .kernel import (
    DUMMY_LINK,
    UDP,
    AddAddress,
    AddIPSetEntry,
    AddRealServer,
    AddVirtualServer,
    DeleteAddress,
    DeleteIPSetEntry,
    DeleteVirtualServer,
    Exists,
    Firewall,
    IPVSOp,
    Kernel,
    KernelError,
    NotFound,
    RealServer,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
    ops_of,
)
from .metrics import Metrics
from .translate import EMPTY, Options, ServicePort, ServiceState, SliceInfo, canonical, is_ip, service_state

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProxierOptions:
    hostname: str
    node_ips: tuple[str, ...] = ()  # empty: taken from this node's Node object
    scheduler: str = "rr"
    masquerade_all: bool = False
    cluster_cidr: str = ""
    sync_period: float = 30.0
    strict_arp: bool = False
    tcp_timeout: int = 0
    tcp_fin_timeout: int = 0
    udp_timeout: int = 0
    graceful_timeout: float = DEFAULT_TIMEOUT
    ipv6: bool = False  # dual-stack: serve IPv6 too (IPVS mode: needs the ip6tables firewall)


@dataclass
class AppliedState:
    """What we put in the kernel and the kernel confirmed."""

    virtual: dict[VSKey, VirtualServer] = field(default_factory=dict)
    reals: dict[VSKey, dict[tuple[str, int], RealServer]] = field(default_factory=dict)
    addresses: set[str] = field(default_factory=set)
    entries: set[Entry] = field(default_factory=set)


@dataclass(frozen=True)
class SyncResult:
    """One sync's outcome. ``steps`` is the wall time of each of its named
    steps, in the order they ran (see :class:`_Steps`), for the logs and the
    benchmark's breakdown."""

    full: bool
    services_changed: int
    duration: float
    steps: tuple[tuple[str, float], ...] = ()


def node_addresses(node: dict | None) -> tuple[str, ...]:
    """InternalIP and ExternalIP addresses of a Node (both families), sorted."""
    addrs = ((node or {}).get("status") or {}).get("addresses") or ()
    return tuple(sorted({canonical(a["address"]) for a in addrs
                         if a.get("type") in ("InternalIP", "ExternalIP") and is_ip(a.get("address"))}))


class Proxier:
    """Owns the trackers, the desired state and the kernel sync.

    Handler-facing methods (``on_service``, ``on_slice``, ``on_node``) only
    record and trigger; ``sync`` (single-threaded, the runner's function) does
    the work.
    """

    #: The IPVS mode's IPv6 rules go through ip6tables; a subclass whose
    #: kernel door serves both families itself says False.
    _IPV6_NEEDS_IP6TABLES = True

    def __init__(self, kernel: Kernel, opts: ProxierOptions, clock: Clock = REAL_CLOCK,
                 metrics: Metrics | None = None, health: ProxierHealth | None = None,
                 ip6tables: Firewall | None = None) -> None:
        """``ip6tables``: where the IPv6 rules go (a firewall whose tool is
        ip6tables, e.g. ``LinuxFirewall(iptables="ip6tables")``); required
        with ``opts.ipv6``, which serves the IPv6 half of the Services the
        way kube-proxy's second, IPv6 IPVS proxier does."""
        if opts.ipv6 and ip6tables is None and self._IPV6_NEEDS_IP6TABLES:
            raise ValueError("dual-stack IPVS needs an ip6tables firewall")
        self.kernel = kernel
        self.ip6tables = ip6tables if opts.ipv6 else None
        self.opts = opts
        self.clock = clock
        self.metrics = metrics or Metrics()
        self.health = health or ProxierHealth(2 * opts.sync_period, clock)
        self.graceful = GracefulTerminationManager(kernel, clock, opts.graceful_timeout)
        self.services = ServiceChangeTracker()
        self.slices = EndpointSliceChangeTracker()
        # Read when scraped rather than set on every event: the handlers run
        # once per Service and EndpointSlice at start (20,000 calls for
        # 10,000 Services), and each gauge update takes a lock.
        self.metrics.service_changes_pending.set_function(self.services.pending)
        self.metrics.endpoint_changes_pending.set_function(self.slices.pending)
        self._last_queued_wall = 0.0
        self.metrics.last_queued.set_function(lambda: self._last_queued_wall)
        self._trigger: Callable[[], None] = lambda: None
        self._node_lock = threading.Lock()
        self._node: dict | None = None
        self._node_dirty = False
        # Sync-thread state.
        self._ports: dict[str, tuple[ServicePort, ...]] = {}
        self._slices_by_service: dict[str, dict[str, SliceInfo]] = {}
        self._node_ips: tuple[str, ...] = opts.node_ips
        self._desired = DesiredState()
        self._applied = AppliedState()
        self._needs_full = True
        self._last_full: float | None = None
        self._steps = _Steps(0.0)
        self.last_result: SyncResult | None = None
        # Published by each successful sync (one assignment), read by /status.
        self._status: dict = {"last_sync_time": None, "last_sync_duration_seconds": None,
                              "virtual_servers": 0, "real_servers": 0}

    # -- handler side ----------------------------------------------------------
    def set_trigger(self, trigger: Callable[[], None]) -> None:
        """``trigger()`` asks for a sync soon (the runner's ``run``)."""
        self._trigger = trigger

    def on_service(self, previous: dict | None, current: dict | None) -> None:
        self.metrics.service_changes.inc()
        if self.services.update(previous, current):
            self._queued()

    def on_slice(self, previous: dict | None, current: dict | None) -> None:
        self.metrics.endpoint_changes.inc()
        if self.slices.update(previous, current):
            self._queued()

    def on_node(self, node: dict | None) -> None:
        with self._node_lock:
            self._node, self._node_dirty = node, True
        self.health.set_node_eligible(node_eligible(node))
        if not self.opts.node_ips and node_addresses(node) != self._node_ips:
            self._queued()

    def _queued(self) -> None:
        self.health.queued()
        self._last_queued_wall = self.clock.wall()
        self._trigger()

    # -- set-up ------------------------------------------------------------------
    def setup_sysctls(self) -> list[str]:
        """Apply the sysctls (see ``sysctls.py``); returns failure messages."""
        version = self.kernel.kernel_version()
        return sysctls.apply(self.kernel.sysctl, sysctls.wanted(version, self.opts.strict_arp, self.opts.ipv6))

    # -- the sync ----------------------------------------------------------------
    def sync(self) -> SyncResult:
        """Apply pending changes; a full reconcile when due. Raises to be retried."""
        # A big sync allocates hundreds of thousands of short-lived objects
        # while the desired and applied state hold as many long-lived ones:
        # with 10,000 Services the initial sync took 3.8 s with the collector
        # on and 1.7 s with it paused.
        with gcpause.paused:
            return self._sync()

    def _sync(self) -> SyncResult:
        start = self.clock.monotonic()
        t0 = time.perf_counter()
        self._steps = _Steps(t0)
        full = self._full_due(start)
        # The fixed parts (dummy link, ipsets, iptables) need no Service: a
        # full sync sets them up on a thread of its own while the Services
        # are translated. Both take ~10 s in an initial sync of 10,000
        # Services in the test VM; the first mostly waits on tools and the
        # kernel, the second is Python.
        base = Background(self._ensure_base, "nodeproxy-base") if full else None
        try:
            changed, trigger_times = self._take_changes()
            self._steps.done("changes")
            touched = self._update_desired(changed)
            self._steps.done("translate")
        except BaseException:
            if base is not None:
                base.join()  # never leave it running into the next sync
            raise
        try:
            if base is not None:
                self._full_sync(base)
                self._last_full, self._needs_full = start, False
            else:
                self._apply(touched)
            if len(self.graceful):
                self.graceful.process()
                self._steps.done("graceful termination")
        except Exception:
            # Whatever failed, _applied may now be behind the kernel: compare
            # everything next time.
            self._needs_full = True
            self.metrics.sync_failures.inc()
            raise
        duration = time.perf_counter() - t0
        self._record(start, full, duration, trigger_times)
        self.last_result = SyncResult(full, len(changed), duration, tuple(self._steps.seconds.items()))
        return self.last_result

    def _update_desired(self, changed: set[str]) -> Touched:
        """Recompute the changed Services' state; what may now differ in the kernel."""
        touched = Touched()
        opts = self._translate_options()
        for svc in sorted(changed):
            self._desired.set(svc, self._translate(svc, opts), touched)
        return touched

    def _full_due(self, now: float) -> bool:
        return (self._needs_full or self._last_full is None
                or now - self._last_full >= self.opts.sync_period)

    def _take_changes(self) -> tuple[set[str], list[str]]:
        """Fold tracker changes into our maps; the Service keys to recompute."""
        changed: set[str] = set()
        for key, ch in self.services.take().items():
            if ch.current:
                self._ports[key] = ch.current
            else:
                self._ports.pop(key, None)
            changed.add(key)
        slice_changes, trigger_times = self.slices.take_with_trigger_times()
        for key, ch in slice_changes.items():
            if ch.previous is not None:
                group = self._slices_by_service.get(ch.previous.service, {})
                group.pop(key, None)
                if not group:
                    self._slices_by_service.pop(ch.previous.service, None)
                changed.add(ch.previous.service)
            if ch.current is not None:
                self._slices_by_service.setdefault(ch.current.service, {})[key] = ch.current
                changed.add(ch.current.service)
        if not self.opts.node_ips:
            with self._node_lock:
                node, dirty, self._node_dirty = self._node, self._node_dirty, False
            if dirty and node_addresses(node) != self._node_ips:
                self._node_ips = node_addresses(node)
                changed |= set(self._ports)  # every node port moves
        return changed, trigger_times

    def _translate_options(self) -> Options:
        families = (4, 6) if self.opts.ipv6 else (4,)
        return Options(self.opts.hostname, self._node_ips, self.opts.scheduler, families)

    def _translate(self, svc: str, opts: Options) -> ServiceState:
        ports = self._ports.get(svc)
        if not ports:
            return EMPTY
        slices = self._slices_by_service.get(svc, {})
        return service_state(ports, [slices[k] for k in sorted(slices)], opts)

    def status(self) -> dict:
        """The ``/status`` document: last successful sync and what it left in the kernel."""
        status = dict(self._status)
        if status.get("last_sync_time") is not None:
            # Counted when asked, not per sync: summing 10,000 Services' real
            # servers was a third of a one-endpoint sync under the test VM.
            status["real_servers"] = self._real_server_count()
        return status

    def _real_server_count(self) -> int:
        # list(): one C-level copy, so a sync changing the dict meanwhile cannot break the count.
        return sum(map(len, list(self._applied.reals.values())))

    def _status_document(self, full: bool, duration: float) -> dict:
        """What ``/status`` shows of the kernel after a successful sync."""
        return {
            "last_sync_time": self.clock.wall(),
            "last_sync_duration_seconds": duration,
            "last_sync_full": full,
            "virtual_servers": len(self._applied.virtual),
            "real_servers": None,  # see ``status``
            "terminating_real_servers": len(self.graceful),
        }

    def _record(self, start: float, full: bool, duration: float, trigger_times: list[str]) -> None:
        self._status = self._status_document(full, duration)
        m = self.metrics
        m.sync_duration.observe(duration)
        (m.sync_full_duration if full else m.sync_partial_duration).observe(duration)
        now_wall = self.clock.wall()
        m.last_sync.set(now_wall)
        for t in trigger_times:
            when = _parse_time(t)
            if when is not None and now_wall >= when:
                m.programming.observe(now_wall - when)
        self.health.updated(start)
        level = logging.INFO if full else logging.DEBUG
        if log.isEnabledFor(level):
            log.log(level, "%s sync done in %.3fs: %s", "full" if full else "partial", duration, self._summary())

    def _summary(self) -> str:
        return (f"{self._status['virtual_servers']} virtual servers, {self._real_server_count()} real servers, "
                f"{self._status['terminating_real_servers']} terminating")

    # -- full sync -------------------------------------------------------------------
    def _full_sync(self, base: Background[None]) -> None:
        """Wait for the fixed parts (``base``: :meth:`_ensure_base`), read the
        kernel's actual state, and compare everything."""
        base.wait()
        self._steps.done("base (waited for)")
        self._steps.alongside("base", base.seconds)
        self._applied = self._read_kernel()
        self._steps.done("read kernel")
        touched = self._desired.everything()
        touched.virtual |= set(self._applied.virtual)
        touched.addresses |= self._applied.addresses
        touched.entries |= self._applied.entries
        self._apply(touched)

    def _ensure_base(self) -> None:
        k = self.kernel
        k.addresses.ensure_dummy_link(DUMMY_LINK)
        for spec in ipsets.SPECS + (ipsets.SPECS6 if self.ip6tables else ()):
            k.ipset.ensure_ipset(spec)
        rules = iptables.RuleOptions(self.opts.masquerade_all, self.opts.cluster_cidr)
        jumps = [(jump.table, jump.chain, jump.rule) for jump in iptables.JUMPS]
        k.firewall.restore_iptables(iptables.render(rules))
        k.firewall.ensure_iptables_rules(jumps)
        if self.ip6tables:
            self.ip6tables.restore_iptables(iptables.render(rules, family=6))
            self.ip6tables.ensure_iptables_rules(jumps)
        o = self.opts
        if (o.tcp_timeout or o.tcp_fin_timeout or o.udp_timeout) and self._last_full is None:
            k.ipvs.set_ipvs_timeouts(o.tcp_timeout, o.tcp_fin_timeout, o.udp_timeout)

    def _read_kernel(self) -> AppliedState:
        k = self.kernel
        state = AppliedState(addresses=k.addresses.list_addresses(DUMMY_LINK))
        for name in ipsets.NAMES + (ipsets.NAMES6 if self.ip6tables else ()):
            state.entries |= {(name, e) for e in k.ipset.list_ipset(name)}
        ours = state.addresses | set(self._node_ips) | self._desired.everything().addresses
        known = set(self._applied.virtual)
        terminating = len(self.graceful) > 0
        for vs, states in k.ipvs.list_ipvs().items():  # one bulk read, not one per virtual server
            key = vs[:3]  # vs.key
            if vs.address not in ours and key not in known:
                continue  # not one of ours
            state.virtual[key] = vs
            servers = [s.server for s in states]
            if terminating:
                servers = [rs for rs in servers if not self.graceful.terminating(vs, rs[:2])]
            state.reals[key] = {rs[:2]: rs for rs in servers}  # by RealServer.key
        return state

    # -- applying a Touched set ------------------------------------------------------
    # Each step builds the operations for every touched object and hands them
    # to its subsystem as one batch (``IPVS.apply`` and the like: one result per op, the
    # rest applied when one fails). Results are then folded into _applied op
    # by op; the rare follow-ups (adopting a virtual server that exists,
    # re-adding one deleted behind our back, "exists"/"missing" real servers)
    # go in a second batch. Any other error is raised once the whole batch
    # is recorded, so _applied stays exactly what the kernel confirmed.
    #
    # The loops below are written for the 10,000-Service sync: per object
    # they make the op and a plain tuple saying what to record, nothing more
    # (under the test VM's emulation each Python object costs ~25 times
    # what it costs on the host).
    def _apply(self, touched: Touched) -> None:
        # An address on the dummy link without its virtual server hands the
        # Service's traffic to the node's own sockets, while a virtual server
        # without its address receives nothing (IPVS sees only packets for
        # local addresses). So addresses go first when deleted and last when
        # added, as kube-proxy orders them. Adding them is the slow part of a
        # big sync (the kernel walks the link's whole address list per
        # insert, under RTNL): it runs on a thread of its own while the ipset
        # members and real servers, behind other kernel locks, are applied.
        adding, dropping = _member_changes(sorted(touched.addresses), self._applied.addresses,
                                           self._desired.has_address)
        if dropping:
            self._apply_addresses([], dropping)
            self._steps.done("addresses deleted")
        keys = sorted(touched.virtual)
        self._apply_virtuals(keys)
        self._steps.done("virtual servers")
        lane = Background(partial(self._apply_addresses, adding, []), "nodeproxy-addresses") if adding else None
        try:
            self._apply_entries(_sorted_entries(touched.entries))
            self._steps.done("ipset members")
            self._apply_reals(keys)
            self._steps.done("real servers")
        except BaseException:
            if lane is not None:
                lane.join()  # its outcome is recorded in _applied; this error wins
            raise
        if lane is not None:
            lane.wait()
            self._steps.done("addresses added (waited for)")
            self._steps.alongside("addresses added", lane.seconds)

    def _apply_addresses(self, adding: list[str], dropping: list[str]) -> None:
        self._apply_members(self.kernel.addresses, adding, dropping, self._applied.addresses, AddAddress, DeleteAddress,
                            lambda addresses: [(DUMMY_LINK, address) for address in addresses])

    def _apply_entries(self, entries: list[Entry]) -> None:
        adding, dropping = _member_changes(entries, self._applied.entries, self._desired.has_entry)
        self._apply_members(self.kernel.ipset, adding, dropping, self._applied.entries,
                            AddIPSetEntry, DeleteIPSetEntry, lambda entries: entries)

    def _apply_members(self, subsystem: Any, adding: list, dropping: list, applied: set,
                       add: type, delete: type, args: Callable[[list], list[tuple]]) -> None:
        """Add ``adding`` and delete ``dropping`` (``args`` makes the ops'
        arguments of a list of them), and record in ``applied`` what the
        kernel confirmed ("exists" on add and "missing" on delete mean it
        already is as wanted)."""
        results = _apply(subsystem, ops_of(add, args(adding)) + ops_of(delete, args(dropping)))
        failures = _Failures()
        for item, error in zip(adding, results):
            if error is None or isinstance(error, Exists):
                applied.add(item)
            else:
                failures.add(error)
        for item, error in zip(dropping, results[len(adding):]):
            if error is None or isinstance(error, NotFound):
                applied.discard(item)
            else:
                failures.add(error)
        failures.raise_first()

    def _apply_virtuals(self, keys: list[VSKey]) -> None:
        adds: list[VirtualServer] = []
        updates: list[VirtualServer] = []
        deletes: list[VirtualServer] = []
        applied, desired = self._applied.virtual, self._desired
        for key in keys:
            wanted = desired.virtual(key)
            have = applied.get(key)
            if wanted is None:
                if have is not None:
                    deletes.append(have)
            elif have is None:
                adds.append(wanted[0])
            elif have != wanted[0]:
                updates.append(wanted[0])
        ops = ([AddVirtualServer(vs) for vs in adds] + [UpdateVirtualServer(vs) for vs in updates]
               + [DeleteVirtualServer(vs) for vs in deletes])
        # ("add"|"update"|"delete", server), as ops
        todo = [("add", vs) for vs in adds] + [("update", vs) for vs in updates] + [("delete", vs) for vs in deletes]
        adopt: list[VirtualServer] = []  # exists already (ours from a previous run)
        again: list[VirtualServer] = []  # deleted behind our back: add it afresh
        failures = _Failures()
        for (what, vs), error in zip(todo, _apply(self.kernel.ipvs, ops)):
            if what == "add":
                if error is None:
                    self._record_virtual(vs, {})
                elif isinstance(error, Exists):
                    adopt.append(vs)
                else:
                    failures.add(error)
            elif what == "update":
                if error is None:
                    self._record_virtual(vs, None)
                elif isinstance(error, NotFound):
                    again.append(self._applied.virtual[vs.key])
                else:
                    failures.add(error)
            elif error is None or isinstance(error, NotFound):
                self._forget_virtual(vs)
            else:
                failures.add(error)
        failures.raise_first()
        for vs in adopt:
            self._adopt(vs)
        for have in again:
            self._forget_virtual(have)
        if again:
            self._apply_virtuals([vs.key for vs in again])

    def _record_virtual(self, vs: VirtualServer, reals: dict | None) -> None:
        self._applied.virtual[vs.key] = vs
        if reals is not None:
            self._applied.reals[vs.key] = reals

    def _adopt(self, vs: VirtualServer) -> None:
        """Take over an existing virtual server: our settings, its real servers as they are."""
        _raise_first(_apply(self.kernel.ipvs, [UpdateVirtualServer(vs)]))
        current = {s.server.key: s.server for s in self.kernel.ipvs.list_real_servers(vs)
                   if not self.graceful.terminating(vs, s.server.key)}
        self._record_virtual(vs, current)

    def _forget_virtual(self, vs: VirtualServer) -> None:
        self._applied.virtual.pop(vs.key, None)
        self._applied.reals.pop(vs.key, None)
        self.graceful.forget_virtual(vs)

    def _apply_reals(self, keys: list[VSKey]) -> None:
        changes = _RealChanges()
        for key in keys:
            wanted = self._desired.virtual(key)
            if wanted is None or key not in self._applied.virtual:
                continue
            vs, reals = wanted
            self._real_changes(vs, reals, changes)
        ops, todo = changes.ops()
        retry_ops: list[IPVSOp] = []
        retry: list[_RealChange] = []
        self._record_reals(todo, _apply(self.kernel.ipvs, ops), retry_ops, retry)
        # The kernel disagreed with _applied (a real server added or deleted
        # behind our back): the other of add / set weight, once.
        self._record_reals(retry, _apply(self.kernel.ipvs, retry_ops), None, None)

    def _real_changes(self, vs: VirtualServer, reals: frozenset[RealServer], changes: "_RealChanges") -> None:
        """Add to ``changes`` what brings ``vs``'s real servers to ``reals``;
        real servers to remove go to graceful termination at once."""
        current = self._applied.reals[vs.key]
        if vs.protocol == UDP and reals and not current:
            # While a UDP service had no endpoints, clients' packets created
            # conntrack entries that lead nowhere; they would outlive the new
            # endpoints, so clear them (kube-proxy does the same).
            clear_conntrack(self.kernel.firewall, vs, None)
        terminating = len(self.graceful) > 0
        if not current and not terminating:  # a new virtual server: add them all
            # Sorted as RealServer tuples = by key, as the keys are unique.
            adds = changes.adds
            for rs in sorted(reals):
                adds.append((True, vs, rs, current))
            return
        wanted = {(rs.address, rs.port): rs for rs in reals}
        gone = current.keys() - wanted.keys()
        if gone:
            self.graceful.remove_all(vs, [current.pop(rkey) for rkey in sorted(gone)])
            terminating = len(self.graceful) > 0
        for rkey in sorted(wanted):
            rs = wanted[rkey]
            have = current.get(rkey)
            if have is None and not (terminating and self.graceful.cancel(vs, rkey)):
                changes.adds.append((True, vs, rs, current))
            elif have is None or have.weight != rs.weight:
                # Back from graceful termination, or a new weight: set it,
                # adding it when it vanished meanwhile.
                changes.updates.append((False, vs, rs, current))

    @staticmethod
    def _record_reals(todo: list[_RealChange], results: list[KernelError | None],
                      retry_ops: list[IPVSOp] | None, retry: list[_RealChange] | None) -> None:
        failures = _Failures()
        for change, error in zip(todo, results):
            adding, vs, rs, current = change
            if error is None:
                current[(rs.address, rs.port)] = rs
            elif retry is not None and isinstance(error, Exists if adding else NotFound):
                retry_ops.append(UpdateRealServer(vs, rs) if adding else AddRealServer(vs, rs))
                retry.append((not adding, vs, rs, current))
            else:
                failures.add(error)
        failures.raise_first()

    # -- cleanup ---------------------------------------------------------------------
    def cleanup(self) -> list[str]:
        """Remove everything the node proxy creates. Returns failure messages."""
        return remove_everything(self.kernel, self._node_ips, self.ip6tables)


#: One real-server op of a batch: (adding?, virtual server, real server, the
#: ``_applied.reals`` dict of that virtual server to record it in).
_RealChange = tuple[bool, VirtualServer, RealServer, dict]


class _RealChanges:
    """The real-server changes of one sync: additions, then weight updates."""

    __slots__ = ("adds", "updates")

    def __init__(self) -> None:
        self.adds: list[_RealChange] = []
        self.updates: list[_RealChange] = []

    def ops(self) -> tuple[list[IPVSOp], list[_RealChange]]:
        """The ops, and the change each one makes (same order)."""
        ops = (ops_of(AddRealServer, [(vs, rs) for _adding, vs, rs, _current in self.adds])
               + ops_of(UpdateRealServer, [(vs, rs) for _adding, vs, rs, _current in self.updates]))
        return ops, self.adds + self.updates


class _Steps:
    """Wall time per named step of one sync: ``done(name)`` charges the
    time since the previous step ended (or ``started``) to ``name``."""

    __slots__ = ("seconds", "_last")

    def __init__(self, started: float) -> None:
        self.seconds: dict[str, float] = {}
        self._last = started

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self._last
        self._last = now

    def alongside(self, name: str, seconds: float) -> None:
        """Record a step that ran on another thread, overlapping the others."""
        self.seconds[f"{name} (alongside)"] = self.seconds.get(f"{name} (alongside)", 0.0) + seconds


class _Failures:
    """The first error no step tolerated or handled; raised once every
    outcome of the batch has been recorded."""

    __slots__ = ("first",)

    def __init__(self) -> None:
        self.first: KernelError | None = None

    def add(self, error: KernelError) -> None:
        if self.first is None:
            self.first = error

    def raise_first(self) -> None:
        if self.first is not None:
            raise self.first


def _apply(subsystem: Any, ops: list) -> list[KernelError | None]:
    """``subsystem.apply(ops)`` (of :class:`~.kernel.IPVS`, ``Addresses`` or
    ``IPSets``), without a call into the kernel for no ops."""
    return subsystem.apply(ops) if ops else []


def _raise_first(results: list[KernelError | None]) -> None:
    for error in results:
        if error is not None:
            raise error


def _member_changes(items: list, applied: set, wanted: Callable[[object], bool]) -> tuple[list, list]:
    """(the wanted ``items`` missing from ``applied``, the unwanted ones in it), in order."""
    return ([i for i in items if i not in applied and wanted(i)],
            [i for i in items if i in applied and not wanted(i)])


def _sorted_entries(entries: set[Entry]) -> list[Entry]:
    """Entries by set name, then member (deterministic op order)."""
    try:
        return sorted(entries)  # compared in C; members of one set share their shape
    except TypeError:  # None against a value: a set holding members of two shapes
        return sorted(entries, key=lambda e: (e[0], str(e[1])))


def _parse_time(text: str) -> float | None:
    try:
        return _dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


__all__ = ["Proxier", "ProxierOptions", "SyncResult", "node_addresses"]
