"""Change trackers: what changed since the last sync, and nothing else.

After kube-proxy's ``servicechangetracker.go``. Informer handlers call
``update(previous, current)``; the tracker keeps one :class:`Change` per
object key holding the state at the last sync (``previous``) and the latest
state seen (``current``), both in parsed form (``translate.parse_*``). A
change whose ``current`` equals its ``previous`` cancelled out (an add then a
delete, or an update that touched nothing the proxy reads) and is dropped.

The sync calls ``take()``, which hands over the pending changes and starts a
new batch. Handlers never touch the proxier's state; the sync applies the
changes. Thread-safe: handlers run on informer threads, ``take`` on the sync's.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from platformd.common.store import key_of

from .translate import parse_service, parse_slice, trigger_time

T = TypeVar("T")


@dataclass
class Change(Generic[T]):
    previous: T
    current: T


class ChangeTracker(Generic[T]):
    """``{previous, current}`` per object key, with cancelling changes dropped.

    ``parse`` maps an API object (or None for "absent") to the comparable form
    the proxy uses. ``on_change`` (optional) is called with the number of
    pending changes after every update, for metrics.
    """

    def __init__(self, parse: Callable[[dict | None], T],
                 on_change: Callable[[int], None] | None = None) -> None:
        self._parse = parse
        self._on_change = on_change
        self._lock = threading.Lock()
        self._items: dict[str, Change[T]] = {}

    def update(self, previous: dict | None, current: dict | None) -> bool:
        """Record that the object went from ``previous`` to ``current`` (None = absent).

        Returns True when a change is pending for its key afterwards.
        """
        obj = current if current is not None else previous
        if obj is None:
            return False
        key = key_of(obj)
        parsed_prev, parsed_cur = self._parse(previous), self._parse(current)
        with self._lock:
            change = self._items.get(key)
            if change is None:
                change = self._items[key] = Change(parsed_prev, parsed_cur)
            else:
                change.current = parsed_cur  # keep the previous from the last sync
            self._note(key, current)
            if change.previous == change.current:
                del self._items[key]
                self._forget(key)
            pending = key in self._items
            count = len(self._items)
        if self._on_change is not None:
            self._on_change(count)
        return pending

    def _note(self, key: str, current: dict | None) -> None:
        """Hook for subclasses to remember extra facts per pending change (lock held)."""

    def _forget(self, key: str) -> None:
        """Hook: the change of ``key`` cancelled out (lock held)."""

    def take(self) -> dict[str, Change[T]]:
        """Hand over the pending changes and start a new batch."""
        with self._lock:
            items, self._items = self._items, {}
        if self._on_change is not None:
            self._on_change(0)
        return items

    def pending(self) -> int:
        with self._lock:
            return len(self._items)


class ServiceChangeTracker(ChangeTracker):
    def __init__(self, on_change: Callable[[int], None] | None = None) -> None:
        super().__init__(parse_service, on_change)


class EndpointSliceChangeTracker(ChangeTracker):
    """Also remembers each pending slice's last-change-trigger-time, for the
    network programming latency metric (``take_with_trigger_times``)."""

    def __init__(self, on_change: Callable[[int], None] | None = None) -> None:
        super().__init__(parse_slice, on_change)
        self._triggers: dict[str, str] = {}

    def _note(self, key: str, current: dict | None) -> None:
        t = trigger_time(current)
        if t and key not in self._triggers:
            self._triggers[key] = t  # the oldest unapplied trigger counts

    def _forget(self, key: str) -> None:
        self._triggers.pop(key, None)

    def take_with_trigger_times(self) -> tuple[dict[str, Change], list[str]]:
        """Like ``take``, plus the trigger times of the changes handed over."""
        with self._lock:
            items, self._items = self._items, {}
            times = [t for k, t in self._triggers.items() if k in items]
            self._triggers = {}
        if self._on_change is not None:
            self._on_change(0)
        return items, times
