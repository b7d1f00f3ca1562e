"""Versioned object storage with an etcd-like history and watchers.

Invariants:
- One global `resourceVersion` counter for every type; each write takes the
  next value and stamps it on the stored object (like etcd's revision).
- `_history` holds the last `history_limit` write events of all types, and
  every event with rv > `_history_start` is in it. Starting a watch or
  reading a snapshot older than `_history_start` is "too old" (410).
- A DELETED event carries the object's last state stamped with the
  deletion's resourceVersion, like the real server.
- Watchers are fed under the storage lock, so a watcher's queue always holds
  exactly the events it has not yet been given, in order.

Objects handed out are deep copies; callers may modify them freely.
"""

from __future__ import annotations

import collections
import copy
import threading
from dataclasses import dataclass
from typing import Callable

from .errors import gone_watch
from .resources import ResourceType

ObjKey = tuple[str, str]  # (namespace or "", name)


def key_of(obj: dict) -> ObjKey:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def set_rv(obj: dict, rv: int) -> dict:
    obj.setdefault("metadata", {})["resourceVersion"] = str(rv)
    return obj


@dataclass(frozen=True)
class Event:
    rv: int
    type: str               # ADDED | MODIFIED | DELETED
    resource: tuple[str, str]
    obj: dict               # state after the write (for DELETED: last state at the deletion rv)
    prev: dict | None       # state before the write


