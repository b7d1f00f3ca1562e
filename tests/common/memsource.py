"""An in-memory list/watch source for unit tests of the reflector and informer.

Deliberately small: one history of changes, snapshots for paging, and a few
faults (fail the next calls, compact history, drop open watches). Tests that
need HTTP, real status codes and restarts use ``tests.fakeapi`` instead.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator

from platformd.common import errors
from platformd.common.reflector import ADDED, DELETED, MODIFIED, ListPage, WatchEvent
from platformd.common.resources import Resource
from platformd.common.store import key_of


class MemorySource:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.objects: dict[tuple[Resource, str], dict] = {}
        self.rv = 0
        self.history: list[tuple[int, Resource, str, dict]] = []
        self.compacted_rv = 0
        self.calls: list[tuple[str, dict]] = []  # ("list" | "watch", arguments)
        self.faults: deque[BaseException] = deque()
        self.on_list_page = None  # hook(page_number) called before answering a page
        self.end_watches_at_once = False
        self._snapshots: dict[str, list[dict]] = {}
        self._watches: list[MemoryWatch] = []

    # ---- changing the "server"

    def _change(self, resource: Resource, kind: str, obj: dict) -> dict:
        with self.cond:
            self.rv += 1
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
            key = (resource, key_of(obj))
            if kind == DELETED:
                self.objects.pop(key)
            else:
                self.objects[key] = obj
            self.history.append((self.rv, resource, kind, obj))
            self.cond.notify_all()
            return obj

    def create(self, resource: Resource, obj: dict) -> dict:
        return self._change(resource, ADDED, obj)

    def update(self, resource: Resource, obj: dict) -> dict:
        return self._change(resource, MODIFIED, obj)

    def delete(self, resource: Resource, key: str) -> dict:
        with self.cond:
            obj = self.objects[(resource, key)]
        return self._change(resource, DELETED, obj)

    def state(self, resource: Resource) -> dict[str, dict]:
        with self.cond:
            return {key: obj for (res, key), obj in self.objects.items() if res == resource}

    # ---- faults

    def fail_next(self, *exceptions: BaseException) -> None:
        with self.cond:
            self.faults.extend(exceptions)

    def compact(self) -> None:
        with self.cond:
            self.compacted_rv = self.rv
            self._snapshots.clear()

    def drop_watches(self) -> None:
        with self.cond:
            for watch in self._watches:
                watch.dropped = True
            self.cond.notify_all()

    def count(self, call: str) -> int:
        with self.cond:
            return sum(1 for name, _ in self.calls if name == call)

    def _fault(self) -> None:
        if self.faults:
            raise self.faults.popleft()

    # ---- Source

    def list(self, resource: Resource, namespace: str | None, *,
             limit: int, continue_token: str = "", resource_version: str = "") -> ListPage:
        """The current state, paged by ``limit`` (a server without a watch cache)."""
        with self.cond:
            self.calls.append(("list", {"limit": limit, "continue": continue_token,
                                        "resourceVersion": resource_version}))
            self._fault()
            if continue_token:
                snapshot_rv, _, offset_text = continue_token.partition(":")
                if continue_token not in self._snapshots:
                    raise errors.ResourceExpired(410, "continue token expired", "Expired")
                items = self._snapshots.pop(continue_token)
                offset = int(offset_text)
            else:
                snapshot_rv = str(self.rv)
                items = sorted((obj for (res, _), obj in self.objects.items()
                                if res == resource), key=key_of)
                offset = 0
            page_number = offset // limit if limit else 0
        if self.on_list_page is not None:
            self.on_list_page(page_number)
        with self.cond:
            if continue_token and int(snapshot_rv) < self.compacted_rv:
                raise errors.ResourceExpired(410, "continue token expired", "Expired")
            end = offset + limit if limit else len(items)
            token = ""
            if end < len(items):
                token = f"{snapshot_rv}:{end}"
                self._snapshots[token] = items
            return ListPage([dict(o) for o in items[offset:end]], snapshot_rv, token)

    def watch(self, resource: Resource, namespace: str | None, *,
              resource_version: str, timeout_seconds: int) -> MemoryWatch:
        with self.cond:
            self.calls.append(("watch", {"resourceVersion": resource_version,
                                         "timeoutSeconds": timeout_seconds}))
            self._fault()
            since = int(resource_version or 0)
            if since < self.compacted_rv:
                raise errors.ResourceExpired(410, f"too old resource version: {since}", "Expired")
            watch = MemoryWatch(self, resource, since)
            watch.dropped = self.end_watches_at_once
            self._watches.append(watch)
            return watch


class MemoryWatch:
    def __init__(self, source: MemorySource, resource: Resource, since: int) -> None:
        self.source = source
        self.resource = resource
        self.since = since
        self.dropped = False
        self.closed = False

    def __iter__(self) -> Iterator[WatchEvent]:
        source = self.source
        while True:
            with source.cond:
                while True:
                    if self.closed or self.dropped:
                        source._watches.remove(self)
                        return
                    pending = [h for h in source.history if h[0] > self.since]
                    if pending:
                        break
                    source.cond.wait(0.05)
            for rv, resource, kind, obj in pending:
                self.since = rv
                if resource == self.resource:
                    yield WatchEvent(kind, obj)

    def close(self) -> None:
        with self.source.cond:
            self.closed = True
            self.source.cond.notify_all()
