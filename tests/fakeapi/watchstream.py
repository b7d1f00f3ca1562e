"""One watch response: events from a `Watcher` written as a chunked stream.

Contract of `WatchStream.run()`:
- each event is one JSON line `{"type": ..., "object": ...}` in its own chunk;
- with bookmarks allowed, a BOOKMARK carrying a resourceVersion that covers
  every event already sent is written every `bookmark_interval` seconds of
  quiet (never while events are still queued, so it cannot skip any);
- the stream ends cleanly (final zero-length chunk) at `timeoutSeconds` or
  when the watcher is closed by `faults.drop_watches()`; it is cut without
  the final chunk when the drop is abrupt, the server stops, or the client
  went away;
- a stall (`faults.stall_watches`) holds back everything, including an event
  already taken from the queue when the stall began.
Returns True when the connection must be closed afterwards.
"""

from __future__ import annotations

import select
import socket
import ssl
import time
from typing import Callable

from .storage import WatchEvent, Watcher, to_json

# How often an idle stream wakes up to check for a gone client, a stall or a stop.
_POLL = 0.25
_STALL_STEP = 0.02


LAST_CHUNK = b"0\r\n\r\n"


def event_chunk(type_: str, obj: dict) -> bytes:
    """One watch event as one chunk of a chunked response."""
    return raw_event_chunk(type_, to_json(obj))


def raw_event_chunk(type_: str, obj_json: bytes) -> bytes:
    """`event_chunk` for an object already encoded (the same bytes `json.dumps` gives)."""
    data = b'{"type":' + to_json(type_) + b',"object":' + obj_json + b"}\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


class WatchStream:
    def __init__(self, api, watcher: Watcher, write: Callable[[bytes], None],
                 connection: socket.socket, timeout: float, bookmarks: bool,
                 convert: Callable[[str, dict], dict] | None = None):
        self._api = api
        self._watcher = watcher
        self._write = write
        self._connection = connection
        self._deadline = time.monotonic() + timeout
        self._bookmarks = bookmarks
        self._convert = convert          # e.g. objects to Tables for kubectl; None: as stored
        rt = watcher.resource
        self._bookmark_meta = {"kind": rt.kind, "apiVersion": rt.api_version}

    def emit(self, type_: str, obj: dict) -> None:
        self._write(self._chunk(WatchEvent(type_, obj)))

    def _chunk(self, event: WatchEvent) -> bytes:
        if self._convert is None:
            return raw_event_chunk(event.type, event.json())
        return event_chunk(event.type, self._convert(event.type, event.obj))

    def run(self) -> bool:
        abrupt, close = False, False
        try:
            abrupt, close = self._pump()
        except OSError:
            abrupt = True
        finally:
            self._api.storage.unwatch(self._watcher)
        return self._finish(abrupt) or close or abrupt

    def _pump(self) -> tuple[bool, bool]:
        """Deliver until the stream should end; returns (abrupt, close)."""
        api, watcher = self._api, self._watcher
        next_bookmark = time.monotonic() + api.bookmark_interval
        while True:
            now = time.monotonic()
            if api.stopping:
                return True, True
            if now >= self._deadline:
                return False, False
            if api.faults.stall_remaining() > 0:
                time.sleep(_STALL_STEP)
                continue
            if watcher.closed and not watcher.pending():
                return watcher.abrupt, True
            until = min(self._deadline, next_bookmark) if self._bookmarks else self._deadline
            # Several queued events go out in one write (each still its own chunk).
            events = watcher.next_events(min(max(until - now, 0), _POLL))
            if events:
                self._wait_out_stall()
                self._write(b"".join(map(self._chunk, events)))
                continue
            if self._client_gone():
                return True, True
            if self._bookmarks and time.monotonic() >= next_bookmark:
                rv = api.storage.bookmark_rv(watcher)
                if rv is not None:
                    self.emit("BOOKMARK", {**self._bookmark_meta,
                                           "metadata": {"resourceVersion": str(rv)}})
                next_bookmark = time.monotonic() + api.bookmark_interval

    def _wait_out_stall(self) -> None:
        while self._api.faults.stall_remaining() > 0 and not self._api.stopping:
            time.sleep(_STALL_STEP)

    def _finish(self, abrupt: bool) -> bool:
        """End the response; True when the connection is unusable afterwards."""
        try:
            if abrupt:
                self._connection.shutdown(socket.SHUT_RDWR)
                return True
            self._write(LAST_CHUNK)
            return False
        except OSError:
            return True

    def _client_gone(self) -> bool:
        """True when the client closed its end (readable, yet nothing to read).

        A watch client sends nothing while it reads the stream, so over TLS
        (where peeking is not possible) reading a byte is harmless."""
        conn = self._connection
        try:
            if isinstance(conn, ssl.SSLSocket):
                if not conn.pending() and not select.select([conn], [], [], 0)[0]:
                    return False
                conn.settimeout(0)
                try:
                    return conn.recv(1) == b""
                except (ssl.SSLWantReadError, BlockingIOError):
                    return False
                finally:
                    conn.settimeout(None)
            if not select.select([conn], [], [], 0)[0]:
                return False
            return conn.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True
