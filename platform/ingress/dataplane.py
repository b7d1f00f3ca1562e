"""The applier: makes nginx serve a desired Configuration.

``DataPlane.apply(desired)`` reads as its steps:

1. decide (pure): reload, dynamic push, or nothing;
2. reload when the shape changed: render, ``nginx -t`` the candidate, swap it
   in atomically, pre-seed Lua with old+new backends, SIGHUP, wait for new
   workers; on any failure the old file and workers stay and the error is
   logged, counted and returned (start nginx instead if it is not running);
3. push the dynamic sections to Lua and wait for its checksum (all of them
   after a reload or when the master changed, else only the changed ones);
4. record ``desired`` as running, only now that all of the above succeeded.

Concurrency: one apply runs at a time. Callers arriving meanwhile leave their
configuration as *pending* (latest wins) and wait; the next to run takes the
newest pending configuration, so a burst of changes during a reload coalesces
into one more apply. A caller whose configuration was superseded gets the
result of the apply that covered it.

``check()`` (run periodically by ``loop``) notices a new master pid (nginx
restarted, its shared dicts are empty) and pushes every section again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge

from platformd.common.clock import REAL_CLOCK, Clock
from platformd.ingress.decide import decide
from platformd.ingress.luaclient import LuaClient, LuaError
from platformd.ingress.model import Configuration
from platformd.ingress.nginx import NginxError, NginxProcess
from platformd.ingress.render import DynamicSection, dynamic_sections, render_nginx_conf
from platformd.ingress.validate import ValidationError
from platformd.ingress.view import RuntimePaths

__all__ = ["ApplyResult", "DataPlane", "Metrics"]

log = logging.getLogger(__name__)


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


def _hash_metric(text: str) -> float:
    # 52 bits, so the value survives the float a Prometheus sample is.
    return float(int(hashlib.sha256(text.encode()).hexdigest()[:13], 16))


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
    ) -> None:
        self.nginx = nginx
        self.lua = lua
        self.runtime = runtime
        self.clock = clock
        self.templates_dir = templates_dir
        self.reload_timeout = reload_timeout
        self.start_nginx = start_nginx  # False when a supervisor owns the nginx process
        self.metrics = Metrics(registry)
        self._apply_lock = threading.Lock()  # one apply (and so one reload) in flight
        self._pending_lock = threading.Lock()
        self._pending: Configuration | None = None
        self._last_result = ApplyResult("noop")
        self._running: Configuration | None = None  # recorded only after success
        self._pushed_to_master: int | None = None  # master pid holding our dynamic state

    @property
    def running(self) -> Configuration | None:
        """The configuration nginx and Lua were last confirmed to serve."""
        return self._running

    def in_sync(self) -> bool:
        """Health: the last apply succeeded and the live master holds our dynamic state."""
        master = self.nginx.master_pid()
        return self._last_result.ok and master is not None and master == self._pushed_to_master

    def apply(self, desired: Configuration) -> ApplyResult:
        with self._pending_lock:
            self._pending = desired
        with self._apply_lock:
            with self._pending_lock:
                config, self._pending = self._pending, None
            if config is None:  # a concurrent apply already took ours (or newer)
                return self._last_result
            self._last_result = self._sync(config)
            return self._last_result

    def check(self) -> bool:
        """Re-push everything if the nginx master changed; True if it pushed."""
        with self._apply_lock:
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

    # --- steps ----------------------------------------------------------

    def _sync(self, desired: Configuration) -> ApplyResult:
        master = self.nginx.master_pid()
        decision = decide(self._running, desired)
        kind, text_hash = ("dynamic" if decision.sections else "noop"), ""
        try:
            if master is None or decision.reload:
                text = render_nginx_conf(desired, self.runtime, self.templates_dir)
                text_hash = hashlib.sha256(text.encode()).hexdigest()
                kind = self._start(text) if master is None else self._reload(text, desired)
                master = self.nginx.master_pid()
            # A new nginx (start, or restarted behind our back) has empty
            # shared dicts; after a reload the contract says push again.
            fresh = kind in ("start", "reload") or master != self._pushed_to_master
            sections = dynamic_sections(desired) if fresh else decision.sections
            self._push(sections, master)
            if kind == "noop" and sections:
                kind = "dynamic"
        except (ValidationError, NginxError, LuaError) as exc:
            log.error("applying configuration failed (%s): %s", kind, exc)
            return ApplyResult(kind, exc, text_hash)
        self._running = desired
        return ApplyResult(kind, None, text_hash)

    def _start(self, text: str) -> str:
        """Bring nginx up on ``text`` (tested first). "start"."""
        if not self.start_nginx:
            raise NginxError("nginx is not running (its supervisor restarts it)")
        self.nginx.files.prepare()
        live = self.nginx.files.conf
        if not live.exists() or live.read_text() != text:
            self._install(text)
        try:
            self.nginx.start()
        except NginxError:
            self._reload_failed()
            raise
        self._record_reload(text)
        return "start"

    def _reload(self, text: str, desired: Configuration) -> str:
        """Make the running nginx serve ``text``. "reload", or "noop" if it already does.

        Between ``nginx -t`` and SIGHUP, Lua gets the union of the running
        and the desired backends and certificates: new workers then find the
        backends of new locations on their first request, and old workers
        (or, should the reload fail, the old configuration) still find theirs.
        """
        live = self.nginx.files.conf
        previous = live.read_text() if live.exists() else None
        if previous == text:
            return "noop"
        self._install(text)
        try:
            self._push(dynamic_sections(_union(self._running, desired)), self.nginx.master_pid())
            self.nginx.reload(timeout=self.reload_timeout)
        except (NginxError, LuaError):
            self._reload_failed()
            if previous is not None:
                _write_atomically(live, previous)  # nginx kept the workers running it
            raise
        self._record_reload(text)
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

    def _record_reload(self, text: str) -> None:
        self.metrics.last_reload_successful.set(1)
        self.metrics.last_reload_timestamp.set(self.clock.wall())
        self.metrics.config_hash.set(_hash_metric(text))
        self.metrics.reloads.inc()

    def _push(self, sections: tuple[DynamicSection, ...], master: int | None) -> None:
        for section in sections:
            self.lua.push(section.name, section.data, section.checksum)
        self._pushed_to_master = master


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


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".restore")
    temporary.write_text(text)
    os.replace(temporary, path)
