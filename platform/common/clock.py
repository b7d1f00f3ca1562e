"""Injectable clocks.

Every long-running loop takes a ``Clock`` so tests can drive time by hand.
``monotonic()`` measures intervals; ``wall()`` is for timestamps shown to people
or written to the API (lease renew times, event timestamps).
"""

from __future__ import annotations

import heapq
import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Wait for ``event`` up to ``timeout`` seconds of this clock's time.

        Returns True when the event is set.
        """
        ...


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(timeout)


REAL_CLOCK = RealClock()


class FakeClock:
    """A clock that only moves when ``advance`` is called.

    ``sleep`` and ``wait`` block the calling thread until another thread
    advances the clock far enough (or, for ``wait``, sets the event), so code
    under test runs in its own thread exactly as it would for real.
    """

    def __init__(self, start: float = 1000.0, wall_offset: float = 1_700_000_000.0) -> None:
        self._now = start
        self._wall_offset = wall_offset
        self._cond = threading.Condition()
        self._waiters: list[float] = []  # heap of deadlines, for ``has_waiters``

    def monotonic(self) -> float:
        with self._cond:
            return self._now

    def wall(self) -> float:
        with self._cond:
            return self._now + self._wall_offset

    def advance(self, seconds: float) -> None:
        with self._cond:
            self._now += seconds
            self._cond.notify_all()

    def waiters(self) -> int:
        """How many threads are blocked in ``sleep``/``wait`` right now."""
        with self._cond:
            return len(self._waiters)

    def pending_deadlines(self) -> list[float]:
        """The deadlines (fake time; ``inf`` for none) of the threads blocked right now."""
        with self._cond:
            return list(self._waiters)

    def block_until_waiters(self, count: int, timeout: float = 5.0) -> bool:
        """Real-time wait until ``count`` threads are blocked on this clock."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.waiters() >= count:
                return True
            time.sleep(0.001)
        return False

    def sleep(self, seconds: float) -> None:
        self._block(None, seconds)

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return self._block(event, timeout)

    def _block(self, event: threading.Event | None, timeout: float | None) -> bool:
        with self._cond:
            deadline = None if timeout is None else self._now + timeout
            marker = deadline if deadline is not None else float("inf")
            heapq.heappush(self._waiters, marker)
            try:
                while True:
                    if event is not None and event.is_set():
                        return True
                    if deadline is not None and self._now >= deadline:
                        return event.is_set() if event is not None else False
                    # Poll in small real-time slices so an event set from
                    # another thread (which does not know this condition)
                    # is noticed promptly.
                    self._cond.wait(0.005)
            finally:
                self._waiters.remove(marker)
                heapq.heapify(self._waiters)
