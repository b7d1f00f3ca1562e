"""Call a function once a burst of triggers has gone quiet.

Used where a change arrives as many small notifications (a directory of
manifests being rewritten file by file, a Secret and its Ingresses updated
together) and acting on the first one would act on half a change.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from platformd.common.clock import REAL_CLOCK, Clock
from platformd.common.runner import wake_on

log = logging.getLogger(__name__)


class Debouncer:
    """Calls ``fn`` from ``loop``'s thread after ``delay`` seconds without a trigger.

    Contract:

    * The first ``trigger()`` after a call opens a burst. ``fn`` is called once
      for the burst when ``delay`` seconds have passed since the latest
      trigger, but no later than ``max_delay`` after the first one, so a
      trigger that never stops (a file rewritten every second) still gets
      served.
    * A ``trigger()`` while ``fn`` runs opens the next burst.
    * ``fn`` raising is logged with its traceback and ends the burst; the
      debouncer does not retry (use ``BoundedFrequencyRunner`` for that).
    * ``loop(stop_event)`` returns promptly once ``stop_event`` is set; an open
      burst is dropped, not flushed.
    """

    def __init__(self, delay: float, max_delay: float, fn: Callable[[], None],
                 clock: Clock = REAL_CLOCK, name: str = "") -> None:
        if not 0 <= delay <= max_delay:
            raise ValueError("need 0 <= delay <= max_delay")
        self.name = name
        self._delay = delay
        self._max_delay = max_delay
        self._fn = fn
        self._clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Event()
        # Under ``_lock``: clock times of the open burst's first and latest
        # trigger; both None when no burst is open.
        self._first: float | None = None
        self._latest: float | None = None

    def trigger(self) -> None:
        """Note a change; never blocks and never calls ``fn`` itself."""
        with self._lock:
            now = self._clock.monotonic()
            if self._first is None:
                self._first = now
            self._latest = now
        self._wake.set()

    def pending(self) -> bool:
        """True while a burst is open (triggered, not yet served)."""
        with self._lock:
            return self._first is not None

    def loop(self, stop_event: threading.Event) -> None:
        wake_on(stop_event, self._wake, f"debounce-{self.name}")
        while not stop_event.is_set():
            with self._lock:
                now = self._clock.monotonic()
                if self._first is None:
                    due = None
                else:
                    assert self._latest is not None
                    due = min(self._latest + self._delay, self._first + self._max_delay)
                ready = due is not None and due <= now
                if ready:
                    self._first = self._latest = None
                else:
                    self._wake.clear()
            if ready:
                self._call()
                continue
            # A stop set before the clear above is seen here; one set after
            # it sets ``_wake`` and ends the wait.
            if stop_event.is_set():
                break
            self._clock.wait(self._wake, None if due is None else due - now)

    def _call(self) -> None:
        try:
            self._fn()
        except Exception:  # noqa: BLE001 - contract: logged, burst ends
            log.exception("debouncer %s: call failed", self.name)
