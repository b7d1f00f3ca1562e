"""Run one function on a thread of its own; collect its outcome later.

The sync overlaps work that waits on different parts of the kernel: in the
test VM (two vCPUs) adding 10,000 addresses to the dummy link keeps the
kernel busy for 11-35 s under RTNL, while IPVS and ipset requests take
their own locks, and the iptables tools are processes of their own. Done
one after the other the waits add up; side by side the sync costs the
longest of them. The proxier decides what may overlap (see ``proxier.py``);
this module only runs and joins.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """``fn()`` started on a new thread named ``name`` as soon as this is made.

    :meth:`wait` blocks until ``fn`` has returned and gives back its result
    or re-raises its exception; :meth:`join` only blocks. ``seconds`` is how
    long ``fn`` ran (valid once joined).

    The thread is created by the caller's thread, so on Linux it starts in
    the caller's network namespace (threads inherit it when created): kernel
    calls made there reach the same namespace as the caller's own. Whoever
    makes one must wait for it before touching what ``fn`` touches.
    """

    def __init__(self, fn: Callable[[], T], name: str) -> None:
        self._fn = fn
        self._result: T | None = None
        self._error: BaseException | None = None
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        started = time.perf_counter()
        try:
            self._result = self._fn()
        except BaseException as exc:  # handed to whoever waits, never lost on this thread
            self._error = exc
        finally:
            self.seconds = time.perf_counter() - started

    def join(self) -> None:
        """Wait for ``fn`` to end, whatever its outcome."""
        self._thread.join()

    def wait(self) -> T:
        """Wait for ``fn``; its result, or its exception raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]
