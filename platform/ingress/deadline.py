"""Gateway API route timeouts at millisecond precision, with a deadline for
the whole request.

``HTTPRoute.rules[].timeouts``: ``request`` bounds the whole request, from
the moment the data plane received it to the answer, retries included;
``backendRequest`` bounds one attempt to a backend. nginx's own timeouts
(``proxy_connect_timeout``...) are per attempt and fixed per location, so the
route's lane sets them per attempt in its balancer phase
(``ngx.balancer.set_timeouts``, lua/deadline.lua): each attempt gets
``backendRequest`` or, when less, the time left until the request's
deadline (``request`` after ``ngx.req.start_time()``), at millisecond
precision; a retry that finds no time left gets 1 ms (and answers 504).

What this bounds exactly: connecting, sending, and each wait for the
backend of an attempt last at most that attempt's time; an answer whose
first byte comes later is a 504. It does not cut off an answer that has
begun and keeps streaming past the deadline (nginx's read timeout bounds the
wait between two reads, not the whole body).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from platformd.ingress import validate as v

__all__ = ["Deadline", "MAX_MS", "from_seconds", "payload"]

MAX_MS = 86_400_000  # a day, as the per-location timeouts' upper bound


@dataclass(frozen=True, slots=True)
class Deadline:
    """``request_ms``: the whole request (None: no limit); ``attempt_ms``:
    one attempt to a backend (None: the time left). At least one is set."""

    request_ms: int | None = None
    attempt_ms: int | None = None

    def __post_init__(self) -> None:
        if self.request_ms is None and self.attempt_ms is None:
            raise v.ValidationError("deadline", None, "needs a request or an attempt limit")
        for field in ("request_ms", "attempt_ms"):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or not 1 <= value <= MAX_MS):
                raise v.ValidationError(f"deadline.{field}", value, f"must be milliseconds in [1, {MAX_MS}]")
        if self.request_ms is not None and self.attempt_ms is not None and self.attempt_ms > self.request_ms:
            raise v.ValidationError("deadline.attempt_ms", self.attempt_ms, "must not be longer than request_ms")


def from_seconds(request: float | None, attempt: float | None) -> Deadline | None:
    """The Deadline of ``timeouts.request`` / ``backendRequest`` in seconds
    (None or 0: no limit), rounded up to whole milliseconds."""
    def ms(seconds: float | None) -> int | None:
        return min(max(1, math.ceil(seconds * 1000 - 1e-9)), MAX_MS) if seconds else None
    request_ms, attempt_ms = ms(request), ms(attempt)
    if request_ms is None and attempt_ms is None:
        return None
    return Deadline(request_ms, attempt_ms)


def payload(deadline: Deadline) -> dict[str, Any]:
    """The policy's "deadline" (lua/deadline.lua)."""
    return {"request_ms": deadline.request_ms, "attempt_ms": deadline.attempt_ms}
