"""Debouncer: quiet period, upper bound, bursts during a call, stop."""

from __future__ import annotations

import threading
import time

import pytest

from platformd.common.clock import FakeClock
from platformd.common.debounce import Debouncer
from tests.common.loopharness import LoopHarness, wait_for

DELAY, MAX_DELAY = 1.0, 5.0


class Harness(LoopHarness):
    def __init__(self, clock, fn=None):
        super().__init__(clock, fn)
        self.debouncer = Debouncer(DELAY, MAX_DELAY, self.record, clock, name="test")
        self.run(self.debouncer.loop)

    def trigger(self):
        self.debouncer.trigger()
        time.sleep(0.01)  # the loop picks the new due time up
        assert self.clock.block_until_waiters(1)


@pytest.fixture
def clock():
    return FakeClock(start=0.0)


@pytest.fixture
def harness(clock):
    h = Harness(clock)
    yield h
    h.close()


def test_calls_once_after_the_quiet_period(harness, clock):
    for _ in range(5):
        harness.trigger()
    assert harness.debouncer.pending()
    clock.advance(DELAY - 0.1)
    harness.settle(0)
    clock.advance(0.1)
    harness.settle(1)
    assert harness.calls == [DELAY]
    assert not harness.debouncer.pending()


def test_each_trigger_restarts_the_quiet_period(harness, clock):
    harness.trigger()
    for _ in range(3):
        clock.advance(0.6)
        harness.trigger()
    harness.settle(0)
    clock.advance(DELAY)
    harness.settle(1)
    assert harness.calls == [pytest.approx(1.8 + DELAY)]


def test_a_trigger_that_never_stops_is_served_by_max_delay(harness, clock):
    harness.trigger()
    for _ in range(int(MAX_DELAY / 0.5) - 1):
        clock.advance(0.5)
        harness.trigger()
    harness.settle(0)
    clock.advance(0.5)  # now MAX_DELAY after the first trigger
    harness.settle(1)
    assert harness.calls == [pytest.approx(MAX_DELAY)]


def test_nothing_is_called_without_a_trigger(harness, clock):
    clock.advance(100)
    harness.settle(0)


def test_a_trigger_during_the_call_opens_the_next_burst(clock):
    entered, release = threading.Event(), threading.Event()

    def fn():
        entered.set()
        release.wait(5)

    h = Harness(clock, fn)
    try:
        h.debouncer.trigger()
        clock.advance(DELAY)
        assert entered.wait(2)
        h.debouncer.trigger()
        release.set()
        h.settle(1)
        clock.advance(DELAY)
        h.settle(2)
    finally:
        release.set()
        h.close()


def test_a_failing_call_is_logged_and_ends_the_burst(clock, caplog):
    def fn():
        raise RuntimeError("bad manifest")

    h = Harness(clock, fn)
    try:
        h.trigger()
        clock.advance(DELAY)
        h.settle(1)
        clock.advance(100)
        h.settle(1)
        assert "bad manifest" in caplog.text
    finally:
        h.close()


def test_stop_drops_an_open_burst(harness, clock):
    harness.trigger()
    harness.stop.set()
    harness.thread.join(2)
    assert not harness.thread.is_alive()
    clock.advance(100)
    assert harness.calls == []


def test_arguments_are_checked():
    with pytest.raises(ValueError):
        Debouncer(5, 1, lambda: None)
