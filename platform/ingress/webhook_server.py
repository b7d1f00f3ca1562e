"""The admission webhook's HTTPS server, in its own threads of the controller process.

``WebhookServer`` listens on ``--validating-webhook`` and answers:

* ``POST /validate``: an ``AdmissionReview`` (webhook_admission) handed to the
  reviewer registered for the object's group and kind (``reviewers``: Ingresses,
  and HTTPRoutes and GRPCRoutes when the Gateway API is served). A kind without a reviewer is
  allowed (the configuration should not send it). A malformed review with a
  usable uid gets a denial with status 400 saying what is wrong; without one,
  HTTP 400 with the same text. A reviewer that raises is answered with HTTP
  500, and so left to the configuration's ``failurePolicy``.
* ``GET /healthz``: 200 when the server has a certificate that is currently
  valid and its accept thread runs; 500 with the reason otherwise. The same
  check is ``health()`` for the controller's own ``/healthz``.

Bounds, so a client cannot make us hold more than a few bodies: a body must
say its length (411 otherwise) and be at most ``MAX_BODY`` (413, not read);
a connection that sends nothing for ``IDLE_TIMEOUT`` is closed; at most
``MAX_CONNECTIONS`` connections are served at once (more are closed at
accept). TLS 1.2 at least. The TLS handshake runs in the connection's own
thread, so a slow client never holds up ``accept``.

Metrics (``WebhookMetrics``, on the controller's registry): reviews by kind
and result (``allowed``, ``denied``, ``malformed``, ``unreviewed``, ``error``) and how long
answering took, ingress-nginx's metric prefix.

Certificates change while serving (``use_certificate``): the new context is
made whole and swapped in with one assignment; connections already open keep
theirs.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Histogram

from platformd.ingress import webhook_admission as admission
from platformd.ingress.webhook_review import Reviewer

__all__ = ["WebhookMetrics", "WebhookServer", "parse_address", "REVIEW_PATH"]

log = logging.getLogger(__name__)

REVIEW_PATH = "/validate"
#: A connection idle this long is closed. The API server's own call
#: timeout is at most 30 s and it keeps connections alive between calls.
IDLE_TIMEOUT = 30.0
#: Connections served at once; each is a thread. The API server opens a
#: few per replica; 64 leaves room for several API servers without letting
#: a flood of connections grow threads without bound.
MAX_CONNECTIONS = 64


class WebhookMetrics:
    # Reviews take a millisecond or less; the tail (a full GC of the
    # controller's heap, a big neighbourhood) is what the buckets are for.
    _BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)

    def __init__(self, registry: CollectorRegistry) -> None:
        prefix = "nginx_ingress_controller_admission_"
        self.reviews = Counter(prefix + "reviews", "Admission reviews answered, by kind and result",
                               ["kind", "result"], registry=registry)
        self.duration = Histogram(prefix + "review_duration_seconds", "Time to answer one admission review",
                                  buckets=self._BUCKETS, registry=registry)

    def observe(self, kind: str, result: str, seconds: float) -> None:
        self.reviews.labels(kind=kind, result=result).inc()
        self.duration.observe(seconds)


def parse_address(text: str) -> tuple[str, int]:
    """``":8443"``, ``"0.0.0.0:8443"`` or ``"[::]:8443"`` → (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected [host]:port, got {text!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host, int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: "WebhookServer"

    def __init__(self, address: tuple[str, int], owner: "WebhookServer") -> None:
        self.owner = owner
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def verify_request(self, request, client_address) -> bool:
        if not self.owner._slots.acquire(blocking=False):
            log.warning("webhook: %d connections open; closing one from %s", MAX_CONNECTIONS, client_address[0])
            return False
        return True

    def process_request_thread(self, request, client_address) -> None:
        try:
            # An answer is written as headers then body: with Nagle's algorithm
            # the body waits for the client's delayed ACK of the headers, 40 ms
            # on Linux (measured: every review took 43 ms instead of 0.5 ms).
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tls = self.owner._context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
            tls.settimeout(IDLE_TIMEOUT)
            tls.do_handshake()
        except (OSError, ssl.SSLError) as exc:
            log.debug("webhook: TLS handshake with %s failed: %s", client_address[0], exc)
            self.shutdown_request(request)
            self.owner._slots.release()
            return
        try:
            super().process_request_thread(tls, client_address)
        finally:
            self.owner._slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses connections
    timeout = IDLE_TIMEOUT

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        log.debug("webhook %s: " + format, self.client_address[0], *args)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.split("?", 1)[0] != "/healthz":
            self._send(404, "text/plain", b"not found\n")
            return
        ok, reason = self.server.owner.health()
        self._send(200 if ok else 500, "text/plain", (reason + "\n").encode())

    def do_POST(self) -> None:  # noqa: N802
        if self.path.split("?", 1)[0] != REVIEW_PATH:
            self._send(404, "text/plain", b"not found\n")
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._send(411, "text/plain", b"Content-Length is required\n", close=True)
            return
        if int(length) > admission.MAX_BODY:
            self._send(413, "text/plain", f"body of {length} bytes is over {admission.MAX_BODY}\n".encode(),
                       close=True)
            return
        content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            self._send(415, "text/plain", b"Content-Type must be application/json\n", close=True)
            return
        body = self.rfile.read(int(length))
        status, answer = self.server.owner.answer(body)
        self._send(status, "application/json" if status == 200 else "text/plain", answer)

    def _send(self, status: int, content_type: str, body: bytes, close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)


class WebhookServer:
    """Serves admission reviews over HTTPS (see module docstring).

    ``reviewers`` maps ``(group, kind)`` to the ``Reviewer`` of that kind.
    ``certificate`` is ``(cert_pem, key_pem)``: the serving chain and key;
    ``use_certificate`` replaces it. ``clock`` gives wall time for the
    certificate's validity in ``health``; ``metrics`` (optional) counts
    and times the reviews.
    """

    def __init__(self, host: str, port: int, reviewers: Mapping[tuple[str, str], Reviewer],
                 certificate: tuple[bytes, bytes], *, clock: Callable[[], float] = time.time,
                 metrics: WebhookMetrics | None = None) -> None:
        self._reviewers = dict(reviewers)
        self._clock = clock
        self._metrics = metrics
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._context: ssl.SSLContext
        self._not_after = 0.0
        self.use_certificate(*certificate)
        self._httpd = _Server((host, port), self)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def use_certificate(self, cert_pem: bytes, key_pem: bytes) -> None:
        """Serve new handshakes with this chain and key (checked first: a bad pair raises, the old one stays)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # load_cert_chain reads files only; the files live for this call alone.
        with tempfile.TemporaryDirectory(prefix="platform-webhook-") as tmp:
            cert_file, key_file = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
            for path, data in ((cert_file, cert_pem), (key_file, key_pem)):
                with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                    f.write(data)
            context.load_cert_chain(cert_file, key_file)
        from cryptography import x509
        not_after = x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc.timestamp()
        self._context, self._not_after = context, not_after

    def add_reviewers(self, reviewers: Mapping[tuple[str, str], Reviewer]) -> None:
        """Register more reviewers; a new dict is swapped in, so answers in flight see one whole set."""
        self._reviewers = {**self._reviewers, **reviewers}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="admission-webhook", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def health(self) -> tuple[bool, str]:
        if self._thread is None or not self._thread.is_alive():
            return False, "admission webhook: server thread is not running"
        if self._clock() >= self._not_after:
            return False, "admission webhook: serving certificate has expired"
        return True, "ok"

    def answer(self, body: bytes) -> tuple[int, bytes]:
        """(HTTP status, body) for one review request body."""
        start = time.perf_counter()
        kind, result, answer = self._answer(body)
        if self._metrics is not None:
            self._metrics.observe(kind, result, time.perf_counter() - start)
        return answer

    def _answer(self, body: bytes) -> tuple[str, str, tuple[int, bytes]]:
        """(kind, result, (HTTP status, body)) for one review request body."""
        try:
            request = admission.parse_review(body)
        except admission.MalformedReview as exc:
            if exc.uid is None:
                return "", "malformed", (400, f"malformed AdmissionReview: {exc}\n".encode())
            verdict = admission.Verdict(errors=(f"malformed AdmissionReview: {exc}",))
            return "", "malformed", (200, admission.response_body(exc.uid, verdict))
        reviewer = self._reviewers.get((request.group, request.kind))
        if reviewer is None:
            verdict = admission.Verdict(warnings=(
                f"platform's admission webhook does not review {request.kind or 'this kind'} "
                f"({request.group or 'core'}); allowed unchecked",))
            # "other": a label per unknown kind would let any client grow the metric without bound.
            return "other", "unreviewed", (200, admission.response_body(request.uid, verdict))
        if request.version != "v1":
            verdict = admission.Verdict(errors=(
                f"{request.kind} {request.group}/{request.version} is not reviewed; the webhook "
                "configuration must use matchPolicy Equivalent so the API server sends v1",))
            return request.kind, "malformed", (200, admission.response_body(request.uid, verdict))
        try:
            verdict = reviewer.review(request)
        except Exception:  # noqa: BLE001 - one bad review must not stop the server
            log.exception("webhook: reviewing %s %s/%s failed", request.kind, request.namespace, request.name)
            return request.kind, "error", (500, json.dumps(
                {"error": "internal error while reviewing; see the controller log"}).encode())
        return (request.kind, "allowed" if verdict.allowed else "denied",
                (200, admission.response_body(request.uid, verdict)))
