"""The admission webhook inside ``platformd ingress``: its parts, started and stopped together.

``start`` builds the Ingress reviewer on the controller's own informers (two
indexes added to the shared Ingress store, see webhook_review), gets a
serving certificate (from the keeper's Secret, or made in memory when there
is no API server: ``--source`` runs and benchmarks), starts the HTTPS server
and, with an API server, the keeper's renewal loop. The server swaps
certificates the keeper hands it without a restart.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading

from platformd.common import errors
from platformd.ingress import webhook_certs as certs
from platformd.ingress.webhook_review import INDEXERS, IngressReviewer
from platformd.ingress.webhook_server import WebhookMetrics, WebhookServer, parse_address

__all__ = ["StartFailed", "Webhook", "start"]

log = logging.getLogger(__name__)


class StartFailed(Exception):
    """The webhook cannot serve: a bad flag, no certificate, a port in use."""


class Webhook:
    """The running parts (``server``, and ``keeper`` with an API server)."""

    def __init__(self, server: WebhookServer, keeper: certs.CertificateKeeper | None,
                 thread: threading.Thread | None) -> None:
        self.server = server
        self.keeper = keeper
        self._thread = thread

    def health(self) -> tuple[bool, str]:
        return self.server.health()

    def add_reviewers(self, reviewers) -> None:
        """Review more kinds from now on (the Gateway API routes, once their controller exists)."""
        self.server.add_reviewers(reviewers)

    def stop(self) -> None:
        self.server.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)


def start(args, api, controller, stop: threading.Event) -> Webhook:
    """Start the webhook of ``platformd ingress`` (flags in main._webhook_flags)."""
    try:
        host, port = parse_address(args.validating_webhook)
    except ValueError as exc:
        raise StartFailed(f"--validating-webhook: {exc}") from None
    controller.ingresses.add_indexers(INDEXERS)
    reviewer = IngressReviewer(controller.ingresses.store, controller.snapshot_of, controller.options.translate,
                               controller.informers_synced)
    reviewers = {("networking.k8s.io", "Ingress"): reviewer}
    keeper = None
    if api is None:
        certificate = _in_memory_certificate(args)
    else:
        keeper = certs.CertificateKeeper(api, _keeper_options(args))
        try:
            issued = keeper.sync()
        except errors.ApiError as exc:
            raise StartFailed(f"cannot get the serving certificate: {exc}") from None
        certificate = (issued.cert, issued.key)
    try:
        metrics = getattr(controller, "metrics", None)
        server = WebhookServer(host, port, reviewers, certificate,
                               metrics=WebhookMetrics(metrics.registry) if metrics is not None else None)
    except OSError as exc:
        raise StartFailed(f"cannot listen on {args.validating_webhook}: {exc.strerror or exc}") from None
    server.start()
    thread = None
    if keeper is not None:
        keeper.on_certificate = server.use_certificate
        thread = threading.Thread(target=keeper.run, args=(stop,), name="webhook-certificate", daemon=True)
        thread.start()
    log.info("admission webhook serving on %s", args.validating_webhook)
    return Webhook(server, keeper, thread)


def _keeper_options(args) -> certs.KeeperOptions:
    namespace = os.environ.get("POD_NAMESPACE") or "default"
    service = args.webhook_service or f"{namespace}/platform-ingress-webhook"
    secret = args.webhook_secret or f"{service.partition('/')[0]}/{service.partition('/')[2]}-certificate"
    return certs.KeeperOptions(secret=secret, service=service, configuration=args.webhook_configuration,
                               external=args.webhook_cert_manager)


def _in_memory_certificate(args) -> tuple[bytes, bytes]:
    """Without an API server there is nowhere to keep a certificate: one for
    this process only (clients trust its CA some other way, or not at all)."""
    namespace, _, name = (args.webhook_service or "default/platform-ingress-webhook").partition("/")
    names = (*certs.service_names(namespace, name), "localhost")
    issued = certs.issue(names, datetime.datetime.now(datetime.timezone.utc))
    return issued.cert, issued.key
