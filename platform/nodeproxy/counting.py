"""A :class:`Kernel` wrapper that counts the operations passing through it.

Used by the benchmark and by tests that assert "one endpoint change costs a
handful of kernel operations". Works with any implementation.

Two measures: ``counts`` are *logical* operations by method name (an op
inside :meth:`Kernel.apply` counts as its method, the ``apply`` call itself
is not counted there), and ``batches`` are calls into the kernel object (one
``apply`` is one batch, whatever its size). When the wrapped kernel reports
``round_trips`` (``LinuxKernel`` does: netlink sendmsg/recv exchanges plus
tool runs), :attr:`round_trips` gives the real number since ``reset``.

``seconds`` is the time spent inside the wrapped kernel by method name; an
``apply`` counts under the name of its ops' method, or of its methods
joined by ``+`` when it mixes several.
"""

from __future__ import annotations

import operator
import threading
import time
from collections import Counter
from typing import Any, Sequence

from .kernel import MUTATING_METHODS, READING_METHODS, AnyOp, KernelError

_METHOD = operator.attrgetter("method")  # the op's class attribute, read in C
_SUBSYSTEMS = ("ipvs", "addresses", "ipset", "firewall", "sysctl")


class CountingKernel:
    """Delegates every call to ``inner`` and counts it by method name.

    Each subsystem (``ipvs``, ``addresses``, ...) is wrapped the same way;
    calls on the kernel itself (``probe``...) are counted too.
    ``writes`` / ``reads`` sum the counts of state-changing and reading
    methods; ``reset()`` starts a new measurement. Counting is thread-safe
    (the kernel interface allows two threads at once).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()
        self.batches = 0
        self._trips_at_reset = self._inner_trips()
        for name in _SUBSYSTEMS:
            setattr(self, name, _Counted(self, getattr(inner, name)))

    def _inner_trips(self) -> int | None:
        trips = getattr(self.inner, "round_trips", None)
        return trips if isinstance(trips, int) else None

    def reset(self) -> None:
        self.counts = Counter()
        self.seconds = Counter()
        self.batches = 0
        self._trips_at_reset = self._inner_trips()

    @property
    def writes(self) -> int:
        return sum(n for m, n in self.counts.items() if m in MUTATING_METHODS)

    @property
    def reads(self) -> int:
        return sum(n for m, n in self.counts.items() if m in READING_METHODS)

    @property
    def round_trips(self) -> int:
        """Kernel round trips since ``reset``: the inner kernel's own count
        when it keeps one, else ``batches``."""
        now = self._inner_trips()
        if now is None or self._trips_at_reset is None:
            return self.batches
        return now - self._trips_at_reset

    def _apply(self, apply: Any, ops: Sequence[AnyOp]) -> list[KernelError | None]:
        if not ops:
            return apply(ops)
        methods = set(map(_METHOD, ops))
        with self._lock:
            self.counts.update(map(_METHOD, ops))  # in C: this wrapper is inside the benchmark's figures
            self.batches += 1
        started = time.perf_counter()
        try:
            return apply(ops)
        finally:
            self._add_seconds("+".join(sorted(methods)), time.perf_counter() - started)

    def _add_seconds(self, name: str, seconds: float) -> None:
        with self._lock:
            self.seconds[name] += seconds

    def _counted(self, target: Any, name: str) -> Any:
        if name not in MUTATING_METHODS and name not in READING_METHODS:
            return target

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.counts[name] += 1
                self.batches += 1
            started = time.perf_counter()
            try:
                return target(*args, **kwargs)
            finally:
                self._add_seconds(name, time.perf_counter() - started)

        return counted

    def __getattr__(self, name: str) -> Any:
        return self._counted(getattr(self.inner, name), name)


class _Counted:
    """One subsystem of a :class:`CountingKernel`, counted into it."""

    def __init__(self, owner: CountingKernel, inner: Any) -> None:
        self._owner = owner
        self._inner = inner

    def apply(self, ops: Sequence[AnyOp]) -> list[KernelError | None]:
        return self._owner._apply(self._inner.apply, ops)

    def __getattr__(self, name: str) -> Any:
        return self._owner._counted(getattr(self._inner, name), name)
