"""Drive a `loop(stop_event)` component (the runner) on a FakeClock.

The component runs in its own thread exactly as in production; ``calls``
records the fake time of every call of its function, and ``settle(n)``
asserts that exactly ``n`` calls happened once the loop is waiting again.
"""

from __future__ import annotations

import threading
import time


def wait_for(cond, timeout=3.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.002)
    return cond()


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
        """Wait until ``calls`` calls happened and the loop is waiting again."""
        assert wait_for(lambda: len(self.calls) >= calls), self.calls
        time.sleep(0.02)  # let a wrongly scheduled extra call show up
        assert self.clock.block_until_waiters(1)
        assert len(self.calls) == calls, self.calls

    def close(self):
        self.stop.set()
        if self.thread is not None:
            self.thread.join(2)
            assert not self.thread.is_alive()
