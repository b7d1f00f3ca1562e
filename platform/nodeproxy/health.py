"""``/healthz`` (kube-proxy's JSON), ``/status`` and ``/metrics`` over HTTP.

Health means "queued changes were applied recently", not "the process is
alive": :class:`ProxierHealth` is told when a change is queued and when a
sync applied everything, and is unhealthy once a queued change has waited
longer than ``timeout`` (twice the sync period). It is also unhealthy while
this node is being deleted or drained by the cluster autoscaler
(``nodeEligible: false``), so load balancers stop sending traffic here;
``/livez`` ignores node eligibility.
"""

from __future__ import annotations

import datetime as _dt
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from platformd.common.clock import REAL_CLOCK, Clock

TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"


def _rfc3339(wall: float | None) -> str:
    if wall is None:
        return "0001-01-01T00:00:00Z"  # Go's zero time, as kube-proxy prints it
    return _dt.datetime.fromtimestamp(wall, _dt.timezone.utc).isoformat().replace("+00:00", "Z")


def node_eligible(node: dict | None) -> bool:
    """False while the node is being deleted or the autoscaler is removing it."""
    if not node:
        return True
    if (node.get("metadata") or {}).get("deletionTimestamp"):
        return False
    taints = (node.get("spec") or {}).get("taints") or ()
    return not any(t.get("key") == TO_BE_DELETED_TAINT for t in taints)


class ProxierHealth:
    """Thread-safe record of queued and applied changes."""

    def __init__(self, timeout: float, clock: Clock = REAL_CLOCK) -> None:
        self._timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        # Starting up counts as a queued change: healthy until ``timeout``
        # without a first successful sync.
        self._oldest_queued: float | None = clock.monotonic()
        self._last_updated_wall: float | None = None
        self._eligible = True

    def queued(self) -> None:
        with self._lock:
            if self._oldest_queued is None:
                self._oldest_queued = self._clock.monotonic()

    def updated(self, since: float) -> None:
        """A sync that started at monotonic ``since`` succeeded: every change
        queued before it is applied."""
        with self._lock:
            if self._oldest_queued is not None and self._oldest_queued <= since:
                self._oldest_queued = None
            self._last_updated_wall = self._clock.wall()

    def set_node_eligible(self, eligible: bool) -> None:
        with self._lock:
            self._eligible = eligible

    def status(self) -> tuple[bool, dict]:
        """(healthy, kube-proxy's JSON body)."""
        with self._lock:
            now = self._clock.monotonic()
            fresh = self._oldest_queued is None or now - self._oldest_queued <= self._timeout
            body = {"lastUpdated": _rfc3339(self._last_updated_wall),
                    "currentTime": _rfc3339(self._clock.wall()),
                    "nodeEligible": self._eligible}
            return fresh and self._eligible, body

    def live(self) -> bool:
        with self._lock:
            return self._oldest_queued is None or self._clock.monotonic() - self._oldest_queued <= self._timeout


def _handler(health: ProxierHealth | None, registry, status) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            if health is not None and path in ("/healthz", "/livez"):
                healthy, body = health.status()
                if path == "/livez":
                    healthy = health.live()
                self._send(200 if healthy else 503, json.dumps(body).encode(), "application/json")
            elif status is not None and path == "/status":
                self._send(200, json.dumps(status()).encode(), "application/json")
            elif registry is not None and path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            else:
                self._send(404, b"404 page not found\n", "text/plain")

        def _send(self, status: int, body: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args) -> None:
            pass

    return Handler


class HTTPEndpoint:
    """One listener serving ``/healthz`` + ``/livez``, ``/status`` and/or ``/metrics``.

    ``status`` is a callable returning the ``/status`` JSON document
    (docs/architecture.md: ``last_sync_time``, ``last_sync_duration_seconds``,
    ``virtual_servers``, ``real_servers``).
    """

    def __init__(self, address: str, health: ProxierHealth | None = None, registry=None,
                 status: Callable[[], dict] | None = None) -> None:
        host, _, port = address.rpartition(":")
        self.server = ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)),
                                          _handler(health, registry, status))
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name=f"http-{address}", daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
