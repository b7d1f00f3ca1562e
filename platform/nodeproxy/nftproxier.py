"""The nftables mode's sync: one atomic transaction of what changed.

Shares the IPVS proxier's inputs (informer handlers, change trackers, the
Node's addresses, health, metrics, the bounded-frequency runner's contract)
by extending :class:`~.proxier.Proxier`, and replaces its kernel work:

* **partial sync** (on changes): the changed Services' rules
  (:func:`~.nftrules.service_rules`) are folded into the
  :class:`~.nftdesired.DesiredTable`, which says which chains, sets and
  elements may differ; :func:`~.nftmodel.plan` compares just those with
  ``_applied`` (what the kernel accepted) and the kernel gets one
  transaction. Its size follows the change, not the number of Services.
* **full sync** (at start, every ``sync_period``, after any failure): reads
  our table back from the kernel and plans against the whole of it, which
  repairs drift (a rule or element deleted by hand) and adopts what a
  previous run left.

A transaction is all or nothing, so a failure or a crash midway leaves the
previous rules in force; ``_applied`` changes only after the kernel
accepted, and a failure forces the next sync to be full.

After a transaction, UDP conntrack entries that lead to endpoints no longer
there are cleared (else a client's flow keeps going to a dead pod until the
entry times out), as are entries to a UDP destination that had no endpoint
(they were created by packets nothing answered).
"""

from __future__ import annotations

import logging
import time

from platformd.common.clock import REAL_CLOCK, Clock

from .healthcheck import HealthCheckServers
from .nftdesired import FIXED, DesiredTable, Touched
from .nftkernel import NftKernel
from .nftmodel import EVERYTHING, Table, applied, plan, size
from .nftrules import EMPTY, Options, ServiceRules, fixed_table, service_rules
from .proxier import Proxier, ProxierOptions, SyncResult, _Steps

log = logging.getLogger(__name__)


class NftProxier(Proxier):
    _IPV6_NEEDS_IP6TABLES = False  # one inet table holds both families; ``opts.ipv6`` picks them

    def __init__(self, kernel: NftKernel, opts: ProxierOptions, clock: Clock = REAL_CLOCK, metrics=None,
                 health=None, health_checks: HealthCheckServers | None = None) -> None:
        super().__init__(kernel, opts, clock, metrics, health)  # type: ignore[arg-type]
        self.nft = kernel
        self._table = DesiredTable()
        self._nft_applied: Table | None = None  # None: not read from the kernel yet
        self._fixed_for: tuple | None = None
        self.health_checks = health_checks
        self.last_transaction_size = 0

    def setup_sysctls(self) -> list[str]:
        return []  # nothing the nftables mode needs (IP forwarding is the network plugin's)

    def _sync(self) -> SyncResult:
        start = self.clock.monotonic()
        t0 = time.perf_counter()
        self._steps = _Steps(t0)
        full = self._full_due(start)
        changed, trigger_times = self._take_changes()
        self._steps.done("changes")
        touched = Touched()
        olds = self._update_rules(changed, touched)
        self._steps.done("translate")
        try:
            if full or self._nft_applied is None:
                have = self.nft.read() or Table()
                self._steps.done("read kernel")
                ops = plan(have, self._table.table, EVERYTHING)
            else:
                have = self._nft_applied
                ops = plan(have, self._table.table, touched.names())
            self._steps.done("plan")
            if ops or full:
                self.nft.transact(ops, create_table=full or self._nft_applied is None)
            self._steps.done("transaction")
        except Exception:
            self._needs_full = True
            self._nft_applied = None
            self.metrics.sync_failures.inc()
            raise
        applied(have, ops)
        self._nft_applied = have
        if full:
            self._last_full, self._needs_full = start, False
        self.last_transaction_size = size(ops)
        self._clear_udp(olds)
        self._update_health_checks(olds)
        self._steps.done("after")
        duration = time.perf_counter() - t0
        self._record(start, full, duration, trigger_times)
        self.last_result = SyncResult(full, len(changed), duration, tuple(self._steps.seconds.items()))
        return self.last_result

    def _update_rules(self, changed: set[str], touched: Touched) -> dict[str, tuple[ServiceRules, ServiceRules]]:
        opts = Options(self.opts.hostname, self._node_ips,
                       tuple(c.strip() for c in self.opts.cluster_cidr.split(",") if c.strip()),
                       self.opts.masquerade_all, (4, 6) if self.opts.ipv6 else (4,))
        fixed_key = (opts.node_ips, opts.cluster_cidrs, opts.masquerade_all)
        if fixed_key != self._fixed_for:
            fixed = fixed_table(opts)
            self._table.set(FIXED, ServiceRules(fixed.chains, fixed.sets, frozenset(
                (s, k, v) for s, elems in fixed.elements.items() for k, v in elems.items())), touched)
            self._fixed_for = fixed_key
        olds = {}
        for svc in sorted(changed):
            ports = self._ports.get(svc)
            if ports:
                slices = self._slices_by_service.get(svc, {})
                new = service_rules(ports, [slices[k] for k in sorted(slices)], opts, self._table.get(svc))
            else:
                new = EMPTY
            old = self._table.set(svc, new, touched)
            olds[svc] = (old, new)
        return olds

    def _clear_udp(self, olds: dict[str, tuple[ServiceRules, ServiceRules]]) -> None:
        for old, new in olds.values():
            if not old.udp and not new.udp:
                continue
            for dest, was in old.udp.items():
                now = new.udp.get(dest, frozenset())
                for gone in sorted(was - now):
                    self._clear(dest, gone)
            for dest, now in new.udp.items():
                if now and not old.udp.get(dest):
                    self._clear(dest, None)

    def _clear(self, dest: tuple[str, int], endpoint: str | None) -> None:
        try:
            self.nft.clear_conntrack("UDP", dest[0], dest[1], endpoint)
        except Exception as err:  # noqa: BLE001 - best effort, as in kube-proxy
            log.warning("cannot clear UDP conntrack entries of %s:%d%s: %s", dest[0], dest[1],
                        f" to {endpoint}" if endpoint else "", err)

    def _update_health_checks(self, olds: dict[str, tuple[ServiceRules, ServiceRules]]) -> None:
        if self.health_checks is None:
            return
        for svc, (old, new) in olds.items():
            if old.health or new.health:
                self.health_checks.set(svc, new.health)

    def status(self) -> dict:
        return dict(self._status)

    def _status_document(self, full: bool, duration: float) -> dict:
        t = self._nft_applied or Table()
        return {
            "mode": "nftables",
            "last_sync_time": self.clock.wall(),
            "last_sync_duration_seconds": duration,
            "last_sync_full": full,
            "services": self._table.services(),
            "chains": len(t.chains),
            "map_elements": sum(map(len, t.elements.values())),  # ~400 maps and sets: C-level
            "last_transaction_size": self.last_transaction_size,
        }

    def _summary(self) -> str:
        s = self._status
        return f"{s['services']} services, {s['chains']} chains, transaction of {s['last_transaction_size']}"

    def cleanup(self) -> list[str]:
        try:
            self.nft.delete_table()
        except Exception as err:  # noqa: BLE001
            return [f"delete nftables table: {err}"]
        return []
