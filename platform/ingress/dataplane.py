"""The applier: makes nginx serve a desired Configuration.

nginx.conf depends on the global settings alone (``view.py``); routes,
backends and certificates are data in Lua. ``DataPlane.apply(desired)``
reads as its steps:

1. decide (pure): reload only when the global settings changed;
2. reload (rare): render, ``nginx -t`` the candidate, swap it in
   atomically, SIGHUP, wait for new workers; on any failure the old file
   and workers stay and the error is logged, counted and returned (start
   nginx instead if it is not running). Reloads are at least
   ``min_reload_interval`` apart (``--sync-rate-limit``): one due sooner is
   deferred, and the routes, backends and certificates of the same
   configuration are pushed at once meanwhile (``ApplyResult.reload_in``
   tells the caller when to apply again);
3. push the dynamic sections to Lua and wait for its checksum: every
   section the current master has not confirmed (``_in_lua``). When Lua
   refuses the routes or backends section (validation can never be
   perfect), the servers or backends responsible are found by bisection
   with validate-only POSTs, left out, and everything else is applied
   (``ApplyResult.refused`` names them; the controller reports them);
4. record ``desired`` as running, only now that all of the above succeeded.

Pushing backends: Lua holds a base plus a chain of deltas (configuration.lua),
so when this master confirmed a backends section before, only the difference
goes (``render.backends_delta``), unless the chain is due for compaction
(``render.compact_due``) or Lua answers 409: then the whole section goes.

Ownership. One applier at a time owns what Lua holds: ``_in_lua`` is the
one record of what the current master confirmed, per section, changed only
under ``_apply_lock``. ``submit(desired)`` hands a configuration over (no
I/O) and returns the call that waits for its result; whoever takes the lock
applies the newest handed-over configuration and with it every older one
(latest wins), and all of them get its result.

Every confirmed section is also written to ``<state dir>/lua-state`` (see
``_StateFiles``): a master started after ``kill -9`` of the last one loads
it in init_by_lua (configuration.restore) and serves it from its first
request.

``check()`` (the controller's nginx watcher, every 0.2 s) re-pushes every
section to a new master (nginx restarted: empty shared dicts) and, every
``verify_interval`` seconds, reads Lua's checksums back: a section that
differs from what this master confirmed was changed by someone else and is
pushed again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge

from platformd.common.clock import REAL_CLOCK, Clock
from platformd.ingress import lanes
from platformd.ingress.caches import Caches
from platformd.ingress.decide import decide
from platformd.ingress.luaclient import LuaClient, LuaConflict, LuaError, LuaRejected, LuaTooLarge
from platformd.ingress.model import Configuration
from platformd.ingress.nginx import ConfigTestError, NginxError, NginxProcess
from platformd.ingress.render import (
    DynamicSection,
    backends_delta,
    compact_due,
    dynamic_sections,
    render_nginx_conf,
)
from platformd.ingress.validate import ValidationError
from platformd.ingress.view import RuntimePaths

__all__ = ["ApplyResult", "DataPlane", "Metrics"]

log = logging.getLogger(__name__)

# How often a waiter that may step aside asks whether it should (seconds).
_SUPERSEDED_POLL = 0.05
# The error log file is rotated past this size (checked with the Lua
# checksums, every ``verify_interval``): a crash-looping upstream at warn level
# writes ~200 bytes per request, so 8 MiB is tens of thousands of lines, and
# the state directory holds at most about twice this (#15: logs grew unbounded).
ERROR_LOG_LIMIT = 8 * 1024 * 1024


@dataclass(frozen=True)
class ApplyResult:
    """Outcome of one apply. ``kind``: "reload", "start", "dynamic" or "noop".

    ``reload_in``: seconds until a reload deferred by ``min_reload_interval``
    is due (0: none); everything else of the configuration was applied.
    ``refused``: hosts or backends Lua refused, left out of what was applied.
    """

    kind: str
    error: Exception | None = None
    config_hash: str = ""
    reload_in: float = 0.0
    # What the data plane refused and left out (everything else was applied):
    # ("host" | "backend" | "settings", name, the reason Lua or nginx -t gave).
    refused: tuple[tuple[str, str, str], ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None


class Metrics:
    """ingress-nginx's reload metrics, registered in the given registry.

    The reload counters are gauges that only go up: prometheus_client would
    append ``_total`` to a Counter's name, and dashboards built for
    ingress-nginx query the exact names ``..._success`` and ``..._errors``.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        prefix = "nginx_ingress_controller_"
        self.last_reload_successful = Gauge(
            prefix + "config_last_reload_successful",
            "Whether the last configuration reload attempt was successful",
            registry=registry,
        )
        self.last_reload_timestamp = Gauge(
            prefix + "config_last_reload_successful_timestamp_seconds",
            "Timestamp of the last successful configuration reload",
            registry=registry,
        )
        self.config_hash = Gauge(prefix + "config_hash", "Running configuration hash actually running", registry=registry)
        self.reloads = Gauge(prefix + "success", "Cumulative number of successful reload operations", registry=registry)
        self.reload_errors = Gauge(prefix + "errors", "Cumulative number of failed reload operations", registry=registry)
        self.last_reload_successful.set(1)


