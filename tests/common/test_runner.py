"""BoundedFrequencyRunner: coalescing, min/max interval, retry, health."""

from __future__ import annotations

import threading
import time

import pytest

from platformd.common.clock import FakeClock
from platformd.common.runner import BoundedFrequencyRunner
from tests.common.loopharness import LoopHarness, wait_for

MIN, MAX, RETRY = 1.0, 60.0, 5.0


class Harness(LoopHarness):
    def __init__(self, clock, fn=None):
        super().__init__(clock, fn)
        self.runner = BoundedFrequencyRunner("test", self.record, MIN, MAX, RETRY, clock)

    def start(self):
        self.run(self.runner.loop)


@pytest.fixture
def clock():
    return FakeClock(start=0.0)


@pytest.fixture
def harness(clock):
    h = Harness(clock)
    yield h
    h.close()


def test_nothing_runs_before_a_trigger(harness, clock):
    harness.start()
    clock.advance(MAX - 1)
    harness.settle(0)


def test_triggers_before_the_loop_merge_into_one_call(harness, clock):
    for _ in range(10):
        harness.runner.run()
    harness.start()
    harness.settle(1)
    assert harness.calls == [0.0]


def test_triggers_within_min_interval_wait_and_merge(harness, clock):
    harness.start()
    harness.runner.run()
    harness.settle(1)
    clock.advance(0.1)
    for _ in range(5):
        harness.runner.run()
    harness.settle(1)
    clock.advance(0.5)
    harness.settle(1)
    clock.advance(0.4)  # now 1.0 after the first call started
    harness.settle(2)
    assert harness.calls == [0.0, pytest.approx(MIN)]


def test_a_trigger_after_min_interval_runs_at_once(harness, clock):
    harness.start()
    harness.runner.run()
    harness.settle(1)
    clock.advance(10)
    harness.runner.run()
    harness.settle(2)
    assert harness.calls == [0.0, 10.0]


def test_runs_at_least_every_max_interval(harness, clock):
    harness.start()
    clock.advance(MAX)
    harness.settle(1)
    clock.advance(MAX - 1)
    harness.settle(1)
    clock.advance(1)
    harness.settle(2)
    assert harness.calls == [MAX, 2 * MAX]


def test_failure_retries_after_retry_interval_and_reports_health(clock):
    outcomes = [RuntimeError("apply failed"), None]

    def fn():
        outcome = outcomes.pop(0) if outcomes else None
        if outcome:
            raise outcome

    h = Harness(clock, fn)
    try:
        h.start()
        h.runner.run()
        h.settle(1)
        health = h.runner.health()
        assert health.consecutive_failures == 1
        assert health.last_error == "RuntimeError: apply failed"
        assert health.pending_since == 0.0
        assert health.last_success is None
        clock.advance(RETRY - 0.1)
        h.settle(1)
        assert not h.runner.healthy(max_pending=RETRY - 1)
        clock.advance(0.1)
        h.settle(2)
        health = h.runner.health()
        assert health.consecutive_failures == 0
        assert health.pending_since is None
        assert health.last_success == RETRY
        assert h.runner.healthy(max_pending=0)
    finally:
        h.close()


def test_trigger_during_a_failed_retry_wait_runs_after_min_interval(clock):
    failing = [True]

    def fn():
        if failing[0]:
            raise RuntimeError("boom")

    h = Harness(clock, fn)
    try:
        h.start()
        h.runner.run()
        h.settle(1)
        failing[0] = False
        clock.advance(MIN)
        h.runner.run()
        h.settle(2)
        assert h.calls == [0.0, MIN]
        assert h.runner.health().pending_since is None
    finally:
        h.close()


def test_trigger_while_running_causes_exactly_one_more_call(clock):
    release = threading.Event()
    entered = threading.Event()

    def fn():
        entered.set()
        release.wait(5)

    h = Harness(clock, fn)
    try:
        h.start()
        h.runner.run()
        assert entered.wait(2)
        for _ in range(3):
            h.runner.run()
        assert h.runner.health().pending_since == 0.0
        entered.clear()
        release.set()
        assert h.clock.block_until_waiters(1)
        assert len(h.calls) == 1
        clock.advance(MIN)
        assert entered.wait(2)
        h.settle(2)
        clock.advance(MIN * 10)
        h.settle(2)
    finally:
        release.set()
        h.close()


def test_stop_returns_promptly_while_waiting(harness):
    harness.start()
    started = time.monotonic()
    harness.stop.set()
    harness.thread.join(2)
    assert not harness.thread.is_alive()
    assert time.monotonic() - started < 1


def test_arguments_are_checked():
    with pytest.raises(ValueError):
        BoundedFrequencyRunner("x", lambda: None, 5, 1, 1)
    with pytest.raises(ValueError):
        BoundedFrequencyRunner("x", lambda: None, 0, 1, 0)
