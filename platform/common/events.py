"""Record ``core/v1`` Events about objects, without ever slowing the caller.

A controller that reports "sync failed" from a hot loop must not turn into a
denial of service against the API server, and must not stall because the API
server is slow. So ``event()`` only does in-memory bookkeeping under a lock;
one background thread talks to the API.

What ``event()`` does, in order (after client-go's ``EventCorrelator``):

1. **Aggregate similar events.** Events that differ only in their message
   (same source, object, type and reason) are "similar". The first 10
   distinct messages within 10 minutes are recorded as they are; after that
   they are folded into one Event whose message is
   ``(combined from similar events): <latest message>``. A controller that
   puts an ever-changing detail (a timestamp, a resourceVersion) into its
   messages would otherwise create a new Event object per call.
2. **Rate-limit per object.** Each involved object (per source) has a token
   bucket of 25 events, refilled at 1 per 5 minutes; an event without a
   token is dropped and counted. 25 covers the burst of a normal object
   lifecycle (created, scheduled, synced, a few warnings); after that one
   event per 5 minutes still shows that the problem persists, while an object
   stuck in a failure loop cannot fill etcd with Events.
3. **De-duplicate.** An event identical to one already recorded (same key
   including the message) is not a new object: its ``count`` and
   ``lastTimestamp`` go up and the existing Event is PATCHed.
4. **Queue for sending, coalesced per object.** Records wait per involved
   object, and the sender takes objects in turn (one record each, round
   robin), so one chatty object cannot delay everybody else's first Event.
   A record already waiting is updated in place (a burst of repeats becomes
   one PATCH with the final count). While more than ``max_pending`` records
   wait, a new event of an object that already has records waiting replaces
   them (``coalesced``: its newest Event still goes out, with the counts of
   repeats kept on the records), and an object with nothing waiting is
   always queued: every object with something to say gets an Event. (A queue
   that dropped new records when full gave 1,333 of ~2,265 refused Ingresses
   no Event at all during a burst.) The number of waiting objects is bounded
   by ``max_objects`` only as a last line against a runaway caller; past it
   an event is dropped and counted.

A waiting record is small (about 300 bytes with its place in the queue):
the involved object's identity is the tuple the queue is keyed by anyway,
times are the clock's floats, and the Event's body is built when it is
sent. At start the ingress controller records one "Sync" Event per
Ingress. 10,000 of them waiting took 15.4 MiB (tracemalloc) when each
record held its ``involvedObject`` dict and formatted times and each object
had an ``OrderedDict`` of its own in the queue; now 6.3 MiB, of which
3.4 MiB are the caches above, bounded at ``CACHE_SIZE`` keys whatever the
cluster size.

The sender creates the Event (POST) the first time and PATCHes ``count``,
``lastTimestamp`` and ``message`` afterwards; a PATCH that finds the Event
gone (expired on the server) creates it again. Transient API errors are
retried a few times with backoff; then the update is dropped and counted.
"""

from __future__ import annotations

import copy
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from platformd.common import errors, kubeclient
from platformd.common.backoff import Backoff
from platformd.common.clock import REAL_CLOCK, Clock
from platformd.common.ratelimit import TokenBucket

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"

# Aggregation, the same numbers as client-go: up to 10 distinct messages per
# 10 minutes for one (object, type, reason) before they are combined.
SIMILAR_MAX_MESSAGES = 10
SIMILAR_WINDOW = 600.0
# Spam filter per involved object: burst 25, then 1 per 5 minutes (see above).
SPAM_BURST = 25
SPAM_RATE = 1.0 / 300.0
# How many keys each cache remembers (least recently used are forgotten);
# bounds memory however many objects come and go.
CACHE_SIZE = 4096
# Messages are for people; anything longer (a stack trace) belongs in logs.
MAX_MESSAGE = 1024
# Sending: a few attempts, 0.5 s doubling to 10 s, for transient errors only.
# Events are best effort; a longer retry would only delay newer events.
SEND_ATTEMPTS = 4
SEND_BACKOFF_INITIAL = 0.5
SEND_BACKOFF_CAP = 10.0
REQUEST_TIMEOUT = 10.0

