"""A token bucket: "may I do one more thing now?" (Events per object).

All times come from an injected ``Clock`` (monotonic seconds).
"""

from __future__ import annotations

import threading

from platformd.common.clock import REAL_CLOCK, Clock


class TokenBucket:
    """``rate`` tokens per second accumulate up to ``burst``; it starts full.

    Thread-safe. ``try_take`` never waits and never goes into debt.
    """

    # The event recorder keeps one per object it has heard of (up to its cache size).
    __slots__ = ("rate", "burst", "_clock", "_lock", "_tokens", "_stamp")

    def __init__(self, rate: float, burst: int, clock: Clock = REAL_CLOCK) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("token bucket needs rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        # Invariant: ``0 <= _tokens <= burst``.
        self._tokens = float(burst)
        self._stamp = clock.monotonic()

    def _refill(self) -> None:
        now = self._clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def try_take(self) -> bool:
        """Take one token if one is available now."""
        with self._lock:
            self._refill()
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False
