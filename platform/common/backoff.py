"""Exponential backoff with jitter, shared by every retry loop.

Each user states its own numbers and why (see the callers); this module only
does the arithmetic. "Full jitter" is used: the delay is uniformly random in
``[base*factor^n * (1-jitter), base*factor^n]`` capped at ``cap``, so many
clients restarting together spread out instead of hammering the server in step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Backoff state for one retry loop.

    ``next_delay()`` returns the delay before the next attempt and moves the
    exponent on; ``reset()`` starts over (call it after a healthy period, not
    after the first success, so a flapping peer keeps being backed off).
    """

    initial: float
    cap: float
    factor: float = 2.0
    jitter: float = 0.5  # fraction of the delay that is randomised away
    rng: random.Random = field(default_factory=random.Random, repr=False)
    attempts: int = 0

    def next_delay(self) -> float:
        raw = min(self.cap, self.initial * (self.factor ** self.attempts))
        self.attempts += 1
        low = raw * (1.0 - self.jitter)
        return self.rng.uniform(low, raw)

    def peek_max(self) -> float:
        """Largest delay the next call could return (for tests and bounds)."""
        return min(self.cap, self.initial * (self.factor ** self.attempts))

    def reset(self) -> None:
        self.attempts = 0
