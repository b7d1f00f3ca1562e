"""Versioned object storage with an etcd-like history and watchers.

Invariants:
- One global `resourceVersion` counter for every type; each write takes the
  next value and stamps it on the stored object (like etcd's revision).
- Every stored object is a `Stored`: the object parsed from its own compact
  JSON (`raw`), owned by the storage and never modified after the write that
  made it. Reads therefore share it instead of copying: list and watch output
  is the precomputed `raw` bytes, and only `get()` (whose callers modify what
  they read) and `copy_of()` make private copies.
- Per type, `_keys` is the sorted list of the stored keys (kept with bisect),
  so a page after a continue token starts with a binary search, not a scan.
- `_history` holds the last `history_limit` write events of all types, and
  every event with rv > `_history_start` is in it. Starting a watch or
  reading a snapshot older than `_history_start` is "too old" (410). A
  snapshot at an older rv is the current state with the events after it
  undone (their `prev`), as etcd reads at a past revision.
- A DELETED event carries the object's last state stamped with the
  deletion's resourceVersion, like the real server.
- Watchers are fed under the storage lock, so a watcher's queue always holds
  exactly the events it has not yet been given, in order.
"""

from __future__ import annotations

import bisect
import collections
import copy
import json
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

from .errors import gone_watch
from .resources import ResourceType

ObjKey = tuple[str, str]  # (namespace or "", name)

_encode = json.JSONEncoder(separators=(",", ":")).encode


def key_of(obj: dict) -> ObjKey:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def set_rv(obj: dict, rv: int) -> dict:
    obj.setdefault("metadata", {})["resourceVersion"] = str(rv)
    return obj


_SCALARS = (str, int, float, bool, type(None))


def clone(value):
    """A deep copy of parsed JSON (dicts, lists, scalars), several times faster
    than `copy.deepcopy`; anything else is handed to `copy.deepcopy`."""
    kind = type(value)
    if kind is dict:
        return {k: clone(v) for k, v in value.items()}
    if kind is list:
        return [clone(v) for v in value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)


def to_json(obj) -> bytes:
    """The compact JSON the server writes (same bytes as the handler's `json.dumps`)."""
    return _encode(obj).encode()


class Stored:
    """One stored object: `obj` (read-only, shared by every reader) and its JSON."""

    __slots__ = ("obj", "raw")

    def __init__(self, obj: dict, raw: bytes) -> None:
        self.obj = obj
        self.raw = raw

    @classmethod
    def of(cls, obj: dict) -> "Stored":
        """A private, immutable copy of `obj`: parsed back from its JSON, so it
        shares nothing with the caller's dict and equals what clients read.
        A value JSON cannot carry (say a YAML timestamp) falls back to a deep
        copy; such an object fails like before when it is served."""
        try:
            raw = to_json(obj)
        except (TypeError, ValueError):
            return cls(clone(obj), b"")
        return cls(json.loads(raw), raw)

    def copy(self) -> dict:
        """A private copy for a caller that may modify it."""
        return json.loads(self.raw) if self.raw else clone(self.obj)

    def json(self) -> bytes:
        return self.raw or to_json(self.obj)


@dataclass(frozen=True)
class Event:
    rv: int
    type: str               # ADDED | MODIFIED | DELETED
    resource: tuple[str, str]
    stored: Stored          # state after the write (for DELETED: last state at the deletion rv)
    prev: Stored | None     # state before the write

    @property
    def obj(self) -> dict:
        return self.stored.obj


@dataclass(frozen=True)
class WatchEvent:
    """What a watcher hands out: `obj` is shared and read-only; `raw` is its JSON
    when known (b"" when the object was converted or made for this watcher)."""
    type: str
    obj: dict
    raw: bytes = b""

    def json(self) -> bytes:
        return self.raw or to_json(self.obj)


