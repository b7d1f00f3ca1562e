"""Keep a store in step with a source by listing and then watching.

The cycle is the one client-go's reflector uses:

1. **List** the whole collection and hand it to the sink's ``replace``; its
   ``resourceVersion`` is where the watch starts. Which version to ask for
   decides who pays for the list (client-go's ``relistResourceVersion``):

   - the first list asks for ``resourceVersion="0"``: "any version", which
     the API server answers from its watch cache, in memory, in one piece
     (it ignores ``limit`` for "0"). Without "0" every list is a quorum read
     from etcd, paged; with a DaemonSet on thousands of nodes, every rollout
     would put thousands of full etcd reads on the control plane at once;
   - a relist asks for the last resourceVersion seen (from the list or any
     watch event or bookmark), with no ``limit``: the watch cache answers
     with a state at least that new, so a relist never goes back in time
     and still costs etcd nothing. (With a ``limit`` and no
     ``resourceVersionMatch`` the server would read exactly that version
     from etcd, page by page: the legacy meaning client-go avoids the same
     way.)
   - pages of ``page_size`` are asked for only when the server has shown
     it pages: the "0" list came back with a ``continue`` token (no watch
     cache for this resource, or it is turned off). Then every later list
     pages too. A continue token that expires mid-list (410) gives one
     unpaged list at the same version, as client-go's pager does;
   - when the version asked for is gone (410 Expired) or the watch cache
     has not reached it (504 ResourceVersionTooLarge), the list is retried
     at once with ``resourceVersion`` unset: a consistent read from etcd,
     the one list that always makes progress. The next relist goes back to
     the last seen version.
2. **Watch** from that resourceVersion with bookmarks on and a randomised
   ``timeoutSeconds``, applying each event to the sink and remembering the
   newest resourceVersion seen (bookmarks move it on without any change).
3. When a watch ends normally, watch again from the remembered version. When
   the server says that version (or a continue token) is too old
   (``ResourceExpired``, 410), list again: that is the only way to learn
   about changes the server no longer has history for, including deletes.
4. Transient failures (no connection, 429, 5xx) are retried after a backoff.

Why not ``kubernetes.watch.Watch`` or the client's informer: they list with
no resourceVersion (a quorum read from etcd every time) and without paging
(10,000 objects in one etcd response), do not ask for
bookmarks (so a quiet collection's resourceVersion goes stale and every
reconnect relists), have no backoff (a down API server is retried in a tight
loop) and deserialize into OpenAPI model classes, which is several times
slower and larger than the plain dicts ``json.loads`` gives.

Backoff numbers (same as client-go's reflector, for the same reasons):

- first retry after 0.8 s (jittered down to 0.4 s): a dropped connection or
  one API server replica restarting costs well under a second;
- doubling up to 30 s: during a long outage every informer of every node
  retries at most about twice a minute, so a recovering API server is not
  flattened by the whole cluster reconnecting, yet we notice recovery
  within half a minute;
- back to 0.8 s only after 2 minutes without a failure, so a server that
  accepts a connection and then fails again keeps being backed off;
- a 429's ``Retry-After`` is a lower bound for the delay (capped at 5 minutes
  in case of a nonsensical value).

A watch that ends in under a second without delivering an event is treated
as a failure (a proxy closing idle streams, a server shutting down), so it
is backed off like one instead of being reopened in a tight loop.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from platformd.common import errors
from platformd.common.backoff import Backoff
from platformd.common.clock import REAL_CLOCK, Clock
from platformd.common.resources import Resource

log = logging.getLogger(__name__)

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"


class WatchEvent(NamedTuple):
    """One watch event. ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK
    (a source turns ERROR events into exceptions); ``object`` is plain JSON."""

    type: str
    object: dict


@dataclass(frozen=True)
class ListPage:
    """One page of a list. ``continue_token`` is "" on the last page.

    Items carry ``kind`` and ``apiVersion`` like watched objects do (the API
    server leaves them out of list items; the source fills them in).
    """

    items: list[dict]
    resource_version: str
    continue_token: str = ""


class WatchStream(Protocol):
    """Iterating yields events until the server ends the watch (then the
    iteration simply stops) or fails (then it raises an ``errors.ApiError``).
    ``close()`` may be called from another thread to end the iteration."""

    def __iter__(self) -> Iterator[WatchEvent]: ...

    def close(self) -> None: ...


class Source(Protocol):
    """What a reflector lists and watches: the API server or a folder of files."""

    def list(self, resource: Resource, namespace: str | None, *,
             limit: int, continue_token: str = "", resource_version: str = "") -> ListPage:
        """One page. ``resource_version`` as the API server takes it ("" is a
        consistent read, "0" any version; never given with a continue token)."""

    def watch(self, resource: Resource, namespace: str | None, *,
              resource_version: str, timeout_seconds: int) -> WatchStream: ...


class Sink(Protocol):
    """What a reflector keeps in step: a ``Store``, or an informer's dispatcher."""

    def replace(self, objects: list[dict]) -> object: ...

    def add(self, obj: dict) -> object: ...

    def update(self, obj: dict) -> object: ...

    def delete(self, obj: dict) -> object: ...


