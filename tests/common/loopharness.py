"""Drive a `loop(stop_event)` component (the runner) on a FakeClock.

The component runs in its own thread exactly as in production; ``calls``
records the fake time of every call of its function, and ``settle(n)``
asserts that exactly ``n`` calls happened once the loop is waiting again.
"""

from __future__ import annotations

import threading

from tests.helpers.waiting import wait_for


class LoopHarness:
    def __init__(self, clock, fn=None):
        self.clock = clock
        self.calls: list[float] = []
        self.fn = fn
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def record(self):
        """The function handed to the component under test."""
        self.calls.append(self.clock.monotonic())
        if self.fn:
            self.fn()

    def run(self, loop):
        self.thread = threading.Thread(target=loop, args=(self.stop,), daemon=True)
        self.thread.start()
        assert self.clock.block_until_waiters(1)

    def settle(self, calls):
        """Wait until ``calls`` calls happened and the loop is idle: blocked on
        the clock until a moment still in the (fake) future. Then nothing more
        can happen before the clock is advanced, so an extra call that was
        wrongly due now has shown up already; no real-time sleep needed."""
        wait_for(lambda: len(self.calls) >= calls and self.idle(), timeout=5, message=f"{calls} calls")
        assert len(self.calls) == calls, self.calls

    def idle(self) -> bool:
        now = self.clock.monotonic()
        return any(deadline > now for deadline in self.clock.pending_deadlines())

    def close(self):
        self.stop.set()
        if self.thread is not None:
            self.thread.join(2)
            assert not self.thread.is_alive()
