"""Rate limiters: a token bucket, and the per-key limiters the work queue uses.

Two different questions are answered here:

* ``TokenBucket`` -- "may I do one more thing now, and if not, how long until
  I may?" Used for an overall budget (work-queue requeues, events per object).
* ``RateLimiter`` -- "this key failed again; how long should it wait before its
  next attempt?" ``ItemExponentialRateLimiter`` answers per key,
  ``BucketRateLimiter`` answers from one shared bucket, and ``MaxOfRateLimiter``
  takes the longest answer of several, so a single key backs off on its own
  while a storm of different failing keys is still held to an overall rate.

All times come from an injected ``Clock`` (monotonic seconds).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Protocol

from platformd.common.backoff import Backoff
from platformd.common.clock import REAL_CLOCK, Clock


class TokenBucket:
    """``rate`` tokens per second accumulate up to ``burst``; it starts full.

    Thread-safe. ``try_take`` never waits and never goes into debt;
    ``reserve`` always succeeds by borrowing against the future, and says how
    long the caller must wait for the token it took to have existed (this is
    what makes a burst of requeues spread out at ``rate`` instead of being
    refused).
    """

    def __init__(self, rate: float, burst: int, clock: Clock = REAL_CLOCK) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("token bucket needs rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        # Invariant: ``_tokens <= burst``; negative means reserved future tokens.
        self._tokens = float(burst)
        self._stamp = clock.monotonic()

    def _refill(self) -> float:
        now = self._clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        return now

    def try_take(self) -> bool:
        """Take one token if one is available now."""
        with self._lock:
            self._refill()
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False

    def reserve(self) -> float:
        """Take one token, borrowing if needed; returns seconds to wait (>= 0)."""
        with self._lock:
            self._refill()
            self._tokens -= 1.0
            if self._tokens >= 0.0:
                return 0.0
            return -self._tokens / self.rate

    def available(self) -> float:
        """Tokens available right now (may be negative while in debt)."""
        with self._lock:
            self._refill()
            return self._tokens


class RateLimiter(Protocol):
    """Per-key retry delays for the work queue."""

    def when(self, key: Hashable) -> float:
        """Record one more failure of ``key``; seconds to wait before retrying it."""
        ...

    def forget(self, key: Hashable) -> None:
        """``key`` succeeded (or was given up on): clear its history."""
        ...

    def num_requeues(self, key: Hashable) -> int:
        """How many times ``when`` was called for ``key`` since it was forgotten."""
        ...


class ItemExponentialRateLimiter:
    """Delay ``base * 2**failures``, capped, per key; no jitter.

    No jitter on purpose: the delay is per key, and keys fail at unrelated
    times, so they do not march in step the way reconnecting clients do.
    """

    def __init__(self, base: float, cap: float) -> None:
        self._base = base
        self._cap = cap
        self._lock = threading.Lock()
        self._backoffs: dict[Hashable, Backoff] = {}  # only keys that failed and were not forgotten

    def when(self, key: Hashable) -> float:
        with self._lock:
            backoff = self._backoffs.get(key)
            if backoff is None:
                backoff = self._backoffs[key] = Backoff(self._base, self._cap, jitter=0.0)
            return backoff.next_delay()

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._backoffs.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        with self._lock:
            backoff = self._backoffs.get(key)
            return backoff.attempts if backoff else 0


class BucketRateLimiter:
    """Every retry of any key takes a token from one shared bucket."""

    def __init__(self, bucket: TokenBucket) -> None:
        self._bucket = bucket

    def when(self, key: Hashable) -> float:
        return self._bucket.reserve()

    def forget(self, key: Hashable) -> None:
        pass

    def num_requeues(self, key: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest delay any of ``limiters`` asks for; all of them are told."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self._limiters = limiters

    def when(self, key: Hashable) -> float:
        # Every limiter must see the failure (each keeps its own count or
        # tokens), so no short-circuit here.
        return max([limiter.when(key) for limiter in self._limiters])

    def forget(self, key: Hashable) -> None:
        for limiter in self._limiters:
            limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return max(limiter.num_requeues(key) for limiter in self._limiters)


# Defaults for controller work queues, the same numbers client-go uses:
# * 5 ms doubling per failure: a transient conflict (409 on a status update) is
#   retried almost at once, while a key that keeps failing reaches a minute
#   after ~14 failures and the 1000 s cap (about 17 minutes) after ~18, so a
#   permanently broken object costs almost nothing.
# * 10 requeues/s with a burst of 100 overall: when the API server is down,
#   every key fails at once; the bucket spreads their retries out instead of
#   letting thousands of keys retry together at 5 ms.
ITEM_BASE_DELAY = 0.005
ITEM_MAX_DELAY = 1000.0
OVERALL_QPS = 10.0
OVERALL_BURST = 100


def default_controller_rate_limiter(clock: Clock = REAL_CLOCK) -> RateLimiter:
    return MaxOfRateLimiter(
        ItemExponentialRateLimiter(ITEM_BASE_DELAY, ITEM_MAX_DELAY),
        BucketRateLimiter(TokenBucket(OVERALL_QPS, OVERALL_BURST, clock)),
    )