_COMBINED_PREFIX = "(combined from similar events): "
_TRANSIENT = (errors.ApiUnreachable, errors.ServerError, errors.TooManyRequests,
              errors.InvalidResponse)


@dataclass
class EventStats:
    """Counters since the recorder was made (a snapshot from ``stats()``)."""

    created: int = 0
    patched: int = 0
    dropped_rate_limited: int = 0
    dropped_queue_full: int = 0  # only past ``max_objects`` waiting objects
    coalesced: int = 0  # waiting records replaced by a newer event of the same object
    failed: int = 0


# An object key (``_object_key``) is (component, host, kind, namespace, name,
# uid, apiVersion); the positions read back from it:
_KIND, _NAMESPACE, _NAME, _UID, _API_VERSION = 2, 3, 4, 5, 6


@dataclass(slots=True)
class _Record:
    """One Event as we believe it is on the server (or about to be).

    Kept small: many wait at once (see the module docstring). ``obj`` is the
    object key (``_object_key``), shared with the queue and the rate limiter.
    """

    obj: tuple
    resource_version: str  # of the involved object when the event was first recorded; "" if none
    type: str
    reason: str
    message: str
    first: float  # wall-clock seconds (``_time`` formats them when sent)
    last: float
    count: int = 1
    name: str | None = None  # set once the server has it
    queued: bool = False     # invariant: True iff it is in ``_pending`` (under its object)

    @property
    def namespace(self) -> str:
        """Where the Event lives: the object's namespace, "default" for cluster-scoped objects."""
        return self.obj[_NAMESPACE] or "default"


@dataclass(slots=True)
class _Similar:
    window_start: float
    messages: list[str] = field(default_factory=list)  # at most SIMILAR_MAX_MESSAGES: a list is smaller than a set


