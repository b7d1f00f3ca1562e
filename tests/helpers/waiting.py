"""The one way tests wait for something that happens in another thread or process.

``wait_for(predicate)`` polls until ``predicate()`` returns something truthy
and returns it; when the time is up it raises ``AssertionError`` naming what
it waited for and the last value (or exception) it saw, so a test fails with
a reason instead of a bare ``assert False``. Exceptions listed in ``ignore``
count as "not yet" (a server still starting refuses connections); any other
exception propagates at once.

For code that runs on an injected ``FakeClock``, advance the clock instead:
polling is for real processes, sockets and threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, *,
             message: str | None = None, ignore: tuple[type[BaseException], ...] = ()) -> T:
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            last = predicate()
        except ignore as exc:
            last = exc
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            what = message or (predicate.__doc__ or "").strip() or getattr(predicate, "__qualname__", repr(predicate))
            raise AssertionError(f"not true within {timeout:g} s: {what} (last: {last!r})")
        time.sleep(interval)
