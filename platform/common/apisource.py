"""List and watch the real API server, as raw JSON.

``ApiSource`` implements the reflector's ``Source`` on top of
``kubeclient.request`` (the ``kubernetes`` client's configuration, auth and
urllib3 pool; our own requests). Objects are whatever ``json.loads`` makes of
the bytes: plain dicts, shared with nobody, cheap to build and to keep.

Strings in them are interned (``sys.intern``), because informers keep every
object for the life of the process. ``json.loads`` makes a new string for
every value, and shares keys only within one document: a list page shares
its keys, but each watch event has its own. At 50,000 small objects that is
117 MB as decoded from list pages, about 155 MB once every object has come
by watch, and 100 MB interned (namespaces, kinds, label and condition keys,
"TCP" held once). Interning costs about 4 µs per object on a list page (in
place) and 20 µs per watch event (rebuilt, for the keys).

The reflector docstring explains why we do not use ``kubernetes.watch.Watch``.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterable, Iterator

import urllib3

from platformd.common import errors, gcpause, interning, kubeclient
from platformd.common.reflector import ListPage, WatchEvent
from platformd.common.resources import Resource

# Bytes asked for per read of a watch stream. read1 returns as soon as any
# data is there, so this bounds memory per read, not latency.
_READ_SIZE = 256 * 1024
# Beyond the watch's own timeoutSeconds, how long a silent connection may
# stay open before we call it dead: the server ends the watch itself at
# timeoutSeconds, so silence well past that means a half-open connection.
_WATCH_READ_SLACK = 30.0

_JSON = json.JSONDecoder()

_TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError)


class ApiSource:
    """The API server as a reflector ``Source``. Thread-safe (one pool, no state)."""

    def __init__(self, api_client: kubeclient.Client) -> None:
        self.api_client = api_client

    def list(self, resource: Resource, namespace: str | None, *,
             limit: int, continue_token: str = "", resource_version: str = "") -> ListPage:
        query = [("limit", str(limit))] if limit else []
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if continue_token:
            query.append(("continue", continue_token))
        if resource.field_selector:
            query.append(("fieldSelector", resource.field_selector))
        path = resource.path(namespace)
        response = kubeclient.request(self.api_client, "GET", path, query=query)
        try:
            body = response.read()
        except _TRANSPORT_ERRORS as exc:
            raise errors.ApiUnreachable(f"GET {path}: {kubeclient.describe_transport_error(exc)}") from exc
        finally:
            response.release_conn()
        return parse_list(body, resource, path)

    def watch(self, resource: Resource, namespace: str | None, *,
              resource_version: str, timeout_seconds: int) -> _WatchStream:
        query = [("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(timeout_seconds))]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if resource.field_selector:
            query.append(("fieldSelector", resource.field_selector))
        path = resource.path(namespace)
        timeout = urllib3.Timeout(connect=kubeclient.DEFAULT_TIMEOUT.connect_timeout,
                                  read=timeout_seconds + _WATCH_READ_SLACK)
        response = kubeclient.request(self.api_client, "GET", path, query=query, timeout=timeout)
        return _WatchStream(response, path)


# Interning: see the module docstring and common.interning.
_interned = interning.interned


def parse_list(body: bytes, resource: Resource, path: str = "") -> ListPage:
    """One list response (raw bytes) as a ``ListPage`` of plain dicts.

    List items come without ``kind``/``apiVersion`` (watched objects have
    them); they are filled in so every object looks the same to handlers.
    Strings are interned (see the module docstring).
    """
    try:
        # A page of 500 EndpointSlices is some 60,000 new dicts and lists; with
        # the collector on, its passes over the growing cache measured 3-4x the
        # cost of the parse itself.
        with gcpause.paused:
            decoded = interning.loads(body)
    except ValueError as exc:
        raise errors.InvalidResponse(f"GET {path}: answer is not JSON ({exc})") from None
    items = decoded.get("items") if isinstance(decoded, dict) else None
    if items is None:
        items = []
    if not isinstance(items, list):
        raise errors.InvalidResponse(f"GET {path}: list without an items array")
    kind, api_version = resource.kind, resource.api_version
    for item in items:
        item["kind"] = kind
        item["apiVersion"] = api_version
    meta = decoded.get("metadata") or {}
    return ListPage(items, meta.get("resourceVersion", ""), meta.get("continue") or "")


def decode_watch(chunks: Iterable[bytes], path: str = "") -> Iterator[WatchEvent]:
    """Watch events from the chunks of a newline-delimited JSON stream.

    Chunks may split or join lines anywhere. An ERROR event is raised as the
    matching ``errors.ApiStatusError`` (410 → ``ResourceExpired``). Objects'
    keys and strings are interned (see the module docstring).
    """
    pending: list[bytes] = []  # parts of an unfinished line (a list: big objects come in many chunks)
    decode = _JSON.decode  # on str: skips json.loads' per-call encoding detection
    for chunk in chunks:
        end = chunk.rfind(b"\n")
        if end < 0:
            pending.append(chunk)
            continue
        # Split at the last newline before decoding: a newline byte never
        # occurs inside a multi-byte UTF-8 sequence, so the text is whole.
        complete = chunk[:end]
        if pending:
            pending.append(complete)
            complete = b"".join(pending)
        pending = [chunk[end + 1:]]
        try:
            text = complete.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise errors.InvalidResponse(f"watch {path}: not UTF-8 ({exc})") from None
        for line in text.split("\n"):
            if not line or line.isspace():
                continue
            try:
                raw = decode(line)
                kind = raw["type"]
                obj = raw["object"]
            except (ValueError, KeyError, TypeError) as exc:
                raise errors.InvalidResponse(f"watch {path}: undecodable event ({exc})") from None
            if kind == "ERROR":
                raise errors.from_status(int(obj.get("code") or 500), obj)
            yield WatchEvent(kind, _interned(obj))


class _WatchStream:
    """Newline-delimited JSON watch events from one HTTP response.

    ERROR events become exceptions (410 → ``errors.ResourceExpired``), so the
    reflector handles them like the same status on a plain request.
    """

    def __init__(self, response: urllib3.BaseHTTPResponse, path: str) -> None:
        self._response = response
        self._path = path
        self._closed = threading.Event()
        self._close_lock = threading.Lock()

    def __iter__(self) -> Iterator[WatchEvent]:
        try:
            yield from decode_watch(self._chunks(), self._path)
        finally:
            self.close()

    def _chunks(self) -> Iterator[bytes]:
        while not self._closed.is_set():
            chunk = self._read()
            if not chunk:
                return
            yield chunk

    def _read(self) -> bytes:
        try:
            return self._response.read1(_READ_SIZE)
        except Exception as exc:
            # Broad on purpose: when a connection is cut mid-chunk (or shut
            # down by close() from another thread) http.client raises
            # ValueError or AttributeError from its chunk parser, not only
            # transport errors. Any failure here means "the stream is gone".
            if self._closed.is_set():
                return b""
            raise errors.ApiUnreachable(
                f"watch {self._path}: {kubeclient.describe_transport_error(exc)}") from exc

    def close(self) -> None:
        """End the watch; safe to call from any thread and more than once."""
        with self._close_lock:
            if self._closed.is_set():
                return
            self._closed.set()
        # shutdown() (urllib3 >= 2.3) wakes a read blocked in another thread;
        # close() alone would not. The connection is not reused (mid-body).
        try:
            self._response.shutdown()
        except (AttributeError, ValueError, RuntimeError, OSError):
            pass
        try:
            self._response.close()
        except _TRANSPORT_ERRORS:
            pass