class _Lru(OrderedDict):
    """An OrderedDict that forgets its least recently used entries past ``size``."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self._size = size

    def touch(self, key: Any) -> Any:
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self._size:
            self.popitem(last=False)


class EventRecorder:
    """Records Events for ``component`` running on ``host``; see the module docstring.

    ``event()`` is thread-safe and never blocks on the network. The sender
    thread starts with the first event; ``stop()`` ends it.
    """

    def __init__(self, api_client: kubeclient.Client, component: str, host: str = "",
                 clock: Clock = REAL_CLOCK, max_pending: int = 1000, max_objects: int = 100_000) -> None:
        self.component = component
        self.host = host
        self._api = api_client
        self._clock = clock
        self._max_pending = max_pending
        self._max_objects = max_objects
        self._cond = threading.Condition()
        # Under ``_cond``:
        self._records: _Lru = _Lru(CACHE_SIZE)   # event key -> _Record
        self._similar: _Lru = _Lru(CACHE_SIZE)   # similar key -> _Similar
        self._buckets: _Lru = _Lru(CACHE_SIZE)   # object key -> TokenBucket
        # object key -> its records waiting to be sent, objects in turn: the
        # record itself when it is the only one (most objects: a list per
        # object was 1.2 MiB of 10,000 queued), else a list, oldest first.
        # The records live here while queued, so the LRU above cannot lose them.
        self._pending: OrderedDict[tuple, _Record | list[_Record]] = OrderedDict()
        self._pending_records = 0
        self._in_flight = 0
        self._stats = EventStats()
        self._stopping = False
        self._stop_wake = threading.Event()
        self._sender: threading.Thread | None = None

    # -- caller side ---------------------------------------------------------------

    def event(self, obj: Mapping[str, Any], type: str,  # noqa: A002 - the API's field name
              reason: str, message: str) -> None:
        """Record that ``reason``/``message`` happened to ``obj`` (a plain API object).

        ``type`` is ``"Normal"`` or ``"Warning"`` (ValueError otherwise: a
        programming error). Never blocks; may drop the event (see ``stats``).
        """
        if type not in (NORMAL, WARNING):
            raise ValueError(f"event type must be Normal or Warning, not {type!r}")
        object_key, resource_version = _object_key(self.component, self.host, obj)
        message = message[:MAX_MESSAGE]
        # Keys nest the object key (shared) rather than copy its seven fields.
        similar_key = (object_key, type, reason)
        with self._cond:
            if self._stopping:
                return
            now = self._clock.monotonic()
            event_key, message = self._aggregate(similar_key, message, now)
            bucket = self._buckets.touch(object_key)
            if bucket is None:
                bucket = TokenBucket(SPAM_RATE, SPAM_BURST, self._clock)
                self._buckets.put(object_key, bucket)
            if not bucket.try_take():
                self._stats.dropped_rate_limited += 1
                return
            stamp = self._clock.wall()
            record = self._records.touch(event_key)
            if record is None:
                record = _Record(object_key, resource_version, type, reason, message, stamp, stamp)
            else:
                record.count += 1
                record.last = stamp
                record.message = message
            if not record.queued and not self._enqueue(record):
                return
            self._records.put(event_key, record)
            self._ensure_sender()

    def _enqueue(self, record: _Record) -> bool:
        """Queue ``record`` under its object (see the module docstring); holds ``_cond``."""
        waiting = self._pending.get(record.obj)
        if waiting is None:
            if len(self._pending) >= self._max_objects:
                self._stats.dropped_queue_full += 1
                return False
            self._pending[record.obj] = record
        elif self._pending_records >= self._max_pending:
            older = _as_list(waiting)
            for each in older:
                each.queued = False
            self._stats.coalesced += len(older)
            self._pending_records -= len(older)
            self._pending[record.obj] = record  # keeps the object's place in turn
        elif type(waiting) is list:
            waiting.append(record)
        else:
            self._pending[record.obj] = [waiting, record]
        record.queued = True
        self._pending_records += 1
        self._cond.notify_all()
        return True

    def _next_pending(self) -> _Record:
        """The next record to send: the first waiting object's oldest; holds ``_cond``."""
        object_key, waiting = self._pending.popitem(last=False)
        if type(waiting) is list:
            record = waiting.pop(0)
            # its other records wait for the next round
            self._pending[object_key] = waiting if len(waiting) > 1 else waiting[0]
        else:
            record = waiting
        self._pending_records -= 1
        return record

    def _aggregate(self, similar_key: tuple, message: str, now: float) -> tuple[tuple, str]:
        """The event key and message to record under. Holds ``_cond``."""
        similar = self._similar.touch(similar_key)
        if similar is None or now - similar.window_start > SIMILAR_WINDOW:
            similar = _Similar(window_start=now)
            self._similar.put(similar_key, similar)
        if message in similar.messages:
            return (similar_key, message), message
        if len(similar.messages) < SIMILAR_MAX_MESSAGES:
            similar.messages.append(message)
            return (similar_key, message), message
        return (similar_key, None), _COMBINED_PREFIX + message

    def stats(self) -> EventStats:
        with self._cond:
            return EventStats(**vars(self._stats))

    def flush(self, timeout: float) -> bool:
        """Wait (real seconds) until nothing is queued or being sent; True if so."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._in_flight,
                                       timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Send what is queued for up to ``timeout`` real seconds, then stop.

        Events after ``stop`` are ignored.
        """
        self.flush(timeout)
        with self._cond:
            self._stopping = True
            self._pending.clear()
            self._pending_records = 0
            self._cond.notify_all()
        self._stop_wake.set()
        if self._sender is not None:
            self._sender.join(timeout)

    # -- sender side ---------------------------------------------------------------

    def _ensure_sender(self) -> None:
        if self._sender is None:
            self._sender = threading.Thread(target=self._send_loop,
                                            name=f"events-{self.component}", daemon=True)
            self._sender.start()

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._stopping)
                if self._stopping:
                    return
                record = self._next_pending()
                record.queued = False
                snapshot = copy.copy(record)
                self._in_flight += 1
            name, created = None, False
            try:
                name, created = self._send(snapshot)
            except Exception:  # noqa: BLE001 - the sender thread must outlive any bug
                log.exception("event %s %s: sending failed", snapshot.reason, _describe(snapshot))
            finally:
                with self._cond:
                    self._in_flight -= 1
                    if name is None:
                        self._stats.failed += 1
                    elif created:
                        self._stats.created += 1
                        record.name = name
                    else:
                        self._stats.patched += 1
                    self._cond.notify_all()

    def _send(self, record: _Record) -> tuple[str | None, bool]:
        """Create or patch one Event; returns (its name or None on failure, created)."""
        backoff = Backoff(SEND_BACKOFF_INITIAL, SEND_BACKOFF_CAP)
        for attempt in range(SEND_ATTEMPTS):
            try:
                if record.name is not None:
                    try:
                        self._patch(record)
                        return record.name, False
                    except errors.NotFound:
                        record.name = None  # expired on the server: create it again
                return self._create(record), True
            except _TRANSIENT as err:
                if attempt + 1 == SEND_ATTEMPTS or self._stop_wake.is_set():
                    log.warning("event %s %s: giving up: %s", record.reason,
                                _describe(record), err)
                    return None, False
                self._clock.wait(self._stop_wake, backoff.next_delay())
            except errors.ApiError as err:
                log.warning("event %s %s: rejected: %s", record.reason, _describe(record), err)
                return None, False
        return None, False

    def _create(self, record: _Record) -> str:
        name = f"{record.obj[_NAME][:200]}.{uuid.uuid4().hex[:16]}"
        kubeclient.request_json(self._api, "POST", f"/api/v1/namespaces/{record.namespace}/events",
                                body=_event_body(record, name), timeout=REQUEST_TIMEOUT)
        return name

    def _patch(self, record: _Record) -> None:
        patch = {"count": record.count, "lastTimestamp": _time(record.last),
                 "message": record.message}
        kubeclient.request_json(
            self._api, "PATCH", f"/api/v1/namespaces/{record.namespace}/events/{record.name}",
            body=patch, content_type="application/merge-patch+json", timeout=REQUEST_TIMEOUT)


