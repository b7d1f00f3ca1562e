"""The applier: makes nginx serve a desired Configuration.

``DataPlane.apply(desired)`` reads as its steps:

1. decide (pure): reload, dynamic push, or nothing;
2. reload when the shape changed: pre-seed Lua with old+new dynamic state
   (before rendering and ``nginx -t``, which take seconds at 10,000
   Ingresses, so whatever Lua alone can serve is served that much sooner),
   render, ``nginx -t`` the candidate, swap it in atomically, SIGHUP, wait for new workers; on any
   failure the old file and workers stay and the error is logged, counted
   and returned (start nginx instead if it is not running);
3. push the dynamic sections to Lua and wait for its checksum: every
   section the current master has not confirmed (``_in_lua``), so all of
   them to a new master; its shared dicts outlive a reload (SIGHUP);
4. record ``desired`` as running, only now that all of the above succeeded.

Pushing backends: Lua holds a base plus a chain of deltas (configuration.lua),
so when this master confirmed a backends section before, only the difference
goes (``render.backends_delta``), unless the chain is due for compaction
(``render.compact_due``) or Lua answers 409 (its checksum
in force is not our base): then the whole section goes. ``_in_lua`` is what
the current master confirmed per section; it is forgotten when the master
changes or a push fails (then Lua may hold either version).

Concurrency. ``submit(desired)`` hands a configuration over (cheap, no I/O:
callers that must keep an order submit under their own lock) and returns the
call that waits for its result; ``apply`` is both at once. Handed-over
configurations wait as *pending*, newest last; whoever works takes the
newest pending one and with it every older pending one (latest wins), and
all of them get its result. Two lanes:

* dynamic: the newest pending configuration needs no reload compared with
  what nginx.conf is or is about to be (the running configuration, or the
  target of a reload in flight). It is pushed at once under ``_push_lock``,
  never waiting for a reload: at 10,000 Ingresses a reload takes about 30 s
  (``nginx -t`` alone 11 s) and an endpoint change must land in
  milliseconds. During a reload it pushes the union with the running
  configuration (old workers still serve its locations) and leaves itself
  as the newest for the reload to finish with.
* reload: anything else (a reload, a start, the first push to a new master)
  runs under ``_reload_lock``, one at a time; a burst of changes during a
  reload coalesces into one more. When the reload is done it pushes the
  newest configuration pushed dynamically meanwhile (else its own) and
  records that as running.

``_push_lock`` serialises every Lua push and every change to ``_running``
(so what Lua holds and what is recorded always agree); ``_lock`` guards the
pending list and the reload target and is never held during I/O. Lock order:
``_reload_lock`` → ``_push_lock`` → ``_lock``. A dynamic push during a
reload that then fails was still confirmed by Lua; the new shape is not
served until a later apply reloads (the controller retries failed syncs).

A shape change queued behind a reload in flight does not wait for it to be
served where Lua can serve it: its submitter pushes the union of what old
workers, the reload's new workers and it need (``_seed_queued``; the Lua
router serves its new plain hosts from then on), remembers it as
``_seeded``, and the reload in flight finishes by pushing that union again
rather than its own target alone, so nothing seeded is taken back before
its own reload. A waiter can also step aside: ``submit(...)(superseded)``
returns None as soon as ``superseded()`` is true while its configuration
still waits for (or is in) a reload, so a caller with newer work (the
controller, when another sync is due) goes and submits it instead of
holding its thread for a reload of tens of seconds; the configurations it
leaves pending are applied with, or replaced by, the newer one.

``check()`` (run periodically by ``loop``) notices a new master pid (nginx
restarted, its shared dicts are empty) and pushes every section again.
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
from platformd.ingress.decide import decide
from platformd.ingress.luaclient import LuaClient, LuaConflict, LuaError
from platformd.ingress.model import Configuration
from platformd.ingress.nginx import NginxError, NginxProcess
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


@dataclass(frozen=True)
class ApplyResult:
    """Outcome of one apply. ``kind``: "reload", "start", "dynamic" or "noop"."""

    kind: str
    error: Exception | None = None
    config_hash: str = ""

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

    __slots__ = ("config", "claimed", "result")

    def __init__(self, config: Configuration) -> None:
        self.config = config
        self.claimed = False
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
    ) -> None:
        self.nginx = nginx
        self.lua = lua
        self.runtime = runtime
        self.clock = clock
        self.templates_dir = templates_dir
        self.reload_timeout = reload_timeout
        self.start_nginx = start_nginx  # False when a supervisor owns the nginx process
        # With start_nginx False: how long a sync waits for that supervisor's
        # nginx to come up (both start together; the controller is often first).
        self.external_master_wait = external_master_wait
        self.metrics = Metrics(registry)
        self._reload_lock = threading.Lock()  # one reload (or start, or full re-push) at a time
        self._push_lock = threading.Lock()  # one series of Lua pushes; ``_running`` changes under it
        self._lock = threading.Condition()  # the fields below; never held during I/O
        self._pending: list[_Ticket] = []  # handed over, not claimed yet; newest last
        self._reloading: Configuration | None = None  # target of the reload in flight
        self._newer: Configuration | None = None  # pushed dynamically during that reload
        self._seeded: Configuration | None = None  # queued behind that reload, already in Lua
        self._last_result = ApplyResult("noop")
        self._running: Configuration | None = None  # recorded only after success
        self._pushed_to_master: int | None = None  # master pid holding our dynamic state
        self._in_lua: dict[str, DynamicSection] = {}  # confirmed by the master ``_in_lua_master``
        self._in_lua_master: int | None = None
        self._chain = (0, 0)  # backends deltas since the last full push: (count, backends named)

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
        (or a newer one) and returns the result (see the module docstring).

        Called as ``waiter(superseded)``, it returns None instead once
        ``superseded()`` is true while ``desired`` waits for a reload (whatever
        Lua alone can serve of it is served by then); without it, it always
        returns the result."""
        ticket = _Ticket(desired)
        with self._lock:
            self._pending.append(ticket)
        return lambda superseded=None: self._wait(ticket, superseded)

    def check(self) -> bool:
        """Re-push everything if the nginx master changed; True if it pushed."""
        with self._reload_lock, self._push_lock:
            master = self.nginx.master_pid()
            if master is None or master == self._pushed_to_master or self._running is None:
                return False
            log.info("nginx master changed (%s -> %s); pushing dynamic state again", self._pushed_to_master, master)
            try:
                self._push(dynamic_sections(self._running), master)
            except LuaError as exc:
                log.warning("re-push after master change failed: %s", exc)
                return False
            return True

    def loop(self, stop: threading.Event, interval: float = 1.0) -> None:
        """Call ``check`` every ``interval`` seconds until ``stop`` is set."""
        while not self.clock.wait(stop, interval):
            try:
                self.check()
            except Exception:  # the watcher must outlive any one failure
                log.exception("data plane check failed")

    # --- lanes ----------------------------------------------------------

    def _wait(self, ticket: _Ticket, superseded: Callable[[], bool] | None = None) -> ApplyResult | None:
        poll = None if superseded is None else _SUPERSEDED_POLL
        while True:
            with self._lock:
                while ticket.claimed and ticket.result is None:
                    if superseded is not None and superseded():
                        return None
                    self._lock.wait(poll)  # someone applies ours or a newer one
                if ticket.result is not None:
                    return ticket.result
                newest = self._pending[-1]
                reference = self._reloading or self._running
                reloading = self._reloading is not None
            if self._try_dynamic(newest, reference):
                continue
            if reloading:
                self._seed_queued(newest)
            while not self._reload_lock.acquire(timeout=_SUPERSEDED_POLL):
                if ticket.result is not None:
                    return ticket.result  # applied by the reload we waited behind
                if superseded is not None and superseded():
                    return None
            try:
                with self._lock:
                    if ticket.claimed:
                        continue  # taken while we waited for the lock
                    group = self._claim()
                try:
                    result = self._sync(group[-1].config)
                except Exception as exc:  # returned, so no waiter hangs on a bug
                    log.exception("applying configuration crashed")
                    result = ApplyResult("reload", exc)
                self._resolve(group, result)
            finally:
                self._reload_lock.release()

    def _claim(self) -> list[_Ticket]:
        """Take every pending ticket, newest last (``_lock`` held)."""
        group, self._pending = self._pending, []
        for ticket in group:
            ticket.claimed = True
        return group

    def _resolve(self, group: list[_Ticket], result: ApplyResult) -> None:
        with self._lock:
            for ticket in group:
                ticket.result = result
            self._last_result = result
            self._lock.notify_all()

    def _try_dynamic(self, newest: _Ticket, reference: Configuration | None) -> bool:
        """Push ``newest`` on the dynamic lane if it needs no reload; False to take the reload lane."""
        master = self.nginx.master_pid()
        if reference is None or master is None or master != self._pushed_to_master:
            return False
        decision = decide(reference, newest.config)
        if decision.reload:
            return False
        with self._push_lock:
            with self._lock:
                if (self._reloading or self._running) is not reference or self._pending[-1:] != [newest]:
                    return True  # moved on meanwhile: look again
                group = self._claim()
                reloading = self._reloading is not None
                self._seeded = None  # ``newest`` needs no other shape: it replaces any seed
            desired = newest.config
            # During a reload old workers still serve the running locations.
            served = _union(self._running, desired) if reloading else desired
            try:
                sent = self._push(dynamic_sections(served), master)
            except Exception as exc:  # returned, so no waiter hangs (LuaError expected)
                log.error("applying configuration failed (dynamic): %s", exc, exc_info=not isinstance(exc, LuaError))
                result = ApplyResult("dynamic", exc)
            else:
                result = ApplyResult("dynamic" if sent else "noop")
                with self._lock:
                    if reloading:
                        self._newer = desired
                    else:
                        self._running = desired
        self._resolve(group, result)
        return True

    def _seed_queued(self, newest: _Ticket) -> None:
        """``newest`` must wait for a reload while another is in flight: push now
        what Lua can serve of it (see the module docstring). A failure only
        means it is served after its reload, as without this step."""
        master = self.nginx.master_pid()
        with self._push_lock:
            with self._lock:
                target = self._newer or self._reloading
                if (target is None or self._pending[-1:] != [newest] or self._seeded is newest.config
                        or master is None or master != self._pushed_to_master):
                    return
                served = _union(self._running, target)  # old workers and the reload's new ones
            try:
                self._push(dynamic_sections(_union(served, newest.config)), master)
            except LuaError as exc:
                log.warning("could not serve a queued configuration before its reload: %s", exc)
                return
            with self._lock:
                self._seeded = newest.config

    # --- steps ----------------------------------------------------------

    def _sync(self, desired: Configuration) -> ApplyResult:
        """The reload lane (``_reload_lock`` held)."""
        master = self.nginx.master_pid()
        if master is None and not self.start_nginx:
            master = self._await_external_master()
        decision = decide(self._running, desired)
        kind, text_hash = ("dynamic" if decision.sections else "noop"), ""
        try:
            if master is None or decision.reload:
                with self._lock:  # from now on (rendering takes seconds at 10k) pushes go on
                    self._reloading, self._newer, self._seeded = desired, None, None
                try:
                    if master is not None:
                        self._seed(desired, master)
                    text = render_nginx_conf(desired, self.runtime, self.templates_dir)
                    text_hash = _text_digest(text)
                    kind = self._start(text, text_hash) if master is None else self._reload(text, text_hash)
                    del text  # ~11 MB at 10,000 Ingresses; the pushes below need memory too
                except BaseException:
                    with self._lock:
                        self._reloading = self._newer = None
                    raise
                master = self.nginx.master_pid()
            with self._push_lock:
                with self._lock:
                    # The target stays until now, so dynamic applies keep
                    # comparing with the new shape; finish with the newest.
                    desired = self._newer or desired
                    seeded = self._seeded
                    self._reloading = self._newer = self._seeded = None
                # Every section goes that this master has not confirmed: all of
                # them to a new nginx (start, or restarted behind our back: empty
                # shared dicts). A configuration queued behind us and served
                # already (``_seeded``) keeps being served.
                if seeded is not None and master == self._pushed_to_master:
                    desired_in_lua = _union(desired, seeded)
                else:
                    desired_in_lua = desired
                sent = self._push(dynamic_sections(desired_in_lua), master)
                if kind in ("noop", "dynamic"):
                    kind = "dynamic" if sent else "noop"
                with self._lock:
                    self._running = desired
        except (ValidationError, NginxError, LuaError) as exc:
            log.error("applying configuration failed (%s): %s", kind, exc)
            return ApplyResult(kind, exc, text_hash)
        return ApplyResult(kind, None, text_hash)

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

    def _seed(self, desired: Configuration, master: int) -> None:
        """Before a reload renders anything, give Lua the union of the running
        and the desired dynamic state: new workers then find the backends of
        new locations on their first request, old workers (or, should the
        reload fail, the old configuration) still find theirs, and a new host
        the Lua router can serve is served now rather than after render and
        ``nginx -t`` (seconds each at 10,000 Ingresses)."""
        try:
            with self._push_lock:
                self._push(dynamic_sections(_union(self._running, desired)), master)
        except LuaError:
            self._reload_failed()
            raise

    def _reload(self, text: str, text_hash: str) -> str:
        """Make the running nginx serve ``text``. "reload", or "noop" if it already does."""
        live = self.nginx.files.conf
        if _file_digest(live) == text_hash:
            return "noop"
        # The file nginx runs now, kept by a second name (not read into
        # memory: ~11 MB at 10,000 Ingresses) to be put back if the reload fails.
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


def _union(running: Configuration | None, desired: Configuration) -> Configuration:
    """``desired`` plus the backends and certificates only ``running`` has."""
    if running is None:
        return desired
    names = {b.name for b in desired.backends}
    ids = {c.id for c in desired.certificates}
    return replace(
        desired,
        backends=desired.backends + tuple(b for b in running.backends if b.name not in names),
        certificates=desired.certificates + tuple(c for c in running.certificates if c.id not in ids),
    )
