"""The applier: makes nginx serve a desired Configuration.

``DataPlane.apply(desired)`` reads as its steps:

1. decide (pure): reload, dynamic push, or nothing;
2. reload when the shape changed: render, ``nginx -t`` the candidate, swap it
   in atomically, SIGHUP, wait for new workers; on any failure the old file
   and workers stay and the error is logged, counted and returned;
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
from dataclasses import dataclass
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
        reload_timeout: float = 10.0,
    ) -> None:
        self.nginx = nginx
        self.lua = lua
        self.runtime = runtime
        self.clock = clock
        self.templates_dir = templates_dir
        self.reload_timeout = reload_timeout
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
        kind = "dynamic" if decision.sections else "noop"
        text_hash = ""
        sections = decision.sections
        try:
            if master is None or decision.reload:
                text = render_nginx_conf(desired, self.runtime, self.templates_dir)
                text_hash = hashlib.sha256(text.encode()).hexdigest()
                kind = self._reload_or_start(text, master)
                master = self.nginx.master_pid()
            if master != self._pushed_to_master or kind in ("reload", "start"):
                sections = dynamic_sections(desired)
            self._push(sections, master)
        except (ValidationError, NginxError, LuaError) as exc:
            log.error("applying configuration failed (%s): %s", kind, exc)
            return ApplyResult(kind, exc, text_hash)
        self._running = desired
        return ApplyResult(kind, None, text_hash)

    def _reload_or_start(self, text: str, master: int | None) -> str:
        """Make nginx run ``text``; "start", "reload" or "noop" (file already live)."""
        live = self.nginx.files.conf
        previous = live.read_text() if live.exists() else None
        if master is None:
            self.nginx.files.prepare()
            if previous != text:
                self._install(text)
            self.nginx.start()
            self._record_reload(text)
            return "start"
        if previous == text:
            return "noop"
        self._install(text)
        try:
            self.nginx.reload(timeout=self.reload_timeout)
        except NginxError:
            self._reload_failed()
            if previous is not None:
                # nginx kept the old workers; put the file they run back.
                restore = live.with_name(live.name + ".restore")
                restore.write_text(previous)
                os.replace(restore, live)
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
