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
Service or a Secret (or an EndpointSlice of a Service the table uses) asks
the ``gateway-sync`` runner for a sync, which reads the stores whole
(``GatewaySnapshot``), translates (``gateway_translate``), lowers the table
onto the data plane model (``gateway_lowering``), publishes it to the
``GatewayPlane`` the Ingress controller submits through and asks that
controller for a sync. Status follows what is served: a Gateway is
``Programmed=True`` once a configuration holding its version of the table
was applied (``applied``) and none of its hosts was left out; until then
(or without a data plane: ``serving`` None) ``Programmed=False Pending``
with the reason. Each change of that publishes a new translation with one
assignment and wakes the status writer (``on_translated``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from platformd.common import errors, kubeclient, resources
from platformd.common.clock import REAL_CLOCK, Clock
from platformd.common.informer import FuncHandler, Informer, InformerFactory
from platformd.common.runner import BoundedFrequencyRunner
from platformd.common.store import index_endpointslice_by_service
from platformd.ingress import gateway_hostnames as hostnames
from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_dataplane import GatewayPlane
from platformd.ingress.gateway_lowering import Lowered, LoweringCache, lower
from platformd.ingress.gateway_input import GatewayOptions, GatewaySnapshot
from platformd.ingress.gateway_model import GatewayTable
from platformd.ingress.gateway_translate import GatewayTranslation, RouteCache, build

__all__ = ["GatewayController", "discover"]

log = logging.getLogger(__name__)

NOT_SERVED = "the data plane does not serve Gateway API routes yet"
# The Ingress controller indexes EndpointSlices by Service under this name with
# the same function; adding it again is a no-op (store.add_indexers).
_BY_SERVICE = "service"


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


@dataclass(frozen=True)
class Serving:
    """How the table reaches the data plane: ``plane`` (the ``GatewayPlane``
    the Ingress controller submits through), ``trigger()`` (asks that
    controller for a full sync) and ``slices`` (its EndpointSlice informer,
    indexed by Service)."""

    plane: GatewayPlane
    trigger: Callable[[], None]
    slices: Informer


def _services_of(table: GatewayTable) -> frozenset[str]:
    found = set()
    for host in table.hosts:
        for entry in host.entries:
            found.update(b.service for b in entry.action.backends if b.service)
            found.update(m.service for m in entry.action.mirrors)
    return frozenset(found)


class GatewayController:
    """See the module docstring.

    ``publish_addresses()`` gives the addresses Gateways report without a
    pool (what the Ingress status shows). ``min_sync_interval`` (10 ms, as the
    Ingress route syncs of the reload-free router): changes arriving within it
    are one sync; with it at 1 s a route change took 1.0 s (p50) to serve, the
    wait being the interval. ``resync_interval``: a full sync at least every
    5 minutes repairs anything missed.
    """

    def __init__(self, factory: InformerFactory, options: GatewayOptions, *, services: Informer,
                 secrets: Informer, publish_addresses: Callable[[], tuple[str, ...]] = tuple,
                 serving: Serving | None = None,
                 on_translated: Callable[[GatewayTranslation], None] | None = None,
                 min_sync_interval: float = 0.01, resync_interval: float = 300.0, retry_interval: float = 5.0,
                 clock: Clock = REAL_CLOCK, wall_clock: Callable[[], float] = time.time) -> None:
        self.factory = factory
        self.options = options
        self._publish_addresses = publish_addresses
        self._serving = serving
        self.on_translated = on_translated  # set before run(); called after every sync
        self._wall_clock = wall_clock
        self.informers = {resource: factory.informer(resource)
                          for resource in (*resources.GATEWAY_API, resources.NAMESPACES)}
        self.services = services
        self.secrets = secrets
        self._runner = BoundedFrequencyRunner("gateway-sync", self.sync, min_sync_interval, resync_interval,
                                              retry_interval, clock)
        self._translation: GatewayTranslation | None = None  # replaced whole, never changed
        self._lock = threading.Lock()  # guards the next three and the publishing of a translation
        self._built: tuple[GatewayTranslation, Lowered | None, int] | None = None  # last build, its version
        self._version = 0  # of the last table published to the data plane
        self._applied = 0  # newest version a successful apply carried
        self._used_services: frozenset[str] = frozenset()
        self._servers = LoweringCache()  # the last lowering's Servers, reused for unchanged hosts
        self._routes = RouteCache()  # the translation of unchanged routes, reused
        self._caches_lock = threading.Lock()  # held while building with _routes and _servers
        mark = lambda *_: self._runner.run()  # noqa: E731 - handlers only mark work
        for informer in self.informers.values():
            informer.add_handler(FuncHandler(
                add=mark, delete=mark, update=lambda old, new: _input(old) != _input(new) and mark()))
        for informer in (services, secrets):
            informer.add_handler(FuncHandler(add=mark, update=mark, delete=mark))
        if serving is not None:
            serving.plane.on_applied = self.applied
            serving.slices.add_indexers({_BY_SERVICE: index_endpointslice_by_service})
            mark_slice = lambda obj: (self._uses_slice(obj) and mark())  # noqa: E731
            serving.slices.add_handler(FuncHandler(add=mark_slice, update=lambda old, new: mark_slice(new),
                                                   delete=lambda obj: mark_slice(getattr(obj, "obj", obj))))

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
        built = self._built
        lowered = built[1] if built is not None else None
        not_served = [f"{s.hostname}: {s.reason}" for s in lowered.skipped] if lowered is not None else []
        return {"synced": True, "gateways": len(translation.gateways), "http_routes": len(translation.http_routes),
                "grpc_routes": len(translation.grpc_routes), "not_accepted": not_accepted,
                "not_served": not_served, "last_error": health.last_error}

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

    def _uses_slice(self, obj) -> bool:
        return any(key in self._used_services for key in index_endpointslice_by_service(obj))

    def sync(self) -> None:
        """Snapshot -> translate -> lower -> publish (see the module docstring)."""
        options = replace(self.options, publish_addresses=tuple(self._publish_addresses()))
        snapshot, now = self.snapshot(), self._wall_clock()
        with self._caches_lock:  # the caches serve one build at a time (tests call sync beside the runner)
            translation = build(snapshot, options, now, cache=self._routes)
            lowered = None
            if self._serving is not None:
                slices = self._serving.slices.store
                lowered = lower(translation.table, http_port=options.http_port, https_port=options.https_port,
                                services=snapshot.services, secrets=snapshot.secrets, now=now,
                                slices=lambda key: tuple(slices.by_index(_BY_SERVICE, key)), cache=self._servers)
        with self._lock:
            self._version += 1
            self._built = (translation, lowered, self._version)
            self._used_services = _services_of(translation.table)
        if self._serving is not None:
            self._serving.plane.publish(self._version, lowered)
            self._serving.trigger()
        self._publish()

    def applied(self, version: int) -> None:
        """A configuration carrying ``version`` of the table is served (GatewayPlane)."""
        with self._lock:
            if version <= self._applied:
                return
            self._applied = version
        self._publish()

    def _publish(self) -> None:
        """Publish the last build with Programmed as served, and wake the status writer."""
        with self._lock:
            if self._built is None:
                return
            translation, lowered, version = self._built
            translation = replace(translation, gateways=_programmed(translation, lowered, self._applied >= version))
            self._translation = translation
        if self.on_translated is not None:
            self.on_translated(translation)


def _programmed(translation: GatewayTranslation, lowered: Lowered | None,
                applied: bool) -> dict[str, st.GatewayStatus]:
    """Gateway statuses with Programmed as the data plane serves them."""
    out = {}
    for key, status in translation.gateways.items():
        if lowered is None:
            out[key] = st.not_programmed(status, NOT_SERVED)
            continue
        left_out = [s for s in lowered.skipped
                    if any(bind in s.binds and hostnames.intersect(listener_host, (s.hostname,))
                           for bind, listener_host in translation.served.get(key, ()))]
        if left_out:
            out[key] = st.not_programmed(status, f"host {left_out[0].hostname} is not served: {left_out[0].reason}")
        elif not applied:
            out[key] = st.not_programmed(status, "waiting for the data plane to apply the configuration")
        else:
            out[key] = status
    return out
