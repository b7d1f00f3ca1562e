"""Health-check node ports of ``externalTrafficPolicy: Local`` LoadBalancers.

A cloud load balancer probes ``http://NODE:healthCheckNodePort/`` to learn
which nodes have endpoints of the Service. As in kube-proxy, the answer is
200 when this node has at least one local endpoint and 503 otherwise, with
``{"service": {"namespace", "name"}, "localEndpoints": N,
"serviceProxyHealthy": bool}``.

:class:`HealthCheckServers` owns one listener per port; the proxier hands it
each Service's ``{port: local endpoints}`` after a sync (the only writer);
request threads read the counts under a lock.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

log = logging.getLogger(__name__)


class HealthCheckServers:
    def __init__(self, address: str = "", proxy_healthy: Callable[[], bool] = lambda: True) -> None:
        self._address = address
        self._proxy_healthy = proxy_healthy
        self._lock = threading.Lock()
        self._counts: dict[int, tuple[str, int]] = {}  # port -> (service, local endpoints)
        self._servers: dict[int, ThreadingHTTPServer] = {}

    def set(self, service: str, ports: dict[int, int]) -> None:
        """Make ``service``'s health-check ports exactly ``ports``."""
        with self._lock:
            for port, (owner, _n) in list(self._counts.items()):
                if owner == service and port not in ports:
                    del self._counts[port]
                    self._stop(port)
            for port, n in ports.items():
                self._counts[port] = (service, n)
                if port not in self._servers:
                    self._start(port)

    def _start(self, port: int) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                with owner._lock:
                    service, n = owner._counts.get(port, ("/", 0))
                namespace, _, name = service.partition("/")
                healthy = owner._proxy_healthy()
                body = json.dumps({"service": {"namespace": namespace, "name": name},
                                   "localEndpoints": n, "serviceProxyHealthy": healthy}).encode()
                self.send_response(200 if n > 0 and healthy else 503)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        try:
            server = ThreadingHTTPServer((self._address, port), Handler)
        except OSError as err:
            log.warning("cannot listen on health-check node port %d: %s", port, err)
            return
        server.daemon_threads = True
        self._servers[port] = server
        threading.Thread(target=server.serve_forever, name=f"healthcheck-{port}", daemon=True).start()

    def _stop(self, port: int) -> None:
        server = self._servers.pop(port, None)
        if server is not None:
            server.shutdown()
            server.server_close()

    def ports(self) -> dict[int, int]:
        with self._lock:
            return {p: n for p, (_s, n) in self._counts.items()}

    def close(self) -> None:
        with self._lock:
            for port in list(self._servers):
                self._stop(port)
