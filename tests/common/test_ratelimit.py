"""TokenBucket: a burst, then the rate, never above the burst."""

from __future__ import annotations

import pytest

from platformd.common.clock import FakeClock
from platformd.common.ratelimit import TokenBucket


def test_token_bucket_burst_then_rate():
    clock = FakeClock()
    bucket = TokenBucket(rate=10, burst=3, clock=clock)
    assert [bucket.try_take() for _ in range(4)] == [True, True, True, False]
    clock.advance(0.09)
    assert not bucket.try_take()          # 0.9 of a token is not one
    clock.advance(0.02)
    assert bucket.try_take()
    clock.advance(1000)                   # refills up to the burst, not beyond
    assert [bucket.try_take() for _ in range(4)] == [True, True, True, False]


@pytest.mark.parametrize("rate, burst", [(0, 1), (-1, 1), (1, 0)])
def test_token_bucket_refuses_nonsense(rate, burst):
    with pytest.raises(ValueError):
        TokenBucket(rate, burst)