@dataclass(frozen=True)
class ReflectorOptions:
    """Tunables, with the reasons for the defaults in the module docstring."""

    page_size: int = 500  # objects per list page: bounded response size and server memory
    min_watch_timeout: float = 300.0  # watches last 5-10 minutes (randomised, like client-go),
    # so connections are spread over API server replicas and reconnects are not in step
    backoff_initial: float = 0.8
    backoff_cap: float = 30.0
    backoff_reset_after: float = 120.0
    max_retry_after: float = 300.0
    short_watch: float = 1.0  # a watch ending sooner than this with no events counts as a failure


class _WatchEndedEarly(errors.ApiError):
    """The server closed a watch at once without sending anything."""


@dataclass
class _Status:
    """What the reflector has achieved, for health reporting.

    ``last_success`` is the clock's monotonic time of the last successful
    list, watch start or watch event; None until the first one.
    """

    synced: threading.Event = field(default_factory=threading.Event)
    last_success: float | None = None
    watching: bool = False
    resource_version: str = ""
    lists: int = 0


class Reflector:
    """Keeps ``sink`` equal to the collection ``resource`` in ``namespace``.

    ``run()`` blocks until ``stop()`` is called (from another thread).
    Everything the sink receives is applied from the ``run()`` thread, in the
    order the source reported it, so a sink needs no locking against itself.
    """

    def __init__(self, source: Source, resource: Resource, sink: Sink, *,
                 namespace: str | None = None, clock: Clock = REAL_CLOCK,
                 options: ReflectorOptions | None = None,
                 rng: random.Random | None = None, name: str | None = None) -> None:
        self.source = source
        self.resource = resource
        self.sink = sink
        self.namespace = namespace
        self.name = name or (f"{resource}/{namespace}" if namespace else str(resource))
        self._clock = clock
        self._opts = options or ReflectorOptions()
        self._rng = rng or random.Random()
        self._backoff = Backoff(self._opts.backoff_initial, self._opts.backoff_cap, rng=self._rng)
        self._last_failure: float | None = None
        self._stop = threading.Event()
        self._stream_lock = threading.Lock()
        self._stream: WatchStream | None = None
        self._status = _Status()
        self._needs_list = True
        self._expired_in_a_row = 0
        # The server answered a resourceVersion="0" list in pages: it has no
        # watch cache for this resource, so lists page from now on.
        self._paginated = False

    # ---- health

    def has_synced(self) -> bool:
        """True once the first full list has been handed to the sink."""
        return self._status.synced.is_set()

    def wait_for_sync(self, timeout: float | None) -> bool:
        return self._status.synced.wait(timeout)

    @property
    def last_success(self) -> float | None:
        return self._status.last_success

    @property
    def watching(self) -> bool:
        """True while a watch is open (the server answered it)."""
        return self._status.watching

    @property
    def resource_version(self) -> str:
        """The newest resourceVersion the sink is known to be up to date with."""
        return self._status.resource_version

    @property
    def list_count(self) -> int:
        """How many full lists have completed (1 after the initial sync)."""
        return self._status.lists

    # ---- lifecycle

    def run(self) -> None:
        """List and watch until ``stop()``. Never raises for API failures."""
        while not self._stop.is_set():
            try:
                if self._needs_list:
                    self._list_and_replace()
                if not self._stop.is_set():
                    self._watch()
            except errors.ResourceExpired as err:
                # Our resourceVersion or continue token is gone: relist at
                # once. Only a second 410 in a row (a broken server or proxy)
                # is backed off, so this can never become a tight loop.
                self._needs_list = True
                self._expired_in_a_row += 1
                log.info("%s: %s; listing again", self.name, err)
                if self._expired_in_a_row > 1:
                    self._sleep(self._failure_delay(err))
            except errors.ApiError as err:
                level = logging.ERROR if isinstance(err, errors.AccessDenied) else logging.WARNING
                delay = self._failure_delay(err)
                log.log(level, "%s: %s; retrying in %.1fs", self.name, err, delay)
                self._sleep(delay)
            except Exception:
                # A bug in a sink (or a source) must not end the reflector,
                # and the store may now be half updated: list again.
                self._needs_list = True
                delay = self._failure_delay(None)
                log.exception("%s: unexpected error; listing again in %.1fs", self.name, delay)
                self._sleep(delay)
        self._status.watching = False

    def stop(self) -> None:
        """Ask ``run()`` to return; interrupts an open watch. Safe from any thread."""
        self._stop.set()
        with self._stream_lock:
            stream = self._stream
        if stream is not None:
            stream.close()

    # ---- steps

    def _list_and_replace(self) -> None:
        # "0" first, then the last version seen (see the module docstring).
        asked = self._status.resource_version if self._status.lists else "0"
        try:
            items, resource_version, paged = self._list(asked)
        except (errors.ResourceExpired, errors.ResourceVersionTooLarge) as err:
            log.info("%s: list at resourceVersion %s: %s; listing from etcd", self.name, asked, err)
            asked = ""
            items, resource_version, paged = self._list(asked)
        if items is None:  # stopped
            return
        if asked == "0" and paged:
            self._paginated = True
        self.sink.replace(items)
        self._needs_list = False
        self._expired_in_a_row = 0
        self._status.resource_version = resource_version
        self._status.lists += 1
        self._mark_success()
        self._status.synced.set()
        log.debug("%s: listed %d objects at resourceVersion %s", self.name, len(items), resource_version)

    def _list(self, resource_version: str) -> tuple[list[dict] | None, str, bool]:
        """(items or None when stopped, the list's resourceVersion, whether it came in pages)."""
        paging = self._paginated or resource_version in ("", "0")
        limit = self._opts.page_size if paging else 0
        items: list[dict] = []
        first: ListPage | None = None
        continue_token = ""
        while True:
            try:
                page = self.source.list(self.resource, self.namespace, limit=limit, continue_token=continue_token,
                                        resource_version="" if continue_token else resource_version)
            except errors.ResourceExpired:
                if not continue_token:
                    raise
                # The snapshot the pages came from is compacted: one unpaged list instead.
                log.info("%s: continue token expired; listing in one piece", self.name)
                page = self.source.list(self.resource, self.namespace, limit=0,
                                        resource_version=resource_version)
                return page.items, page.resource_version, True
            if first is None:
                first = page
            items.extend(page.items)
            continue_token = page.continue_token
            if not continue_token or self._stop.is_set():
                break
        if self._stop.is_set():
            return None, "", False
        return items, first.resource_version, first.continue_token != ""

    def _watch(self) -> None:
        timeout = int(self._rng.uniform(self._opts.min_watch_timeout, 2 * self._opts.min_watch_timeout))
        stream = self.source.watch(self.resource, self.namespace,
                                   resource_version=self._status.resource_version,
                                   timeout_seconds=timeout)
        with self._stream_lock:
            self._stream = stream
        if self._stop.is_set():  # stop() ran before we published the stream
            stream.close()
        started = self._clock.monotonic()
        events = 0
        self._status.watching = True
        self._mark_success()
        try:
            for event in stream:
                if self._stop.is_set():
                    break
                events += 1
                self._apply(event)
        finally:
            self._status.watching = False
            with self._stream_lock:
                self._stream = None
            stream.close()
        if (events == 0 and not self._stop.is_set()
                and self._clock.monotonic() - started < self._opts.short_watch):
            raise _WatchEndedEarly("watch closed by the server at once, without events")
        self._mark_success()

    def _apply(self, event: WatchEvent) -> None:
        kind = event.type
        obj = event.object
        if kind == ADDED:
            self.sink.add(obj)
        elif kind == MODIFIED:
            self.sink.update(obj)
        elif kind == DELETED:
            self.sink.delete(obj)
        elif kind != BOOKMARK:
            log.warning("%s: ignoring watch event of unknown type %r", self.name, kind)
            return
        resource_version = (obj.get("metadata") or {}).get("resourceVersion")
        if resource_version:
            self._status.resource_version = resource_version
        self._mark_success()

    # ---- backoff

    def _mark_success(self) -> None:
        self._status.last_success = self._clock.monotonic()

    def _failure_delay(self, err: errors.ApiError | None) -> float:
        now = self._clock.monotonic()
        if self._last_failure is not None and now - self._last_failure >= self._opts.backoff_reset_after:
            self._backoff.reset()
        self._last_failure = now
        delay = self._backoff.next_delay()
        retry_after = getattr(err, "retry_after", None)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self._opts.max_retry_after))
        return delay

    def _sleep(self, seconds: float) -> None:
        self._clock.wait(self._stop, seconds)
