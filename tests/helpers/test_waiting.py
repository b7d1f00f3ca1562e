"""wait_for: returns the first truthy value, raises with a reason, ignores only what it is told."""

from __future__ import annotations

import itertools

import pytest

from tests.helpers.waiting import wait_for


def test_returns_the_first_truthy_value():
    counter = itertools.count()
    assert wait_for(lambda: next(counter) >= 3 and "done", interval=0) == "done"


def test_raises_naming_what_it_waited_for():
    with pytest.raises(AssertionError, match=r"not true within 0.05 s: the door opens \(last: 0\)"):
        wait_for(lambda: 0, timeout=0.05, interval=0.01, message="the door opens")


def test_ignores_only_the_given_exceptions():
    calls = itertools.count()

    def flaky():
        if next(calls) < 2:
            raise ConnectionRefusedError
        return True

    assert wait_for(flaky, interval=0, ignore=(OSError,))
    with pytest.raises(KeyError):
        wait_for(lambda: {}["x"], timeout=1, ignore=(OSError,))
