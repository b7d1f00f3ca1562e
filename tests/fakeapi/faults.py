"""Fault injection: what a flaky or restarted API server does to its clients.

- `drop_watches(abrupt=False)` ends every open watch stream now and closes
  its connection; clients must re-watch from their last resourceVersion.
- `stall_watches(seconds)` holds back all watch output (events and bookmarks)
  for that long; events are delivered afterwards, in order.
- `fail_next(n, status, path_prefix)` answers the next `n` matching requests
  with a Status error (429 comes with `Retry-After: 1`, like the real server's
  priority-and-fairness rejections).
- `compact()` forgets the write history, so older resourceVersions get 410.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from .errors import ApiError
from .storage import Storage

_REASONS = {
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected fault"),
    502: ("InternalError", "Bad gateway: injected fault"),
    503: ("ServiceUnavailable", "The server is currently unable to handle the request"),
    504: ("Timeout", "Timeout: request did not complete within the allowed duration"),
}


@dataclass
class _FailRule:
    remaining: int
    status: int
    path_prefix: str | None


class Faults:
    def __init__(self, storage: Storage):
        self._storage = storage
        self._lock = threading.Lock()
        self._rules: list[_FailRule] = []
        self._stalled_until = 0.0

    def drop_watches(self, abrupt: bool = False) -> None:
        """End every open watch: cleanly (final chunk, like a server closing
        streams on shutdown), or `abrupt`ly by cutting the TCP connection."""
        self._storage.close_watchers(abrupt)

    def stall_watches(self, seconds: float) -> None:
        with self._lock:
            self._stalled_until = max(self._stalled_until, time.monotonic() + seconds)

    def stall_remaining(self) -> float:
        with self._lock:
            return max(0.0, self._stalled_until - time.monotonic())

    def fail_next(self, n: int, status: int = 500, path_prefix: str | None = None) -> None:
        if status not in _REASONS and not 400 <= status < 600:
            raise ValueError(f"not an error status: {status}")
        with self._lock:
            self._rules.append(_FailRule(n, status, path_prefix))

    def compact(self) -> None:
        self._storage.compact()

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self._stalled_until = 0.0

    def take_failure(self, path: str) -> ApiError | None:
        """Consume one injected failure that applies to `path`, if any."""
        with self._lock:
            for rule in self._rules:
                if rule.remaining > 0 and (rule.path_prefix is None or path.startswith(rule.path_prefix)):
                    rule.remaining -= 1
                    reason, message = _REASONS.get(rule.status, ("InternalError", "injected fault"))
                    headers = {"Retry-After": "1"} if rule.status == 429 else {}
                    if rule.status == 429:
                        details = {"retryAfterSeconds": 1}
                    else:
                        details = None
                    return ApiError(rule.status, reason, message, details, headers)
            self._rules = [r for r in self._rules if r.remaining > 0]
        return None