def _as_list(waiting: _Record | list[_Record]) -> list[_Record]:
    """The records of one ``_pending`` entry, oldest first."""
    return waiting if type(waiting) is list else [waiting]


def _object_key(component: str, host: str, obj: Mapping[str, Any]) -> tuple[tuple, str]:
    """The object key (see ``_KIND``) of the involved object and its resourceVersion ("" if none)."""
    meta = obj.get("metadata") or {}
    key = (component, host, obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""),
           meta.get("uid", ""), obj.get("apiVersion", ""))
    if not key[_NAME] or not key[_KIND]:
        raise ValueError("an event needs an object with kind and metadata.name")
    return key, meta.get("resourceVersion") or ""


def _event_body(record: _Record, name: str) -> dict[str, Any]:
    """The ``core/v1`` Event to create for ``record``, named ``name``."""
    key = record.obj
    involved = {"kind": key[_KIND], "namespace": key[_NAMESPACE], "name": key[_NAME], "uid": key[_UID],
                "apiVersion": key[_API_VERSION]}
    if record.resource_version:
        involved["resourceVersion"] = record.resource_version
    component, host = key[0], key[1]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": record.namespace},
        "involvedObject": involved,
        "reason": record.reason,
        "message": record.message,
        "type": record.type,
        "source": {"component": component, **({"host": host} if host else {})},
        "firstTimestamp": _time(record.first),
        "lastTimestamp": _time(record.last),
        "count": record.count,
        "reportingComponent": component,
        "reportingInstance": host,
    }


def _describe(record: _Record) -> str:
    key = record.obj
    where = f"{key[_NAMESPACE]}/{key[_NAME]}" if key[_NAMESPACE] else key[_NAME]
    return f"on {key[_KIND]} {where}"


def _time(wall: float) -> str:
    """Kubernetes Time: RFC 3339 in UTC, whole seconds."""
    return datetime.fromtimestamp(wall, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
