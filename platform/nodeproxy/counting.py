"""A :class:`Kernel` wrapper that counts the operations passing through it.

Used by the benchmark and by tests that assert "one endpoint change costs a
handful of kernel operations". Works with any implementation.

Two measures: ``counts`` are *logical* operations by method name (an op
inside :meth:`Kernel.apply` counts as its method, the ``apply`` call itself
is not counted there), and ``batches`` are calls into the kernel object (one
``apply`` is one batch, whatever its size). When the wrapped kernel reports
``round_trips`` (``LinuxKernel`` does: netlink sendmsg/recv exchanges plus
tool runs), :attr:`round_trips` gives the real number since ``reset``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from .kernel import MUTATING_METHODS, READING_METHODS, KernelError, Op


class CountingKernel:
    """Delegates every call to ``inner`` and counts it by method name.

    ``writes`` / ``reads`` sum the counts of state-changing and reading
    methods; ``reset()`` starts a new measurement.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.counts: Counter[str] = Counter()
        self.batches = 0
        self._trips_at_reset = self._inner_trips()

    def _inner_trips(self) -> int | None:
        trips = getattr(self.inner, "round_trips", None)
        return trips if isinstance(trips, int) else None

    def reset(self) -> None:
        self.counts = Counter()
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

    def apply(self, ops: Sequence[Op]) -> list[KernelError | None]:
        for op in ops:
            self.counts[op.method] += 1
        if ops:
            self.batches += 1
        return self.inner.apply(ops)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if name not in MUTATING_METHODS and name not in READING_METHODS:
            return target

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] += 1
            self.batches += 1
            return target(*args, **kwargs)

        return counted