class Watcher:
    """One watch stream's view: a queue of events filtered (and converted) for it."""

    def __init__(self, resource: ResourceType, namespace: str | None,
                 predicate: Callable[[dict], bool],
                 convert: Callable[[dict], dict] | None = None):
        self.resource = resource
        self._resource_key = resource.key()
        self.namespace = namespace
        self.predicate = predicate           # sees objects as served (after `convert`)
        self.convert = convert or (lambda obj: obj)
        self._queue: collections.deque[WatchEvent] = collections.deque()
        self._cond = threading.Condition()
        self.closed = False
        self.abrupt = False     # closed by a fault that cuts the connection mid-stream

    def _in_scope(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        if self.namespace and key_of(obj)[0] != self.namespace:
            return False
        return self.predicate(obj)

    def _served(self, stored: Stored) -> tuple[dict, bytes]:
        obj = self.convert(stored.obj)
        return obj, (stored.raw if obj is stored.obj else b"")

    def offer(self, event: Event) -> None:
        """Translate a write into what this watcher sees, if anything.

        An object that starts matching a selector arrives as ADDED and one that
        stops matching leaves as DELETED, like the real watch cache does.
        """
        if event.resource != self._resource_key:
            return
        obj, raw = self._served(event.stored)
        prev = self.convert(event.prev.obj) if event.prev is not None else None
        now = self._in_scope(obj) if event.type != "DELETED" else False
        before = self._in_scope(prev)
        if event.type == "DELETED":
            out = WatchEvent("DELETED", obj, raw) if before else None
        elif now:
            out = WatchEvent("MODIFIED" if before else "ADDED", obj, raw)
        elif before:
            out = WatchEvent("DELETED", set_rv(copy.deepcopy(prev), event.rv))
        else:
            out = None
        if out is not None:
            self._append(out)

    def _append(self, event: WatchEvent) -> None:
        with self._cond:
            self._queue.append(event)
            self._cond.notify_all()

    def push(self, type_: str, obj: dict) -> None:
        self._append(WatchEvent(type_, obj))

    def pending(self) -> bool:
        with self._cond:
            return bool(self._queue)

    def next_events(self, timeout: float, most: int = 256) -> list[WatchEvent]:
        """Up to `most` queued events (shared, read-only), waiting up to
        `timeout` seconds for the first; [] after the timeout or when closed."""
        with self._cond:
            if not self._queue and not self.closed:
                self._cond.wait(timeout)
            queue = self._queue
            return [queue.popleft() for _ in range(min(most, len(queue)))]

    def close(self, abrupt: bool = False) -> None:
        with self._cond:
            self.closed = True
            self.abrupt = abrupt
            self._cond.notify_all()


class Snapshot:
    """The objects of one type at one resourceVersion, sorted by key.

    Shares the stored objects: read-only. `keys` is sorted; `entry(key)` is
    the `Stored` at that key."""

    def __init__(self, keys: list[ObjKey], table: dict[ObjKey, Stored],
                 overlay: dict[ObjKey, Stored | None] | None = None):
        self.keys = keys
        self._table = table
        self._overlay = overlay or {}

    def entry(self, key: ObjKey) -> Stored:
        if key in self._overlay:
            return self._overlay[key]
        return self._table[key]

    def range(self, lo: int, hi: int) -> Iterator[tuple[ObjKey, Stored]]:
        for key in self.keys[lo:hi]:
            yield key, self.entry(key)

    def bounds(self, namespace: str | None, start_after: ObjKey | None) -> tuple[int, int]:
        """The index range of keys in `namespace` (all when None) after `start_after`."""
        keys = self.keys
        lo, hi = 0, len(keys)
        if namespace:
            lo = bisect.bisect_left(keys, (namespace,))
            hi = bisect.bisect_left(keys, (namespace + "\x00",))
        if start_after is not None:
            lo = max(lo, bisect.bisect_right(keys, start_after))
        return lo, max(lo, hi)


class Storage:
    """All objects of all types, the write history, and the open watchers.

    Hold `lock` around a read-check-write sequence to make it atomic.
    """

    def __init__(self, history_limit: int = 1000, first_rv: int = 1):
        self.lock = threading.RLock()
        self._written = threading.Condition(self.lock)
        self._rv = first_rv
        self._objects: dict[tuple[str, str], dict[ObjKey, Stored]] = {}
        self._keys: dict[tuple[str, str], list[ObjKey]] = {}     # sorted keys of `_objects`
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
        """A private copy of the stored object (the caller may modify it), or None."""
        with self.lock:
            stored = self._objects.get(rt.key(), {}).get((namespace or "", name))
        return stored.copy() if stored is not None else None

    def snapshot(self, rt: ResourceType, at_rv: int | None = None) -> Snapshot:
        """The objects of a type now or as of `at_rv` (shared, read-only).

        Raises ValueError when `at_rv` is older than the retained history.
        """
        with self.lock:
            table = self._objects.get(rt.key(), {})
            keys = self._keys.get(rt.key(), [])
            if at_rv is None or at_rv >= self._rv:
                return Snapshot(list(keys), dict(table))
            if at_rv < self._history_start:
                raise ValueError("too old")
            overlay: dict[ObjKey, Stored | None] = {}
            for event in reversed(self._history):
                if event.rv <= at_rv:
                    break
                if event.resource == rt.key():
                    # walking backwards, the last assignment undoes the earliest write
                    overlay[key_of(event.obj)] = None if event.type == "ADDED" else event.prev
            if not overlay:
                return Snapshot(list(keys), dict(table))
            present = (set(table) | set(overlay)) - {k for k, v in overlay.items() if v is None}
            return Snapshot(sorted(present), dict(table), overlay)

    def objects(self, rt: ResourceType, at_rv: int | None = None) -> list[dict]:
        """Objects of a type sorted by (namespace, name), now or as of `at_rv`.

        The objects are the stored ones, shared: read-only. Raises ValueError
        when `at_rv` is older than the retained history.
        """
        snap = self.snapshot(rt, at_rv)
        return [stored.obj for _, stored in snap.range(0, len(snap.keys))]

    def wait_for_rv(self, rv: int, timeout: float) -> bool:
        with self._written:
            return self._written.wait_for(lambda: self._rv >= rv, timeout)

    # --- writes -------------------------------------------------------------------------

    def write(self, rt: ResourceType, type_: str, obj: dict, prev: dict | None) -> dict:
        """Store (or for DELETED remove) `obj` at the next resourceVersion.

        `obj` is not modified nor kept. `prev` is only used when nothing is
        stored under the key (the event's previous state is the stored one).
        Returns a private copy of what was stored, stamped with its resourceVersion.
        """
        with self.lock:
            self._rv += 1
            stamped = {**obj, "metadata": {**(obj.get("metadata") or {}),
                                           "resourceVersion": str(self._rv)}}
            stored = Stored.of(stamped)
            key = key_of(stored.obj)
            table = self._objects.setdefault(rt.key(), {})
            keys = self._keys.setdefault(rt.key(), [])
            before = table.get(key)
            if before is None and prev:
                before = Stored.of(prev)
            if type_ == "DELETED":
                if table.pop(key, None) is not None:
                    del keys[bisect.bisect_left(keys, key)]
            else:
                if key not in table:
                    bisect.insort(keys, key)
                table[key] = stored
            event = Event(self._rv, type_, rt.key(), stored, before)
            self._history.append(event)
            while len(self._history) > self._history_limit:
                self._history_start = self._history.popleft().rv
            for watcher in list(self._watchers):
                watcher.offer(event)
            self._written.notify_all()
            return stored.copy()

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
                snap = self.snapshot(rt)
                lo, hi = snap.bounds(namespace, None)
                for _, stored in snap.range(lo, hi):
                    obj, raw = watcher._served(stored)
                    if watcher._in_scope(obj):
                        watcher._append(WatchEvent("ADDED", obj, raw))
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
