"""Work queue: de-duplication, processing/dirty, delays, backoff, shutdown."""

from __future__ import annotations

import threading
import time

import pytest

from platformd.common.clock import FakeClock
from platformd.common.ratelimit import (
    BucketRateLimiter,
    ItemExponentialRateLimiter,
    MaxOfRateLimiter,
    TokenBucket,
    default_controller_rate_limiter,
)
from platformd.common.workqueue import RateLimitingQueue


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def queue(clock):
    q = RateLimitingQueue(clock=clock, name="test")
    yield q
    q.shutdown(drain=False)


def drain_ready(q):
    keys = []
    while (key := q.get(timeout=0)) is not None:
        keys.append(key)
        q.done(key)
    return keys


def test_duplicate_adds_are_queued_once_in_first_added_order(queue):
    for key in ["a", "b", "a", "c", "b"]:
        queue.add(key)
    assert len(queue) == 3
    assert drain_ready(queue) == ["a", "b", "c"]


def test_key_added_while_processing_is_queued_once_more_after_done(queue):
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    queue.add("a")
    # Not handed out again while in flight ...
    assert len(queue) == 0
    assert queue.get(timeout=0.01) is None
    queue.done("a")
    # ... but exactly once after done.
    assert len(queue) == 1
    assert drain_ready(queue) == ["a"]


def test_done_without_re_add_does_not_requeue(queue):
    queue.add("a")
    key = queue.get(timeout=0)
    queue.done(key)
    assert len(queue) == 0


def test_a_key_is_never_held_by_two_workers(queue):
    held: set[str] = set()
    violations = []
    lock = threading.Lock()
    processed = [0]

    def worker():
        while (key := queue.get()) is not None:
            with lock:
                if key in held:
                    violations.append(key)
                held.add(key)
            time.sleep(0.0005)
            with lock:
                held.discard(key)
                processed[0] += 1
            queue.done(key)

    workers = [threading.Thread(target=worker) for _ in range(4)]
    for w in workers:
        w.start()
    for i in range(2000):
        queue.add(f"k{i % 5}")
    time.sleep(0.2)
    assert queue.shutdown(drain=True, timeout=5)
    for w in workers:
        w.join(5)
    assert violations == []
    assert processed[0] >= 5


def test_get_times_out_with_none_and_wakes_on_add(queue):
    started = time.monotonic()
    assert queue.get(timeout=0.05) is None
    assert time.monotonic() - started >= 0.045
    assert not queue.shutting_down()

    got = []
    t = threading.Thread(target=lambda: got.append(queue.get(timeout=5)))
    t.start()
    time.sleep(0.02)
    queue.add("x")
    t.join(5)
    assert got == ["x"]


def test_add_after_waits_for_the_clock(queue, clock):
    queue.add_after("a", 1.0)
    assert queue.waiting() == 1
    assert queue.get(timeout=0.05) is None
    clock.advance(0.5)
    assert queue.get(timeout=0.05) is None
    clock.advance(0.6)
    assert queue.get(timeout=2) == "a"
    assert queue.waiting() == 0


def test_add_after_keeps_the_earlier_ready_time(queue, clock):
    queue.add_after("a", 10.0)
    queue.add_after("a", 1.0)
    queue.add_after("a", 5.0)
    assert queue.waiting() == 1
    clock.advance(1.0)
    assert queue.get(timeout=2) == "a"
    queue.done("a")
    clock.advance(20.0)
    assert queue.get(timeout=0.1) is None  # the superseded entries do not fire


def test_add_after_zero_is_immediate(queue):
    queue.add_after("a", 0)
    assert queue.get(timeout=0) == "a"


def test_delayed_keys_come_out_in_ready_order(queue, clock):
    queue.add_after("late", 3.0)
    queue.add_after("early", 1.0)
    clock.advance(5.0)
    deadline = time.monotonic() + 2
    while len(queue) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert drain_ready(queue) == ["early", "late"]


