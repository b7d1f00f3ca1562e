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

Both hand the kernel whole batches (``Kernel.apply``): one for the dummy
link's addresses, one for ipset members, one for virtual servers, one for
real servers, plus rare follow-ups; a full sync reads IPVS with one
``list_ipvs``. So the number of kernel round trips does not grow with the
number of Services (the operations themselves do).

Invariants: ``_applied`` only ever records what the kernel confirmed (it is
updated from each operation's result), so a failure midway leaves it true;
the failure is raised to the runner (which retries) and forces the next sync
to be full. Real servers being gracefully terminated belong to the
:class:`~.graceful.GracefulTerminationManager`, not to ``_applied``.
``EEXIST`` on create and ``ENOENT`` on delete mean the kernel already is as
wanted; they are not errors.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import logging
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from platformd.common.clock import REAL_CLOCK, Clock

from . import iptables, ipsets, sysctls
from .changetracker import EndpointSliceChangeTracker, ServiceChangeTracker
from .cleanup import remove_everything
from .desired import DesiredState, Entry, Touched, VSKey
from .graceful import DEFAULT_TIMEOUT, GracefulTerminationManager, clear_conntrack
from .health import ProxierHealth, node_eligible
from .kernel import DUMMY_LINK, UDP, Exists, Kernel, KernelError, NotFound, Op, RealServer, VirtualServer
from .metrics import Metrics
from .translate import Options, ServicePort, ServiceState, SliceInfo, service_state

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


@dataclass
class AppliedState:
    """What we put in the kernel and the kernel confirmed."""

    virtual: dict[VSKey, VirtualServer] = field(default_factory=dict)
    reals: dict[VSKey, dict[tuple[str, int], RealServer]] = field(default_factory=dict)
    addresses: set[str] = field(default_factory=set)
    entries: set[Entry] = field(default_factory=set)


@dataclass(frozen=True)
class SyncResult:
    full: bool
    services_changed: int
    duration: float


def node_addresses(node: dict | None) -> tuple[str, ...]:
    """IPv4 InternalIP and ExternalIP addresses of a Node, sorted."""
    addrs = ((node or {}).get("status") or {}).get("addresses") or ()
    return tuple(sorted({a["address"] for a in addrs
                         if a.get("type") in ("InternalIP", "ExternalIP") and "." in a.get("address", "")}))


class Proxier:
    """Owns the trackers, the desired state and the kernel sync.

    Handler-facing methods (``on_service``, ``on_slice``, ``on_node``) only
    record and trigger; ``sync`` (single-threaded, the runner's function) does
    the work.
    """

    def __init__(self, kernel: Kernel, opts: ProxierOptions, clock: Clock = REAL_CLOCK,
                 metrics: Metrics | None = None, health: ProxierHealth | None = None) -> None:
        self.kernel = kernel
        self.opts = opts
        self.clock = clock
        self.metrics = metrics or Metrics()
        self.health = health or ProxierHealth(2 * opts.sync_period, clock)
        self.graceful = GracefulTerminationManager(kernel, clock, opts.graceful_timeout)
        self.services = ServiceChangeTracker(self.metrics.service_changes_pending.set)
        self.slices = EndpointSliceChangeTracker(self.metrics.endpoint_changes_pending.set)
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
        self.metrics.last_queued.set(self.clock.wall())
        self._trigger()

    # -- set-up ------------------------------------------------------------------
    def setup_sysctls(self) -> list[str]:
        """Apply the sysctls (see ``sysctls.py``); returns failure messages."""
        version = self.kernel.kernel_version()
        return sysctls.apply(self.kernel, sysctls.wanted(version, self.opts.strict_arp))

    # -- the sync ----------------------------------------------------------------
    def sync(self) -> SyncResult:
        """Apply pending changes; a full reconcile when due. Raises to be retried."""
        with _gc_paused():
            return self._sync()

    def _sync(self) -> SyncResult:
        start = self.clock.monotonic()
        t0 = time.perf_counter()
        changed, trigger_times = self._take_changes()
        touched = self._update_desired(changed)
        full = self._full_due(start)
        try:
            if full:
                self._full_sync()
                self._last_full, self._needs_full = start, False
            else:
                self._apply(touched)
            if len(self.graceful):
                self.graceful.process()
        except Exception:
            # Whatever failed, _applied may now be behind the kernel: compare
            # everything next time.
            self._needs_full = True
            self.metrics.sync_failures.inc()
            raise
        duration = time.perf_counter() - t0
        self._record(start, full, duration, trigger_times)
        self.last_result = SyncResult(full, len(changed), duration)
        return self.last_result

    def _update_desired(self, changed: set[str]) -> Touched:
        """Recompute the changed Services' state; what may now differ in the kernel."""
        touched = Touched()
        for svc in sorted(changed):
            touched.update(self._desired.set(svc, self._translate(svc)))
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

    def _translate(self, svc: str) -> ServiceState:
        opts = Options(self.opts.hostname, self._node_ips, self.opts.scheduler)
        slices = self._slices_by_service.get(svc, {})
        return service_state(self._ports.get(svc, ()), [s for _, s in sorted(slices.items())], opts)

    def status(self) -> dict:
        """The ``/status`` document: last successful sync and what it left in the kernel."""
        return dict(self._status)

    def _record(self, start: float, full: bool, duration: float, trigger_times: list[str]) -> None:
        self._status = {
            "last_sync_time": self.clock.wall(),
            "last_sync_duration_seconds": duration,
            "last_sync_full": full,
            "virtual_servers": len(self._applied.virtual),
            "real_servers": sum(len(r) for r in self._applied.reals.values()),
            "terminating_real_servers": len(self.graceful),
        }
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
        log.log(logging.INFO if full else logging.DEBUG,
                "%s sync done in %.3fs: %d virtual servers, %d real servers, %d terminating",
                "full" if full else "partial", duration, self._status["virtual_servers"],
                self._status["real_servers"], self._status["terminating_real_servers"])

    # -- full sync -------------------------------------------------------------------
    def _full_sync(self) -> None:
        """Ensure the fixed parts, read the kernel's actual state, and compare everything."""
        self._ensure_base()
        self._applied = self._read_kernel()
        touched = self._desired.everything()
        touched.virtual |= set(self._applied.virtual)
        touched.addresses |= self._applied.addresses
        touched.entries |= self._applied.entries
        self._apply(touched)

    def _ensure_base(self) -> None:
        k = self.kernel
        k.ensure_dummy_link(DUMMY_LINK)
        for spec in ipsets.SPECS:
            k.ensure_ipset(spec)
        k.restore_iptables(iptables.render(iptables.RuleOptions(self.opts.masquerade_all, self.opts.cluster_cidr)))
        for jump in iptables.JUMPS:
            k.ensure_iptables_rule(jump.table, jump.chain, jump.rule)
        o = self.opts
        if (o.tcp_timeout or o.tcp_fin_timeout or o.udp_timeout) and self._last_full is None:
            k.set_ipvs_timeouts(o.tcp_timeout, o.tcp_fin_timeout, o.udp_timeout)

    def _read_kernel(self) -> AppliedState:
        k = self.kernel
        state = AppliedState(addresses=k.list_addresses(DUMMY_LINK))
        for name in ipsets.NAMES:
            state.entries |= {(name, e) for e in k.list_ipset(name)}
        ours = state.addresses | set(self._node_ips) | self._desired.everything().addresses
        known = set(self._applied.virtual)
        for vs, states in k.list_ipvs().items():  # one bulk read, not one per virtual server
            if vs.address not in ours and vs.key not in known:
                continue  # not one of ours
            state.virtual[vs.key] = vs
            state.reals[vs.key] = {
                s.server.key: s.server for s in states
                if not self.graceful.terminating(vs, s.server.key)}
        return state

    # -- applying a Touched set ------------------------------------------------------
    # Each step builds the operations for every touched object and hands them
    # to the kernel as one batch (``Kernel.apply``: one result per op, the
    # rest applied when one fails). Results are then folded into _applied op
    # by op; the rare follow-ups (adopting a virtual server that exists,
    # re-adding one deleted behind our back, "exists"/"missing" real servers)
    # go in a second batch. Any other error is raised once the whole batch
    # is recorded, so _applied stays exactly what the kernel confirmed.
    def _apply(self, touched: Touched) -> None:
        self._apply_addresses(sorted(touched.addresses))
        self._apply_entries(sorted(touched.entries, key=lambda e: (e[0], str(e[1]))))
        keys = sorted(touched.virtual)
        self._apply_virtuals(keys)
        self._apply_reals(keys)

    def _run(self, steps: list[_Step]) -> None:
        """Apply the steps' ops as one batch and record each outcome; raise
        the first error no step tolerated or handled."""
        if not steps:
            return
        results = self.kernel.apply([step.op for step in steps])
        failure: KernelError | None = None
        for step, error in zip(steps, results):
            if error is None or isinstance(error, step.tolerate):
                if step.done is not None:
                    step.done()
            elif step.otherwise is not None and isinstance(error, step.otherwise[0]):
                step.otherwise[1]()
            elif failure is None:
                failure = error
        if failure is not None:
            raise failure

    def _apply_addresses(self, addresses: list[str]) -> None:
        steps = []
        for address in addresses:
            want, have = self._desired.has_address(address), address in self._applied.addresses
            if want and not have:
                steps.append(_Step(Op("add_address", (DUMMY_LINK, address)), Exists,
                                   partial(self._applied.addresses.add, address)))
            elif have and not want:
                steps.append(_Step(Op("delete_address", (DUMMY_LINK, address)), NotFound,
                                   partial(self._applied.addresses.discard, address)))
        self._run(steps)

    def _apply_entries(self, entries: list[Entry]) -> None:
        steps = []
        for entry in entries:
            want, have = self._desired.has_entry(entry), entry in self._applied.entries
            if want and not have:
                steps.append(_Step(Op("add_ipset_entry", entry), Exists,
                                   partial(self._applied.entries.add, entry)))
            elif have and not want:
                steps.append(_Step(Op("delete_ipset_entry", entry), NotFound,
                                   partial(self._applied.entries.discard, entry)))
        self._run(steps)

    def _apply_virtuals(self, keys: list[VSKey]) -> None:
        steps: list[_Step] = []
        again: list[VSKey] = []  # deleted behind our back: add it afresh
        adopt: list[VirtualServer] = []  # exists already (ours from a previous run)
        for key in keys:
            wanted = self._desired.virtual(key)
            have = self._applied.virtual.get(key)
            if wanted is None:
                if have is not None:
                    steps.append(_Step(Op("delete_virtual_server", (have,)), NotFound,
                                       partial(self._forget_virtual, have)))
                continue
            vs = wanted[0]
            if have is None:
                steps.append(_Step(Op("add_virtual_server", (vs,)), (), partial(self._record_virtual, vs, {}),
                                   (Exists, partial(adopt.append, vs))))
            elif have != vs:
                steps.append(_Step(Op("update_virtual_server", (vs,)), (), partial(self._record_virtual, vs, None),
                                   (NotFound, partial(again.append, have))))
        self._run(steps)
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
        self.kernel.update_virtual_server(vs)
        current = {s.server.key: s.server for s in self.kernel.list_real_servers(vs)
                   if not self.graceful.terminating(vs, s.server.key)}
        self._record_virtual(vs, current)

    def _forget_virtual(self, vs: VirtualServer) -> None:
        self._applied.virtual.pop(vs.key, None)
        self._applied.reals.pop(vs.key, None)
        self.graceful.forget_virtual(vs)

    def _apply_reals(self, keys: list[VSKey]) -> None:
        steps: list[_Step] = []
        retry: list[_Step] = []  # add <-> set weight, when the kernel disagreed with _applied
        for key in keys:
            wanted = self._desired.virtual(key)
            if wanted is None or key not in self._applied.virtual:
                continue
            vs, reals = wanted
            steps += self._real_steps(vs, reals, retry)
        self._run(steps)
        self._run(retry)

    def _real_steps(self, vs: VirtualServer, reals: frozenset[RealServer], retry: list[_Step]) -> list[_Step]:
        current = self._applied.reals[vs.key]
        wanted = {rs.key: rs for rs in reals}
        if vs.protocol == UDP and wanted and not current:
            # While a UDP service had no endpoints, clients' packets created
            # conntrack entries that lead nowhere; they would outlive the new
            # endpoints, so clear them (kube-proxy does the same).
            clear_conntrack(self.kernel, vs, None)
        self.graceful.remove_all(vs, [current.pop(rkey) for rkey in sorted(current.keys() - wanted.keys())])
        steps = []
        for rkey, rs in sorted(wanted.items()):
            have = current.get(rkey)
            if have is not None and have.weight == rs.weight:
                continue
            record = partial(current.__setitem__, rkey, rs)
            add, update = Op("add_real_server", (vs, rs)), Op("update_real_server", (vs, rs))
            if have is None and not self.graceful.cancel(vs, rkey):
                steps.append(_Step(add, (), record, (Exists, partial(retry.append, _Step(update, (), record)))))
            else:
                # Back from graceful termination, or a new weight: set it,
                # adding it when it vanished meanwhile.
                steps.append(_Step(update, (), record, (NotFound, partial(retry.append, _Step(add, (), record)))))
        return steps

    # -- cleanup ---------------------------------------------------------------------
    def cleanup(self) -> list[str]:
        """Remove everything the node proxy creates. Returns failure messages."""
        return remove_everything(self.kernel, self._node_ips)


@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector for the duration of a sync.

    A big sync allocates hundreds of thousands of short-lived, acyclic
    objects (ops, steps, states) while the desired and applied state hold
    as many long-lived ones, so the collector keeps re-scanning the whole
    heap: with 10,000 Services the initial sync took 3.8 s on the host with
    it and 1.7 s without (and the VM multiplies both). Refcounting frees
    what a sync drops; cycles, if any, wait for the next collection after
    it. Left alone when something else already disabled the collector.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass
class _Step:
    """One op of a batch and what its outcome means for ``_applied``.

    ``done`` runs when the op succeeded or failed with a ``tolerate``d error
    (the kernel already is as wanted); ``otherwise = (error class, fn)`` runs
    ``fn`` instead when the op failed with that error; any other error is raised.
    """

    op: Op
    tolerate: type[KernelError] | tuple[type[KernelError], ...] = ()
    done: Callable[[], object] | None = None
    otherwise: tuple[type[KernelError], Callable[[], object]] | None = None


def _parse_time(text: str) -> float | None:
    try:
        return _dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


__all__ = ["Proxier", "ProxierOptions", "SyncResult", "node_addresses"]