class Watcher:
    """One watch stream's view: a queue of (type, object) filtered for it."""

    def __init__(self, resource: ResourceType, namespace: str | None,
                 predicate: Callable[[dict], bool],
                 convert: Callable[[dict], dict] | None = None):
        self.resource = resource
        self.namespace = namespace
        self.predicate = predicate           # sees objects as served (after `convert`)
        self.convert = convert or (lambda obj: obj)
        self._queue: collections.deque[tuple[str, dict]] = collections.deque()
        self._cond = threading.Condition()
        self.closed = False
        self.abrupt = False     # closed by a fault that cuts the connection mid-stream

    def _in_scope(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        if self.namespace and key_of(obj)[0] != self.namespace:
            return False
        return self.predicate(obj)

    def offer(self, event: Event) -> None:
        """Translate a write into what this watcher sees, if anything.

        An object that starts matching a selector arrives as ADDED and one that
        stops matching leaves as DELETED, like the real watch cache does.
        """
        if event.resource != self.resource.key():
            return
        obj = self.convert(event.obj)
        prev = self.convert(event.prev) if event.prev is not None else None
        now = self._in_scope(obj) if event.type != "DELETED" else False
        before = self._in_scope(prev)
        if event.type == "DELETED":
            out = ("DELETED", obj) if before else None
        elif now:
            out = ("MODIFIED" if before else "ADDED", obj)
        elif before:
            out = ("DELETED", set_rv(copy.deepcopy(prev), event.rv))
        else:
            out = None
        if out is not None:
            self.push(*out)

    def push(self, type_: str, obj: dict) -> None:
        with self._cond:
            self._queue.append((type_, obj))
            self._cond.notify_all()

    def pending(self) -> bool:
        with self._cond:
            return bool(self._queue)

    def next(self, timeout: float) -> tuple[str, dict] | None:
        """The next event, or None after `timeout` seconds or when closed."""
        with self._cond:
            if not self._queue and not self.closed:
                self._cond.wait(timeout)
            if self._queue:
                type_, obj = self._queue.popleft()
                return type_, copy.deepcopy(obj)
            return None

    def close(self, abrupt: bool = False) -> None:
        with self._cond:
            self.closed = True
            self.abrupt = abrupt
            self._cond.notify_all()


class Storage:
    """All objects of all types, the write history, and the open watchers.

    Hold `lock` around a read-check-write sequence to make it atomic.
    """

    def __init__(self, history_limit: int = 1000, first_rv: int = 1):
        self.lock = threading.RLock()
        self._written = threading.Condition(self.lock)
        self._rv = first_rv
        self._objects: dict[tuple[str, str], dict[ObjKey, dict]] = {}
        self._history: collections.deque[Event] = collections.deque()
        self._history_limit = max(1, history_limit)
        self._history_start = first_rv
        self._watchers: set[Watcher] = set()

    # --- reads --------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    def get(self, rt: ResourceType, namespace: str, name: str) -> dict | None:
        with self.lock:
            obj = self._objects.get(rt.key(), {}).get((namespace or "", name))
            return copy.deepcopy(obj) if obj is not None else None

    def objects(self, rt: ResourceType, at_rv: int | None = None) -> list[dict]:
        """Objects of a type sorted by (namespace, name), now or as of `at_rv`.

        Raises ValueError when `at_rv` is older than the retained history.
        """
        with self.lock:
            current = dict(self._objects.get(rt.key(), {}))
            if at_rv is not None and at_rv < self._rv:
                if at_rv < self._history_start:
                    raise ValueError("too old")
                for event in reversed(self._history):
                    if event.rv <= at_rv:
                        break
                    if event.resource != rt.key():
                        continue
                    key = key_of(event.obj)
                    if event.type == "ADDED":
                        current.pop(key, None)
                    else:
                        current[key] = event.prev
            return [copy.deepcopy(current[k]) for k in sorted(current)]

    def wait_for_rv(self, rv: int, timeout: float) -> bool:
        with self._written:
            return self._written.wait_for(lambda: self._rv >= rv, timeout)

    # --- writes -------------------------------------------------------------------------

    def write(self, rt: ResourceType, type_: str, obj: dict, prev: dict | None) -> dict:
        """Store (or for DELETED remove) `obj` at the next resourceVersion.

        Returns a copy of what was stored, stamped with its resourceVersion.
        """
        with self.lock:
            self._rv += 1
            stored = set_rv(copy.deepcopy(obj), self._rv)
            table = self._objects.setdefault(rt.key(), {})
            if type_ == "DELETED":
                table.pop(key_of(stored), None)
            else:
                table[key_of(stored)] = stored
            event = Event(self._rv, type_, rt.key(), stored, copy.deepcopy(prev) if prev else None)
            self._history.append(event)
            while len(self._history) > self._history_limit:
                self._history_start = self._history.popleft().rv
            for watcher in list(self._watchers):
                watcher.offer(event)
            self._written.notify_all()
            return copy.deepcopy(stored)

    def compact(self) -> None:
        """Forget all history: only the current state can be read or watched from."""
        with self.lock:
            self._history.clear()
            self._history_start = self._rv

    # --- watchers -----------------------------------------------------------------------

    def watch(self, rt: ResourceType, since: int | None, namespace: str | None,
              predicate: Callable[[dict], bool],
              convert: Callable[[dict], dict] | None = None,
              mark_initial_end: bool = False) -> Watcher:
        """Register a watcher primed with what happened after `since`.

        `since=None` primes it with synthetic ADDED events for the current
        state, followed (with `mark_initial_end`, the watch-list protocol) by
        a BOOKMARK annotated `k8s.io/initial-events-end`. Raises
        ApiError(410) when `since` is older than the history.
        """
        watcher = Watcher(rt, namespace, predicate, convert)
        with self.lock:
            if since is None:
                for obj in map(watcher.convert, self.objects(rt)):
                    if watcher._in_scope(obj):
                        watcher.push("ADDED", obj)
                if mark_initial_end:
                    watcher.push("BOOKMARK", {
                        "kind": rt.kind, "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": str(self._rv),
                                     "annotations": {"k8s.io/initial-events-end": "true"}}})
            else:
                if since < self._history_start:
                    raise gone_watch(since, self._history_start)
                for event in self._history:
                    if event.rv > since:
                        watcher.offer(event)
            self._watchers.add(watcher)
        return watcher

    @property
    def watcher_count(self) -> int:
        with self.lock:
            return len(self._watchers)

    def bookmark_rv(self, watcher: Watcher) -> int | None:
        """A resourceVersion safe to bookmark: none when events are still queued."""
        with self.lock:
            return None if watcher.pending() else self._rv

    def unwatch(self, watcher: Watcher) -> None:
        with self.lock:
            self._watchers.discard(watcher)
        watcher.close()

    def close_watchers(self, abrupt: bool = False) -> None:
        with self.lock:
            watchers = list(self._watchers)
            self._watchers.clear()
        for watcher in watchers:
            watcher.close(abrupt)