def test_rate_limited_requeue_backs_off_per_key_and_forget_resets(queue, clock):
    queue.add_rate_limited("a")  # 5 ms
    queue.add_rate_limited("a")  # 10 ms (the earlier ready time is kept)
    assert queue.num_requeues("a") == 2
    assert queue.get(timeout=0.02) is None
    clock.advance(0.005)
    assert queue.get(timeout=2) == "a"
    queue.done("a")
    queue.forget("a")
    assert queue.num_requeues("a") == 0


def test_item_exponential_delays_double_up_to_the_cap():
    limiter = ItemExponentialRateLimiter(0.005, 1000.0)
    delays = [limiter.when("a") for _ in range(30)]
    assert delays[:4] == pytest.approx([0.005, 0.01, 0.02, 0.04])
    assert max(delays) == 1000.0
    assert delays[-1] == 1000.0
    assert limiter.when("b") == pytest.approx(0.005)  # keys are independent
    limiter.forget("a")
    assert limiter.when("a") == pytest.approx(0.005)


def test_token_bucket_burst_then_rate(clock):
    bucket = TokenBucket(rate=10, burst=100, clock=clock)
    assert [bucket.reserve() for _ in range(100)] == [0.0] * 100
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    assert not bucket.try_take()
    clock.advance(0.31)  # pays back the two borrowed tokens and earns one
    assert bucket.try_take()
    assert not bucket.try_take()
    clock.advance(1000)
    assert bucket.available() == pytest.approx(100)  # never above burst


def test_default_limiter_is_the_max_of_item_backoff_and_overall_bucket(clock):
    limiter = default_controller_rate_limiter(clock)
    # 100 different keys fail once: the burst covers them at 5 ms each.
    assert max(limiter.when(f"k{i}") for i in range(100)) == pytest.approx(0.005)
    # The next failures wait for the shared bucket (10/s), not 5 ms.
    assert limiter.when("other") == pytest.approx(0.1)
    assert limiter.when("another") == pytest.approx(0.2)


def test_max_of_tells_every_limiter(clock):
    item = ItemExponentialRateLimiter(1.0, 8.0)
    bucket = TokenBucket(rate=1, burst=1, clock=clock)
    limiter = MaxOfRateLimiter(item, BucketRateLimiter(bucket))
    assert limiter.when("a") == pytest.approx(1.0)
    assert limiter.when("a") == pytest.approx(2.0)
    assert item.num_requeues("a") == 2
    assert bucket.available() == pytest.approx(-1.0)


def test_shutdown_returns_none_and_ignores_adds(queue):
    queue.add("a")
    queue.shutdown()
    assert queue.get(timeout=1) is None
    queue.add("b")
    queue.add_after("c", 0.1)
    assert len(queue) == 0
    assert queue.shutting_down()


def test_shutdown_wakes_blocked_getters(queue):
    got = []
    t = threading.Thread(target=lambda: got.append(queue.get()))
    t.start()
    time.sleep(0.02)
    queue.shutdown()
    t.join(2)
    assert got == [None]


def test_shutdown_with_drain_waits_for_in_flight_keys(queue):
    queue.add("a")
    key = queue.get(timeout=0)
    queue.add("a")  # dirty while in flight: must not come back after shutdown
    result = []
    t = threading.Thread(target=lambda: result.append(queue.shutdown(drain=True)))
    t.start()
    time.sleep(0.05)
    assert t.is_alive() and result == []
    queue.done(key)
    t.join(2)
    assert result == [True]
    assert queue.get(timeout=0) is None


def test_shutdown_drain_timeout_and_no_drain(queue):
    queue.add("a")
    queue.get(timeout=0)
    assert queue.shutdown(drain=True, timeout=0.05) is False
    assert queue.shutdown(drain=False) is False
    queue.done("a")
    assert queue.shutdown(drain=False) is True
