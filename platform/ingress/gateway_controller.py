"""The Gateway API loop: informers -> translation -> (data plane) -> status.

Runs beside the Ingress controller in the same process, on its own
``InformerFactory`` (same source), so a Gateway API informer that cannot
list (CRDs removed, RBAC missing) never holds up the Ingress sync. Services
and Secrets are read from the Ingress controller's informers, not watched
twice.

The Gateway API kinds are served only where their CRDs are installed:
``discover`` asks the API server once at start; without them the caller
logs one line and runs Ingresses only.

Handlers only mark work: any change to a Gateway API object, a Namespace, a
Service or a Secret asks the ``gateway-sync`` runner for a sync, which reads
the stores whole (``GatewaySnapshot``), translates (``gateway_translate``),
hands the table to ``serve`` (the data plane; True when it serves it) and
publishes the translation with one assignment. Until ``serve`` exists (the
Lua router is wired in a later step) or while it fails, Gateways report
``Programmed=False Pending`` -- accepted, not yet served. ``on_translated``
then wakes the status writer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from platformd.common import errors, kubeclient, resources
from platformd.common.clock import REAL_CLOCK, Clock
from platformd.common.informer import FuncHandler, Informer, InformerFactory
from platformd.common.runner import BoundedFrequencyRunner
from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_input import GatewayOptions, GatewaySnapshot
from platformd.ingress.gateway_model import GatewayTable
from platformd.ingress.gateway_translate import GatewayTranslation, build

__all__ = ["GatewayController", "discover"]

log = logging.getLogger(__name__)

NOT_SERVED = "the data plane does not serve Gateway API routes yet"


def _input(obj: dict) -> tuple:
    """What translation reads of an object: all but status and bookkeeping.
    Our own status writes change nothing else, so they trigger no sync."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("resourceVersion", "managedFields")}
    return meta, {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def discover(api_client) -> str | None:
    """None when every Gateway API kind we watch is served; else why not (one line)."""
    wanted: dict[str, set[str]] = {}
    for resource in resources.GATEWAY_API:
        wanted.setdefault(resource.version, set()).add(resource.plural)
    for version, plurals in sorted(wanted.items()):
        path = f"/apis/{resources.GATEWAY_API_GROUP}/{version}"
        try:
            doc = kubeclient.request_json(api_client, "GET", path, timeout=10.0)
        except errors.NotFound:
            return f"{resources.GATEWAY_API_GROUP}/{version} is not served"
        served = {r.get("name") for r in doc.get("resources") or ()}
        missing = sorted(plurals - served)
        if missing:
            return f"{resources.GATEWAY_API_GROUP}/{version} does not serve {', '.join(missing)}"
    return None


class GatewayController:
    """See the module docstring.

    ``publish_addresses()`` gives the addresses Gateways report without a
    pool (what the Ingress status shows). ``serve(table)`` (None: nothing
    serves the table yet) returns whether the data plane now serves it.
    """

    def __init__(self, factory: InformerFactory, options: GatewayOptions, *, services: Informer,
                 secrets: Informer, publish_addresses: Callable[[], tuple[str, ...]] = tuple,
                 serve: Callable[[GatewayTable], bool] | None = None,
                 on_translated: Callable[[GatewayTranslation], None] | None = None,
                 min_sync_interval: float = 1.0, resync_interval: float = 300.0, retry_interval: float = 5.0,
                 clock: Clock = REAL_CLOCK, wall_clock: Callable[[], float] = time.time) -> None:
        self.factory = factory
        self.options = options
        self._publish_addresses = publish_addresses
        self._serve = serve
        self.on_translated = on_translated  # set before run(); called after every sync
        self._wall_clock = wall_clock
        self.informers = {resource: factory.informer(resource)
                          for resource in (*resources.GATEWAY_API, resources.NAMESPACES)}
        self.services = services
        self.secrets = secrets
        self._runner = BoundedFrequencyRunner("gateway-sync", self.sync, min_sync_interval, resync_interval,
                                              retry_interval, clock)
        self._translation: GatewayTranslation | None = None  # replaced whole, never changed
        mark = lambda *_: self._runner.run()  # noqa: E731 - handlers only mark work
        for informer in self.informers.values():
            informer.add_handler(FuncHandler(
                add=mark, delete=mark, update=lambda old, new: _input(old) != _input(new) and mark()))
        for informer in (services, secrets):
            informer.add_handler(FuncHandler(add=mark, update=mark, delete=mark))

    @property
    def translation(self) -> GatewayTranslation | None:
        """The latest translation, with the status it should show (read-only)."""
        return self._translation

    def has_synced(self) -> bool:
        return self.factory.has_synced() and self.services.has_synced() and self.secrets.has_synced()

    def keys(self, resource: resources.Resource) -> list[str]:
        return self.informers[resource].store.keys()

    def get(self, resource: resources.Resource, key: str) -> dict | None:
        return self.informers[resource].store.get(key)

    def run(self, stop: threading.Event) -> None:
        """Start the informers, wait for their first lists, then sync until ``stop``."""
        self.factory.start()
        try:
            while not self.has_synced():
                if stop.wait(0.1):
                    return
            self._runner.run()
            self._runner.loop(stop)
        finally:
            self.factory.stop()

    def summary(self) -> dict:
        """What ``/status`` and ``platformctl status`` show: counts of our
        Gateways and routes, and each one not accepted with its reason."""
        translation = self._translation
        health = self._runner.health()
        if translation is None:
            return {"synced": False, "last_error": health.last_error}
        not_accepted = []
        groups = (("GatewayClass", translation.classes, lambda s: s.conditions),
                  ("Gateway", translation.gateways, lambda s: s.conditions),
                  ("HTTPRoute", translation.http_routes, lambda s: [c for p in s.parents for c in p.conditions]),
                  ("GRPCRoute", translation.grpc_routes, lambda s: [c for p in s.parents for c in p.conditions]))
        for kind, statuses, conditions in groups:
            for key, status in sorted(statuses.items()):
                bad = next((c for c in conditions(status) if c.type == st.ACCEPTED and not c.status), None)
                if bad is not None:
                    not_accepted.append(f"{kind} {key}: {bad.reason}: {bad.message}")
        # A failing Gateway sync shows here, not in /healthz: it must not get
        # the pod restarted while it serves Ingresses.
        return {"synced": True, "gateways": len(translation.gateways), "http_routes": len(translation.http_routes),
                "grpc_routes": len(translation.grpc_routes), "not_accepted": not_accepted,
                "last_error": health.last_error}

    def snapshot(self) -> GatewaySnapshot:
        def objects(resource):
            return tuple(self.informers[resource].store.list())
        return GatewaySnapshot(
            gateway_classes=objects(resources.GATEWAY_CLASSES), gateways=objects(resources.GATEWAYS),
            http_routes=objects(resources.HTTP_ROUTES), grpc_routes=objects(resources.GRPC_ROUTES),
            reference_grants=objects(resources.REFERENCE_GRANTS),
            services={k: self.services.store.get(k) for k in self.services.store.keys()},
            secrets={k: self.secrets.store.get(k) for k in self.secrets.store.keys()},
            namespaces={k: self.informers[resources.NAMESPACES].store.get(k)
                        for k in self.informers[resources.NAMESPACES].store.keys()})

    def sync(self) -> None:
        """Snapshot -> translate -> serve -> publish (see the module docstring)."""
        options = replace(self.options, publish_addresses=tuple(self._publish_addresses()))
        translation = build(self.snapshot(), options, self._wall_clock())
        served = self._serve(translation.table) if self._serve is not None else False
        if not served:
            translation = replace(translation, gateways={
                k: st.not_programmed(s, NOT_SERVED) for k, s in translation.gateways.items()})
        self._translation = translation
        if self.on_translated is not None:
            self.on_translated(translation)
