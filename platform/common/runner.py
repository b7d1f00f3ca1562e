"""Run one sync function at a bounded frequency (after kube-proxy's runner).

Event handlers never sync; they mark state dirty and call ``run()``. The
runner decides when the sync actually happens, so a storm of changes costs a
bounded number of syncs and a quiet period still gets a periodic full sync.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from platformd.common.clock import REAL_CLOCK, Clock

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunnerHealth:
    """A snapshot of a runner's progress; all times are the runner clock's monotonic seconds.

    ``pending_since`` is when the oldest change that has not yet been applied
    successfully was requested (a ``run()`` call, or a failed run); None means
    everything requested has been applied.
    """

    name: str
    last_success: float | None
    pending_since: float | None
    consecutive_failures: int
    last_error: str | None


class BoundedFrequencyRunner:
    """Calls ``fn`` from ``loop``'s thread, never concurrently with itself.

    Contract:

    * ``run()`` asks for a call soon. It never blocks and never calls ``fn``
      itself. Any number of ``run()`` calls before the call starts are merged
      into that one call; a ``run()`` while ``fn`` is running causes exactly
      one more call afterwards.
    * Two calls start at least ``min_interval`` apart (measured start to
      start); a ``run()`` sooner than that is served when the interval is up.
    * ``fn`` is called at least every ``max_interval`` (measured from the end
      of the previous call, or from the start of ``loop``), even with no
      ``run()``: the periodic full sync that repairs anything missed.
    * ``fn`` raising means "failed, try again": the next call is at most
      ``retry_interval`` after the failed one started (still no sooner than
      ``min_interval``; a ``run()`` may bring it earlier). The exception is
      logged with its traceback; it is not re-raised.
    * Before ``loop`` starts nothing is called; the first call happens on the
      first ``run()`` (immediately) or after ``max_interval``.
    * ``loop(stop_event)`` returns promptly once ``stop_event`` is set, after
      any call in progress returns. It does not make a final call.
    * Health (``health``, ``healthy``) means "requested changes were applied
      recently", not "the thread is alive": a runner whose ``fn`` keeps failing
      or whose loop is stuck becomes unhealthy.
    """

    def __init__(self, name: str, fn: Callable[[], None], min_interval: float,
                 max_interval: float, retry_interval: float, clock: Clock = REAL_CLOCK) -> None:
        if not 0 <= min_interval <= max_interval:
            raise ValueError("need 0 <= min_interval <= max_interval")
        if retry_interval <= 0:
            raise ValueError("retry_interval must be > 0")
        self.name = name
        self._fn = fn
        self._min_interval = min_interval
        self._max_interval = max_interval
        self._retry_interval = retry_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Event()
        # State under ``_lock``. Times are ``clock.monotonic()``.
        self._requested = False                 # a run() not yet picked up by a call
        self._last_start: float | None = None   # start of the latest call
        self._last_end: float | None = None     # end of the latest call, or loop start
        self._retry_at: float | None = None     # set while the latest call failed
        self._pending_since: float | None = None
        self._last_success: float | None = None
        self._failures = 0
        self._last_error: str | None = None

    def run(self) -> None:
        """Ask for a call of ``fn`` (see the class contract); never blocks."""
        with self._lock:
            self._requested = True
            if self._pending_since is None:
                self._pending_since = self._clock.monotonic()
        self._wake.set()

    def requested(self) -> bool:
        """Whether a ``run()`` came that no call has picked up yet: a call in
        progress may use it to hand over early to the next one."""
        with self._lock:
            return self._requested

    def loop(self, stop_event: threading.Event) -> None:
        """Serve ``run()`` requests and periodic calls until ``stop_event`` is set."""
        wake_on(stop_event, self._wake, f"runner-{self.name}")
        with self._lock:
            self._last_end = self._clock.monotonic()
        while not stop_event.is_set():
            with self._lock:
                now = self._clock.monotonic()
                due = self._next_call_at()
                if due > now:
                    self._wake.clear()
            if due > now:
                # A stop set before the clear above is seen here; one set
                # after it sets ``_wake`` and ends the wait.
                if stop_event.is_set():
                    break
                self._clock.wait(self._wake, due - now)
                continue
            self._call_once()

    def _next_call_at(self) -> float:
        """When the next call is due. Holds ``_lock``."""
        assert self._last_end is not None
        due = self._last_end + self._max_interval
        if self._requested:
            due = min(due, self._last_start if self._last_start is not None else self._last_end)
        if self._retry_at is not None:
            due = min(due, self._retry_at)
        if self._last_start is not None:
            due = max(due, self._last_start + self._min_interval)
        return due

    def _call_once(self) -> None:
        with self._lock:
            start = self._clock.monotonic()
            self._last_start = start
            self._requested = False
            self._retry_at = None
            # Changes requested from now on are not covered by this call.
            consumed_since, self._pending_since = self._pending_since, None
        try:
            self._fn()
        except Exception as err:  # noqa: BLE001 - the contract: raising means retry
            log.warning("runner %s: sync failed, retrying within %.3gs",
                        self.name, self._retry_interval, exc_info=True)
            with self._lock:
                self._failures += 1
                self._last_error = f"{type(err).__name__}: {err}"
                self._retry_at = start + self._retry_interval
                failed_since = consumed_since if consumed_since is not None else start
                if self._pending_since is None or failed_since < self._pending_since:
                    self._pending_since = failed_since
                self._last_end = self._clock.monotonic()
            return
        with self._lock:
            self._failures = 0
            self._last_error = None
            self._last_success = self._last_end = self._clock.monotonic()

    def health(self) -> RunnerHealth:
        with self._lock:
            return RunnerHealth(self.name, self._last_success, self._pending_since,
                                self._failures, self._last_error)

    def healthy(self, max_pending: float) -> bool:
        """True unless a requested change has waited more than ``max_pending`` seconds."""
        with self._lock:
            return (self._pending_since is None
                    or self._clock.monotonic() - self._pending_since <= max_pending)


def wake_on(stop_event: threading.Event, wake: threading.Event, name: str) -> None:
    """Set ``wake`` once ``stop_event`` is set (from a small daemon thread).

    ``Clock.wait`` waits on one event; a loop that must wake both for new
    work (``wake``) and for a stop it does not own (``stop_event``) waits on
    ``wake`` and lets this forward the stop.
    """
    def forward() -> None:
        stop_event.wait()
        wake.set()
    threading.Thread(target=forward, name=f"{name}-stop", daemon=True).start()
