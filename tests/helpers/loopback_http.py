"""An http.server handler served on 127.0.0.1 by a daemon thread: what the
test backends and stand-ins share.

The server listens on a free port (chosen by the kernel) before the
constructor returns, so a client may connect at once; ``owner`` is reachable
from the handler as ``self.server.backend``. ``stop`` shuts the loop down and
closes the listening socket (connections still open stay with their handler
threads, which are daemons).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from platformd.ingress.model import Endpoint


class LoopbackHttp:
    def __init__(self, handler: type[BaseHTTPRequestHandler], *, owner: Any = None, name: str | None = None,
                 server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer) -> None:
        self.server = server_class(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.server.backend = owner  # type: ignore[attr-defined]
        self.address, self.port = self.server.server_address[:2]
        self._thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.address, self.port)

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
