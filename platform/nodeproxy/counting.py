"""A :class:`Kernel` wrapper that counts the operations passing through it.

Used by the benchmark and by tests that assert "one endpoint change costs a
handful of kernel operations". Works with any implementation.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .kernel import MUTATING_METHODS, READING_METHODS


class CountingKernel:
    """Delegates every call to ``inner`` and counts it by method name.

    ``writes`` / ``reads`` sum the counts of state-changing and reading
    methods; ``reset()`` starts a new measurement.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.counts: Counter[str] = Counter()

    def reset(self) -> None:
        self.counts = Counter()

    @property
    def writes(self) -> int:
        return sum(n for m, n in self.counts.items() if m in MUTATING_METHODS)

    @property
    def reads(self) -> int:
        return sum(n for m, n in self.counts.items() if m in READING_METHODS)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if name not in MUTATING_METHODS and name not in READING_METHODS:
            return target

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] += 1
            return target(*args, **kwargs)

        return counted
