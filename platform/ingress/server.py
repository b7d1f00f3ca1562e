"""The controller's internal HTTP server: ``/healthz``, ``/readyz``, ``/status``, ``/metrics``.

Contract (docs/architecture.md, "component endpoints"):

* ``/healthz``: 200 when the nginx master runs and answers on its internal socket, the informers
  have synced (or are still doing their first list), and requested syncs get
  applied; 500 naming the first failing check otherwise. The nginx check is
  a real request to nginx's own ``/healthz`` on the unix socket, so a master
  that is up but cannot serve still fails it.
* ``/readyz``: 200 once the informers synced and the first sync was applied.
* ``/status``: JSON with ``informers_synced``, ``last_sync_time`` (unix
  seconds), ``config_checksum``, ``reload_count``, ``last_reload_result``
  ("ok"/"failed: …"), ``ingresses``, ``backends``, ``endpoints``, and
  ``problems``: every object refused right now (``kind``, ``namespace``,
  ``name``, ``reason``, ``message``; at most ``MAX_PROBLEMS`` of them, the
  full count in ``problems_total``).
* ``/metrics``: the Prometheus registry of the process.

The server only reads from the objects it is given; every request is served
from its own thread and never blocks the sync loop.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["InternalServer", "nginx_check", "nginx_master_check"]

log = logging.getLogger(__name__)

Check = Callable[[], tuple[bool, str]]
MAX_PROBLEMS = 500  # /status stays small enough to read; the metric counts them all


def nginx_check(socket_path: Path, timeout: float = 2.0) -> Check:
    """A check asking nginx's internal server for ``/healthz`` over the unix socket."""
    def check() -> tuple[bool, str]:
        try:
            with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket_path)), timeout=timeout) as client:
                response = client.get("http://nginx/healthz")
        except httpx.HTTPError as exc:
            return False, f"nginx is not answering on {socket_path}: {type(exc).__name__}"
        if response.status_code != 200:
            return False, f"nginx /healthz answered {response.status_code}"
        return True, "ok"
    return check


def nginx_master_check(nginx) -> Check:
    """A check that the nginx master is running (orphaned workers of a dead
    master still answer on the socket, so ``nginx_check`` alone would pass)."""
    def check() -> tuple[bool, str]:
        if nginx.master_pid() is None:
            return False, "the nginx master is not running"
        return True, "ok"
    return check


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        owner = self.server.owner
        try:
            if path in ("/healthz", "/healthz/"):
                ok, reason = owner.health()
                self._send(200 if ok else 500, "text/plain", (reason + "\n").encode())
            elif path == "/readyz":
                ready = owner.ready()
                reason = owner.controller.not_applied() or "not ready"
                self._send(200 if ready else 503, "text/plain", b"ok\n" if ready else (reason + "\n").encode())
            elif path == "/status":
                doc = {**owner.status(), **{key: part() for key, part in owner.extra_status.items()}}
                self._send(200, "application/json", json.dumps(doc, sort_keys=True).encode())
            elif path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(owner.registry))
            else:
                self._send(404, "text/plain", b"not found\n")
        except Exception:  # noqa: BLE001 - a bug in a check must not kill the server thread
            log.exception("internal server: %s failed", path)
            self._send(500, "text/plain", b"internal error\n")

    def _send(self, code: int, content_type: str, body: bytes) -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the prober gave up waiting (a long sync holds the interpreter); nothing to tell it

    def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: quiet
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: "InternalServer"


class InternalServer:
    """Serves the endpoints above for ``controller`` on ``host:port`` (port 0: any)."""

    def __init__(self, host: str, port: int, controller, registry: CollectorRegistry,
                 checks: tuple[Check, ...] = ()) -> None:
        self.controller = controller
        self.registry = registry
        self.checks = checks
        self.extra_status: dict[str, Callable[[], dict]] = {}  # more /status keys (e.g. "gateway_api")
        self._server = _Server((host, port), _Handler)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self._thread: threading.Thread | None = None

    def health(self) -> tuple[bool, str]:
        for check in self.checks:
            ok, reason = check()
            if not ok:
                return False, reason
        for resource, health in self.controller.factory.health().items():
            if health.synced and not health.watching and health.last_success is None:
                return False, f"informer {resource} has never listed successfully"
        return self.controller.healthy()

    def ready(self) -> bool:
        return self.controller.ready()

    def status(self) -> dict:
        state = self.controller.state
        return {
            "informers_synced": self.controller.informers_synced(),
            "last_sync_time": state.last_sync_time,
            "last_sync_duration_seconds": state.last_sync_duration,
            "config_checksum": state.checksum(),
            "reload_count": state.reload_count,
            "last_reload_result": state.last_result,
            "config_not_applied_since": state.failing_since,
            "config_not_applied": self.controller.not_applied(),
            "ingresses": state.ingresses,
            "backends": state.backends,
            "endpoints": state.endpoints,
            **self._problems(),
        }

    def _problems(self) -> dict:
        problems = self.controller.problems()
        return {"problems_total": len(problems),
                "problems": [{"kind": p.kind, "namespace": p.namespace, "name": p.name, "reason": p.reason,
                              "message": p.message} for p in problems[:MAX_PROBLEMS]]}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="ingress-internal-server",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