class _Ticket:
    """One handed-over configuration; ``result`` is set by whoever applied it (or a newer one)."""

    __slots__ = ("config", "result")

    def __init__(self, config: Configuration) -> None:
        self.config = config
        self.result: ApplyResult | None = None


def _text_digest(text: str) -> str:
    """sha256 of ``text`` as UTF-8, encoded a megabyte at a time: at 10,000
    Ingresses nginx.conf is ~11 MB, and a whole ``encode()`` is that much
    more memory at the controller's peak."""
    digest = hashlib.sha256()
    step = 1 << 20
    for start in range(0, len(text), step):
        digest.update(text[start:start + step].encode())
    return digest.hexdigest()


def _file_digest(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def _hash_metric(text_hash: str) -> float:
    # 52 bits, so the value survives the float a Prometheus sample is.
    return float(int(text_hash[:13], 16))


class _StateFiles:
    """Writes each confirmed section as its POST body to ``directory/<name>.json``
    (mode 0600: certificates carry keys), for configuration.restore in a new
    master. On a thread of its own, latest wins: at 10,000 Ingresses the
    backends section is ~3 MB, not worth holding an endpoint change for."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Condition()
        self._due: dict[str, DynamicSection] = {}
        self._written: dict[str, str] = {}  # name -> checksum on disk
        self._busy = False  # a write in progress
        self._thread: threading.Thread | None = None

    def save(self, sections: tuple[DynamicSection, ...]) -> None:
        with self._lock:
            for section in sections:
                if self._written.get(section.name) != section.checksum:
                    self._due[section.name] = section
            if not self._due:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lua-state-files", daemon=True)
                self._thread.start()
            self._lock.notify()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything saved so far is on disk (tests, shutdown)."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._due and not self._busy, timeout)

    def _run(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._due)
                name, section = self._due.popitem()
                self._busy = True
            try:
                self._write(section)
                written = section.checksum
            except OSError as exc:
                log.warning("cannot save section %s for a new nginx master: %s", name, exc)
                written = None
            with self._lock:
                self._busy = False
                if written is not None:
                    self._written[name] = written
                self._lock.notify_all()

    def _write(self, section: DynamicSection) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        target = self.directory / f"{section.name}.json"
        tmp = target.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(b'{"checksum":"' + section.checksum.encode() + b'","data":' + section.body + b"}")
        os.replace(tmp, target)


class DataPlane:
    def __init__(
        self,
        nginx: NginxProcess,
        lua: LuaClient,
        runtime: RuntimePaths,
        registry: CollectorRegistry,
        *,
        clock: Clock = REAL_CLOCK,
        templates_dir: Path | None = None,
        reload_timeout: float | None = None,  # None: the nginx adapter's (NginxTimeouts.reload)
        start_nginx: bool = True,
        external_master_wait: float = 10.0,
        min_reload_interval: float = 0.0,
        verify_interval: float = 2.0,
        caches: Caches | None = None,
    ) -> None:
        self.nginx = nginx
        # What encoding sections reuses across configurations; shared with the
        # controller that feeds this plane (main passes one), else our own.
        self.caches = caches if caches is not None else Caches()
        self.lua = lua
        self.runtime = runtime
        self.clock = clock
        self.templates_dir = templates_dir
        self.reload_timeout = reload_timeout
        self.start_nginx = start_nginx  # False when a supervisor owns the nginx process
        # With start_nginx False: how long a sync waits for that supervisor's
        # nginx to come up (both start together; the controller is often first).
        self.external_master_wait = external_master_wait
        self.min_reload_interval = min_reload_interval
        self.verify_interval = verify_interval
        self.metrics = Metrics(registry)
        self._apply_lock = threading.Lock()  # the one applier; the fields below change under it
        self._lock = threading.Condition()  # the pending list and results; never held during I/O
        self._pending: list[_Ticket] = []  # handed over, not claimed yet; newest last
        self._last_result = ApplyResult("noop")
        self._running: Configuration | None = None  # recorded only after success
        self._pushed_to_master: int | None = None  # master pid holding our dynamic state
        self._in_lua: dict[str, DynamicSection] = {}  # confirmed by the master ``_in_lua_master``
        self._in_lua_master: int | None = None
        self._chain = (0, 0)  # backends deltas since the last full push: (count, backends named)
        self._last_reload: float | None = None  # monotonic time of the last reload or start
        self._lanes: frozenset[lanes.LaneSpec] = frozenset()  # the generated lanes nginx runs (lanes.py)
        self._last_verify = 0.0
        self.failing_since: float | None = None  # wall time of the first failed apply in a row
        self.state_files = _StateFiles(runtime.lua_state)

    @property
    def running(self) -> Configuration | None:
        """The configuration nginx and Lua were last confirmed to serve."""
        return self._running

    def in_sync(self) -> bool:
        """Health: the last apply succeeded and the live master holds our dynamic state."""
        master = self.nginx.master_pid()
        return self._last_result.ok and master is not None and master == self._pushed_to_master

    def apply(self, desired: Configuration) -> ApplyResult:
        return self.submit(desired)()

    def submit(self, desired: Configuration) -> Callable[..., ApplyResult | None]:
        """Hand ``desired`` over as the newest configuration; the returned call applies it
        (or a newer one) and returns the result.

        Called as ``waiter(superseded)``, it returns None instead once
        ``superseded()`` is true while ``desired`` still waits for the
        applier (it is applied with, or replaced by, a newer one)."""
        ticket = _Ticket(desired)
        with self._lock:
            self._pending.append(ticket)
        return lambda superseded=None: self._wait(ticket, superseded)

    def check(self) -> bool:
        """Re-push what a new master or a foreign writer lost; True if it pushed."""
        with self._apply_lock:
            master = self.nginx.master_pid()
            if master is None or self._running is None:
                return False
            if master != self._pushed_to_master:
                log.info("nginx master changed (%s -> %s); pushing dynamic state again",
                         self._pushed_to_master, master)
                return self._repush(master)
            now = self.clock.monotonic()
            if now - self._last_verify < self.verify_interval:
                return False
            self._last_verify = now
            self.nginx.bound_error_log(ERROR_LOG_LIMIT)
            try:
                held = self.lua.checksums()  # one read for every section
            except Exception:  # noqa: BLE001 - transport trouble is not a foreign change
                return False
            foreign = [name for name, section in self._in_lua.items() if held.get(name) != section.checksum]
            if not foreign:
                return False
            log.warning("Lua holds sections the controller did not push (%s); pushing them again",
                        ", ".join(sorted(foreign)))
            for name in foreign:
                self._in_lua.pop(name, None)
            return self._repush(master)

    # --- the applier ----------------------------------------------------

    def _repush(self, master: int) -> bool:
        try:
            self._push(dynamic_sections(self._running, self.caches), master)
        except LuaError as exc:
            log.warning("re-push failed: %s", exc)
            return False
        return True

    def _wait(self, ticket: _Ticket, superseded: Callable[[], bool] | None = None) -> ApplyResult | None:
        while True:
            with self._lock:
                if ticket.result is not None:
                    return ticket.result
            if not self._apply_lock.acquire(timeout=_SUPERSEDED_POLL):
                if superseded is not None and superseded():
                    with self._lock:
                        if ticket.result is None:
                            return None
                continue
            try:
                with self._lock:
                    if ticket.result is not None:
                        return ticket.result
                    group, self._pending = self._pending, []
                try:
                    result = self._sync(group[-1].config)
                except Exception as exc:  # returned, so no waiter hangs on a bug
                    log.exception("applying configuration crashed")
                    result = ApplyResult("reload", exc)
                with self._lock:
                    for claimed in group:
                        claimed.result = result
                    self._last_result = result
                    self._lock.notify_all()
                if result.ok:
                    self.failing_since = None
                elif self.failing_since is None:
                    self.failing_since = self.clock.wall()
            finally:
                self._apply_lock.release()

    def _sync(self, desired: Configuration) -> ApplyResult:
        """One apply (``_apply_lock`` held)."""
        master = self.nginx.master_pid()
        if master is None and not self.start_nginx:
            master = self._await_external_master()
        decision = decide(self._running, desired, self.caches)
        kind, text_hash, reload_in = ("dynamic" if decision.sections else "noop"), "", 0.0
        record, refused = desired, ()
        reload_refused = ""
        try:
            if master is None or decision.reload:
                wait = self._reload_wait() if master is not None else 0.0
                if wait > 0:
                    # Too soon after the last reload: serve what Lua can now,
                    # keep the running globals on record so the next apply reloads.
                    reload_in = wait
                    record = replace(desired, settings=self._running.settings)
                else:
                    wanted_lanes = lanes.used(desired, self.caches.lanes)
                    lanes.write_files(lanes.files(wanted_lanes, self.runtime.files.lane_files))
                    text = render_nginx_conf(desired, self.runtime, self.templates_dir)
                    text_hash = _text_digest(text)
                    try:
                        kind = self._start(text, text_hash) if master is None else self._reload(text, text_hash)
                        self._lanes = frozenset(wanted_lanes)
                    except ConfigTestError as exc:
                        if master is None or self._running is None:
                            raise
                        # nginx refuses the new global settings: they are left
                        # out (the file and workers stay), everything else is
                        # applied, and the settings are reported as refused.
                        log.error("nginx -t refused the global settings; keeping the running ones: %s", exc)
                        refused = (("settings", "global settings", str(exc)),)
                        record = replace(desired, settings=self._running.settings)
                        reload_refused = str(exc)
                    master = self.nginx.master_pid()
            # Routes needing a lane nginx does not run yet wait for it (lanes.py).
            pushed, held = lanes.hold_back(desired, self._running, self._lanes, self.caches.lanes)
            if held and reload_refused:
                refused += tuple(("host", name, f"nginx refused the lane its routes need: {reload_refused}")
                                 for name in held)
            try:
                sent = self._push(dynamic_sections(pushed, self.caches), master)
            except LuaRejected as exc:
                if isinstance(exc, (LuaConflict, LuaTooLarge)) or not _isolated(exc.section):
                    raise
                pushed, isolated = self._isolate(pushed, exc)
                refused += isolated
                sent = self._push(dynamic_sections(pushed, self.caches), master)
            if pushed is not desired:
                record = replace(pushed, settings=record.settings)
            if kind in ("noop", "dynamic"):
                kind = "dynamic" if sent else "noop"
            self._running = record
        except (ValidationError, NginxError, LuaError) as exc:
            log.error("applying configuration failed (%s): %s", kind, exc)
            return ApplyResult(kind, exc, text_hash)
        return ApplyResult(kind, None, text_hash, reload_in, refused)

    def _isolate(self, desired: Configuration, exc: LuaRejected) -> tuple[Configuration, tuple]:
        """``desired`` without the servers (or backends) Lua refuses, found by
        bisection with validate-only POSTs: about k·log2(n) checks for k bad
        objects among n. Raises ``exc`` when leaving them out does not help
        (the refusal is not any one object's)."""
        field = "backends" if exc.section == "backends" else "servers"
        items = getattr(desired, field)

        def refusal(subset) -> str | None:
            trial = replace(desired, **{field: tuple(subset)})
            section = next(s for s in dynamic_sections(trial, self.caches) if s.name == exc.section)
            return self.lua.check(section)

        def bad(subset: list) -> list[tuple[object, str]]:
            if not subset:
                return []
            reason = refusal(subset)
            if reason is None:
                return []
            if len(subset) == 1:
                return [(subset[0], reason)]
            middle = len(subset) // 2
            return bad(subset[:middle]) + bad(subset[middle:])

        culprits = bad(list(items))
        left_out = {id(item) for item, _ in culprits}
        kept = replace(desired, **{field: tuple(i for i in items if id(i) not in left_out)})
        if not culprits or refusal(getattr(kept, field)) is not None:
            raise exc
        kind = "host" if field == "servers" else "backend"
        refused = tuple((kind, item.hostname if kind == "host" else item.name, reason) for item, reason in culprits)
        for _, name, reason in refused:
            log.warning("Lua refused %s %s, left out: %s", kind, name, reason)
        return kept, refused

    def _reload_wait(self) -> float:
        if self._last_reload is None or self._running is None:
            return 0.0
        return max(0.0, self._last_reload + self.min_reload_interval - self.clock.monotonic())

    def _await_external_master(self) -> int | None:
        """The master pid once someone else's nginx is up, or None after
        ``external_master_wait`` seconds (then the sync fails and is retried)."""
        deadline = self.clock.monotonic() + self.external_master_wait
        while True:
            master = self.nginx.master_pid()
            if master is not None or self.clock.monotonic() >= deadline:
                return master
            self.clock.sleep(0.05)

    def _start(self, text: str, text_hash: str) -> str:
        """Bring nginx up on ``text`` (tested first). "start"."""
        if not self.start_nginx:
            raise NginxError("nginx is not running (its supervisor restarts it)")
        self.nginx.files.prepare()
        if _file_digest(self.nginx.files.conf) != text_hash:
            self._install(text)
        try:
            self.nginx.start()
        except NginxError:
            self._reload_failed()
            raise
        self._record_reload(text_hash)
        return "start"

    def _reload(self, text: str, text_hash: str) -> str:
        """Make the running nginx serve ``text``. "reload", or "noop" if it already does."""
        live = self.nginx.files.conf
        if _file_digest(live) == text_hash:
            # Already running it (a supervised master started from this file):
            # no reload to count, but the hash says what runs.
            self.metrics.config_hash.set(_hash_metric(text_hash))
            return "noop"
        # The file nginx runs now, kept by a second name to be put back if the reload fails.
        previous = live.with_name(live.name + ".previous")
        previous.unlink(missing_ok=True)
        try:
            os.link(live, previous)
        except FileNotFoundError:
            previous = None
        try:
            self._install(text)  # refused: the live file was not touched
        except NginxError:
            if previous is not None:
                previous.unlink(missing_ok=True)
            raise
        try:
            self.nginx.reload(timeout=self.reload_timeout)
        except (NginxError, LuaError):
            self._reload_failed()
            if previous is not None:
                os.replace(previous, live)  # nginx kept the workers running it
            raise
        if previous is not None:
            previous.unlink(missing_ok=True)
        self._record_reload(text_hash)
        return "reload"

    def _install(self, text: str) -> None:
        try:
            self.nginx.install(text)
        except NginxError:
            self._reload_failed()
            raise

    def _reload_failed(self) -> None:
        self.metrics.last_reload_successful.set(0)
        self.metrics.reload_errors.inc()

    def _record_reload(self, text_hash: str) -> None:
        self._last_reload = self.clock.monotonic()
        self.metrics.last_reload_successful.set(1)
        self.metrics.last_reload_timestamp.set(self.clock.wall())
        self.metrics.config_hash.set(_hash_metric(text_hash))
        self.metrics.reloads.inc()

    def _push(self, sections: tuple[DynamicSection, ...], master: int | None) -> int:
        """Push the ``sections`` this master has not confirmed; how many went."""
        if master != self._in_lua_master:
            self._in_lua, self._in_lua_master = {}, master  # a new master starts empty
        sent = 0
        for section in sections:
            try:
                sent += self._push_section(section)
            except LuaError:
                self._in_lua.pop(section.name, None)
                raise
        self._pushed_to_master = master
        self.state_files.save(sections)
        return sent

    def _push_section(self, section: DynamicSection) -> bool:
        base = self._in_lua.get(section.name)
        if base is not None and base.checksum == section.checksum:
            return False  # this master confirmed exactly this already
        if section.name == "backends" and base is not None:
            delta = backends_delta(base, section)
            if not compact_due(self._chain, delta, len(section.items or ())):
                try:
                    self.lua.push_delta(delta)
                except LuaConflict as exc:
                    log.info("backends delta refused (%s); pushing the whole section", exc)
                else:
                    count, named = self._chain
                    self._in_lua[section.name], self._chain = section, (count + 1, named + delta.size)
                    return True
        self.lua.push_section(section)
        self._in_lua[section.name] = section
        if section.name == "backends":
            self._chain = (0, 0)
        return True


def _isolated(section: str) -> bool:
    """Whether a refusal of ``section`` is isolated to the objects responsible
    (backends, or the servers of a routes shard)."""
    return section == "backends" or section.startswith("routes_")
