"""A de-duplicating work queue of keys, with delayed and rate-limited adds.

Event handlers put keys (``namespace/name``) here; workers take them out with
``get``, sync the object by reading the current state from a store, and call
``done``. The queue holds keys, never objects, so many changes to one object
between two syncs cost one sync.

Guarantees (the same as client-go's ``workqueue``):

* A key is queued at most once at any time (``add`` of a queued key is a no-op).
* A key is handed to at most one worker at a time. A key added while a worker
  holds it is marked dirty and queued once more when that worker calls
  ``done``, so the change that arrived mid-sync is not lost and is not synced
  concurrently.
* Keys come out in the order they were first queued.

Delays and per-key backoff use the injected clock; ``get(timeout)`` measures
its timeout in real seconds, because it only bounds how long the calling
thread blocks and schedules nothing.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Hashable

from platformd.common.clock import REAL_CLOCK, Clock
from platformd.common.ratelimit import RateLimiter, default_controller_rate_limiter


class RateLimitingQueue:
    """Work queue with ``add_after`` and per-key rate-limited requeues.

    Typical worker::

        while (key := queue.get()) is not None:
            try:
                sync(key)
            except TransientError:
                queue.add_rate_limited(key)   # retry later, backing off
            else:
                queue.forget(key)             # reset the key's backoff
            finally:
                queue.done(key)

    ``rate_limiter`` defaults to client-go's numbers (see
    ``ratelimit.default_controller_rate_limiter``): per key 5 ms doubling up
    to 1000 s, and overall 10 requeues/s with a burst of 100.
    """

    def __init__(self, clock: Clock = REAL_CLOCK, rate_limiter: RateLimiter | None = None,
                 name: str = "") -> None:
        self.name = name
        self._clock = clock
        self._limiter = rate_limiter or default_controller_rate_limiter(clock)
        self._cond = threading.Condition()
        # Invariants (all under ``_cond``):
        # * every key in ``_queue`` is in ``_dirty``;
        # * a key in ``_processing`` is not in ``_queue`` (it may be dirty:
        #   then ``done`` moves it to ``_queue``);
        # * ``_queue`` has no duplicates.
        self._queue: deque[Hashable] = deque()
        self._dirty: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._shutting_down = False
        # Delayed adds: heap of (ready_at, seq, key); ``_waiting_ready`` maps a
        # waiting key to its ready time so a key waits once, for its earliest time.
        self._waiting: list[tuple[float, int, Hashable]] = []
        self._waiting_ready: dict[Hashable, float] = {}
        self._seq = itertools.count()
        self._wake = threading.Event()
        self._waiter: threading.Thread | None = None  # started on first delayed add

    # -- plain queue -------------------------------------------------------

    def add(self, key: Hashable) -> None:
        """Queue ``key`` unless it is already queued; ignored after shutdown."""
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: Hashable) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return  # ``done`` will queue it
        self._queue.append(key)
        self._cond.notify()

    def get(self, timeout: float | None = None) -> Hashable | None:
        """Block until a key is available and hand it out; the caller must call ``done``.

        Returns None when the queue is shut down, or after ``timeout`` real
        seconds without a key (tell the two apart with ``shutting_down``).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._queue and not self._shutting_down:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
            if self._shutting_down:
                return None
            key = self._queue.popleft()
            self._processing.add(key)
            self._dirty.discard(key)
            return key

    def done(self, key: Hashable) -> None:
        """The worker finished ``key``; if it was added meanwhile, queue it again."""
        with self._cond:
            if key not in self._processing:
                return
            self._processing.discard(key)
            if key in self._dirty and not self._shutting_down:
                self._queue.append(key)
                self._cond.notify()
            if not self._processing:
                self._cond.notify_all()  # a draining ``shutdown`` may be waiting

    def shutdown(self, drain: bool = True, timeout: float | None = None) -> bool:
        """Stop the queue: ``get`` returns None from now on and adds are ignored.

        Keys queued or waiting but not handed out are dropped (whoever starts
        next relists and queues everything again). With ``drain``, blocks
        until every key already handed out has been ``done`` (or ``timeout``
        real seconds pass); returns True when nothing is in flight.
        """
        with self._cond:
            self._shutting_down = True
            self._queue.clear()
            self._dirty.clear()
            self._waiting.clear()
            self._waiting_ready.clear()
            self._cond.notify_all()
        self._wake.set()
        if not drain:
            with self._cond:
                return not self._processing
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._processing:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    def len(self) -> int:
        """Keys queued and ready (not in flight, not waiting on a delay)."""
        with self._cond:
            return len(self._queue)

    __len__ = len

    def waiting(self) -> int:
        """Keys waiting for a delayed add to fall due."""
        with self._cond:
            return len(self._waiting_ready)

    # -- delayed adds --------------------------------------------------------

    def add_after(self, key: Hashable, delay: float) -> None:
        """Add ``key`` once ``delay`` clock seconds have passed (at once if <= 0).

        A key already waiting keeps the earlier of its two ready times.
        """
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutting_down:
                return
            ready_at = self._clock.monotonic() + delay
            current = self._waiting_ready.get(key)
            if current is not None and current <= ready_at:
                return
            # A superseded heap entry stays behind; ``_release_due`` skips it.
            self._waiting_ready[key] = ready_at
            heapq.heappush(self._waiting, (ready_at, next(self._seq), key))
            if self._waiter is None:
                self._waiter = threading.Thread(
                    target=self._waiting_loop, name=f"workqueue-delay-{self.name}", daemon=True)
                self._waiter.start()
        self._wake.set()

    def _release_due(self) -> float | None:
        """Queue every waiting key that is due; returns the next ready time. Holds ``_cond``."""
        now = self._clock.monotonic()
        while self._waiting:
            ready_at, _, key = self._waiting[0]
            if self._waiting_ready.get(key) != ready_at:
                heapq.heappop(self._waiting)  # superseded by an earlier add_after
                continue
            if ready_at > now:
                return ready_at
            heapq.heappop(self._waiting)
            del self._waiting_ready[key]
            self._add_locked(key)
        return None

    def _waiting_loop(self) -> None:
        while True:
            with self._cond:
                if self._shutting_down:
                    return
                self._wake.clear()
                next_ready = self._release_due()
                now = self._clock.monotonic()
            self._clock.wait(self._wake, None if next_ready is None else max(0.0, next_ready - now))

    # -- rate limiting -------------------------------------------------------

    def add_rate_limited(self, key: Hashable) -> None:
        """Requeue ``key`` after the delay the rate limiter gives for one more failure."""
        self.add_after(key, self._limiter.when(key))

    def forget(self, key: Hashable) -> None:
        """Stop tracking ``key``'s failures (call after a successful sync).

        Does not remove the key from the queue.
        """
        self._limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return self._limiter.num_requeues(key)
