"""The Gateway API loop: informers -> translation -> (data plane) -> status.

Runs beside the Ingress controller in the same process, on its own
``InformerFactory`` (same source), so a Gateway API informer that cannot
list (CRDs removed, RBAC missing) never holds up the Ingress sync. Services
and Secrets are read from the Ingress controller's informers, not watched
twice.

The Gateway API kinds are served only where their CRDs are installed:
``discover`` asks the API server once at start; without them the caller
logs one line and runs Ingresses only.

Handlers only mark work: they record what changed (``gateway_incremental.Changes``:
a route, a Service, the EndpointSlices of a Service the table uses; anything
else, a GatewayClass, Gateway, ReferenceGrant, Namespace or a Secret a
Gateway names, is "everything") and ask the ``gateway-sync`` runner for a sync. A sync with
only routes and Services recorded translates and lowers just what they
touch (``gateway_incremental``); otherwise (and on the first sync, the
periodic resync and a retry) it reads the stores whole (``GatewaySnapshot``),
translates (``gateway_translate``) and lowers the table onto the data plane
model (``gateway_lowering``). Either way it publishes the result to the
``GatewayPlane`` the Ingress controller submits through and asks that
controller for a sync. Status follows what is served: a Gateway is
``Programmed=True`` once a configuration holding its version of the table
was applied (``applied``) and none of its hosts was left out; until then
(or without a data plane: ``serving`` None) ``Programmed=False Pending``
with the reason. Each change of that publishes a new translation with one
assignment and wakes the status writer (``on_translated(translation,
routes)``, ``routes``: the (kind, key) of the routes whose status may differ
from the last published translation's, None: any route's).
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
from platformd.common.store import index_endpointslice_by_service, key_of
from platformd.ingress import gateway_hostnames as hostnames
from platformd.ingress import gateway_incremental as incremental
from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_dataplane import GatewayPlane
from platformd.ingress.gateway_lowering import Lowered, LoweringCache, lower
from platformd.ingress.gateway_input import GatewayOptions, GatewaySnapshot
from platformd.ingress.gateway_translate import GRPC_ROUTE, HTTP_ROUTE, GatewayTranslation, RouteCache, build

__all__ = ["GatewayController", "discover"]

log = logging.getLogger(__name__)

NOT_SERVED = "the data plane does not serve Gateway API routes yet"
# The Ingress controller indexes EndpointSlices by Service under this name with
# the same function; adding it again is a no-op (store.add_indexers).
_BY_SERVICE = "service"
_BY_SECRET = "secret"


def index_gateway_by_secret(obj: dict) -> list[str]:
    """The Secrets ("ns/name") a Gateway's listeners name in certificateRefs,
    whatever group or kind they say (a change of any of them is a full sync;
    gateway_listeners decides which are usable): the namespace defaults to
    the Gateway's."""
    meta = obj.get("metadata") or {}
    keys = []
    for listener in (obj.get("spec") or {}).get("listeners") or ():
        tls = listener.get("tls") if isinstance(listener, dict) else None
        for ref in (tls.get("certificateRefs") if isinstance(tls, dict) else None) or ():
            if isinstance(ref, dict) and isinstance(ref.get("name"), str):
                keys.append(f"{ref.get('namespace') or meta.get('namespace', '')}/{ref['name']}")
    return keys


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
                 on_translated: Callable[[GatewayTranslation, frozenset[tuple[str, str]] | None], None]
                 | None = None,
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
        self._built_options: GatewayOptions | None = None  # the options it was made with
        self._version = 0  # of the last table published to the data plane
        self._applied = 0  # newest version a successful apply carried
        self._servers = LoweringCache()  # the last lowering's Servers, reused for unchanged hosts
        self._routes = RouteCache()  # the translation of unchanged routes, reused
        self._caches_lock = threading.Lock()  # held while building with _routes and _servers
        self._changes_lock = threading.Lock()  # guards _changes (handlers take it, never for long)
        self._changes = incremental.Changes()  # what changed since the last sync took its changes
        for resource, informer in self.informers.items():
            kind = {resources.HTTP_ROUTES: HTTP_ROUTE, resources.GRPC_ROUTES: GRPC_ROUTE}.get(resource)
            mark = self._marker(kind)
            informer.add_handler(FuncHandler(
                add=mark, delete=mark, update=lambda old, new, mark=mark: _input(old) != _input(new) and mark(new)))
        services.add_handler(FuncHandler(add=self._on_service, update=lambda old, new: self._on_service(new),
                                         delete=self._on_service))
        self.informers[resources.GATEWAYS].add_indexers({_BY_SECRET: index_gateway_by_secret})
        secrets.add_handler(FuncHandler(add=self._on_secret, update=lambda old, new: self._on_secret(new),
                                        delete=self._on_secret))
        if serving is not None:
            serving.plane.on_applied = self.applied
            serving.slices.add_indexers({_BY_SERVICE: index_endpointslice_by_service})
            serving.slices.add_handler(FuncHandler(add=self._on_slice, update=lambda old, new: self._on_slice(new),
                                                   delete=self._on_slice))

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

    # --- handlers: only record what changed ----------------------------------

    def _mark(self, record: Callable[[incremental.Changes], None] | None = None) -> None:
        """Record a change (None: one that needs everything) and ask for a sync."""
        with self._changes_lock:
            if record is None:
                self._changes.everything = True
            else:
                record(self._changes)
        self._runner.run()

    def _marker(self, kind: str | None) -> Callable[[object], None]:
        """The handler of an informer: a route's (``kind``) records its key, the others everything."""
        if kind is None:
            return lambda obj=None: self._mark()

        def mark(obj) -> None:
            key = key_of(getattr(obj, "obj", obj))
            self._mark(lambda changes: changes.routes.add((kind, key)))
        return mark

    def _on_secret(self, obj) -> None:
        """Only a Secret some Gateway names changes the translation (listener
        certificates): TLS Secrets of Ingresses come and go without a build."""
        if self.informers[resources.GATEWAYS].store.index_keys(_BY_SECRET, key_of(getattr(obj, "obj", obj))):
            self._mark()

    def _on_service(self, obj) -> None:
        key = key_of(getattr(obj, "obj", obj))
        self._mark(lambda changes: changes.services.add(key))

    def _on_slice(self, obj) -> None:
        # While a sync lowers, what it uses is not known yet (it may just have
        # read this Service's slices): record the change for the next one.
        busy = self._caches_lock.locked()
        used = [key for key in index_endpointslice_by_service(getattr(obj, "obj", obj))
                if busy or self._servers.uses(key)]
        if used:
            self._mark(lambda changes: changes.slices.update(used))

    # --- the sync ---------------------------------------------------------------

    def sync(self) -> None:
        """What changed, or snapshot -> translate -> lower; then publish (see the module docstring)."""
        options = replace(self.options, publish_addresses=tuple(self._publish_addresses()))
        with self._changes_lock:
            changes, self._changes = self._changes, incremental.Changes()
        try:
            with self._caches_lock:  # the caches serve one build at a time (tests call sync beside the runner)
                routes, built = None, None  # routes: those whose status may change (None: any)
                if changes and not changes.everything:
                    routes = incremental.retranslated(changes, self._routes)  # before the caches record anew
                    built = self._incremental(changes, options)
                if built is None:
                    routes, built = None, self._full(options)
                elif self._built is not None and built[0] is self._built[0] and built[1] is self._built[1]:
                    return  # nothing the table or the data plane shows changed
                self._built_options = options
        except BaseException:
            with self._changes_lock:
                self._changes.everything = True  # what this one took is not lost: the retry builds in full
            raise
        translation, lowered = built
        with self._lock:
            self._version += 1
            self._built = (translation, lowered, self._version)
        if self._serving is not None:
            self._serving.plane.publish(self._version, lowered)
            self._serving.trigger()
        self._publish(frozenset(routes) if routes is not None else None)

    def _slices(self, key: str) -> tuple[dict, ...]:
        return tuple(self._serving.slices.store.by_index(_BY_SERVICE, key))

    def _incremental(self, changes: incremental.Changes,
                     options: GatewayOptions) -> tuple[GatewayTranslation, Lowered | None] | None:
        """The last build with ``changes`` applied; None: build in full."""
        last = self._built
        if last is None or options != self._built_options:
            return None
        stores = {HTTP_ROUTE: self.informers[resources.HTTP_ROUTES].store,
                  GRPC_ROUTE: self.informers[resources.GRPC_ROUTES].store}
        sources = incremental.Sources(route=lambda kind, key: stores[kind].get(key), services=self.services.store,
                                      slices=self._slices, secrets=self.secrets.store, now=self._wall_clock())
        return incremental.apply(last[0], last[1], changes, options, sources, self._routes, self._servers)

    def _full(self, options: GatewayOptions) -> tuple[GatewayTranslation, Lowered | None]:
        snapshot, now = self.snapshot(), self._wall_clock()
        translation = build(snapshot, options, now, cache=self._routes)
        lowered = None
        if self._serving is not None:
            lowered = lower(translation.table, http_port=options.http_port, https_port=options.https_port,
                            services=snapshot.services, secrets=snapshot.secrets, now=now, slices=self._slices,
                            cache=self._servers)
        return translation, lowered

    def applied(self, version: int) -> None:
        """A configuration carrying ``version`` of the table is served (GatewayPlane)."""
        with self._lock:
            if version <= self._applied:
                return
            self._applied = version
        self._publish(frozenset())  # only Programmed of Gateways changes

    def _publish(self, routes: frozenset[tuple[str, str]] | None) -> None:
        """Publish the last build with Programmed as served, and wake the
        status writer (``routes``: see the module docstring)."""
        with self._lock:
            if self._built is None:
                return
            translation, lowered, version = self._built
            translation = replace(translation, gateways=_programmed(translation, lowered, self._applied >= version))
            self._translation = translation
        if self.on_translated is not None:
            self.on_translated(translation, routes)


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
