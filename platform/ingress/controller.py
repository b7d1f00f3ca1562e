"""The ingress controller loop: informer stores → translation → data plane.

Event handlers never sync. They look at what changed and mark one of two
kinds of work, each served by its own ``BoundedFrequencyRunner``:

* **full sync** (``sync``): anything but endpoints changed (an Ingress's
  spec or annotations, an IngressClass, a referenced Service or Secret, the
  ConfigMap; not an Ingress's status, which we write ourselves). Handlers
  record what changed (``incremental.Changes``); the sync translates the
  neighbourhood of those changes and splices it into the last configuration
  (``incremental``: equal to a translation of everything), or, when the
  changes reach beyond a neighbourhood (and on the first sync and the
  periodic resync), reads the whole state of the stores into one
  ``Snapshot`` and translates it. It hands
  the ``Configuration`` to ``DataPlane.apply``, which pushes routes, backends
  and certificates to Lua and reloads nginx only when global settings
  changed. Full syncs are at least ``route_interval`` (10 ms) apart, so a
  burst of changes is coalesced into a few pushes; at most
  ``resync_interval`` apart, which repairs anything a fast path missed.
  ``--sync-rate-limit`` bounds reloads only (``DataPlane.min_reload_interval``).
* **endpoint sync** (``sync_endpoints``): only EndpointSlices of Services that
  Ingresses route to changed. It re-translates just the Ingresses that use
  those Services (``index_ingress_by_service``), takes the endpoints of the
  backends that result and patches them into the configuration of the last
  full sync. Nothing but backends changes, so the data plane pushes them to
  Lua without a reload; with 10,000 Ingresses this costs milliseconds where
  a full translation costs a second. When the small translation cannot be
  trusted to stand for the whole one (a backend it produces is unknown to
  the full model, a canary or a ``default-backend`` annotation is involved,
  the Service is the default backend) it still patches what it can and asks
  for a full sync.

The two share ``_model_lock``: both derive the configuration they apply from
``_model`` (the last configuration handed to the data plane) and hand it over
(``DataPlane.submit``) under the lock, so the data plane sees the models in
order and the newest wins; they wait for the result outside the lock, so an
endpoint sync is not held up by a full sync's reload (the data plane pushes
it at once, see dataplane.py). A slice change that arrives while a full sync
is translating is patched into that sync's result before it is applied
(``_slice_generation``).

A full sync reads as its steps: wait for the caches (first sync only) →
translate (what changed, or a snapshot of everything) → apply → record (only after apply succeeded) → tell
(Events for new problems, "Sync" for changed Ingresses, status update).
A failed apply raises, so the runner retries after ``retry_interval``.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import operator
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from platformd.common import resources
from platformd.common.clock import REAL_CLOCK, Clock
from platformd.common.informer import DeletedFinalStateUnknown, InformerFactory
from platformd.common.runner import BoundedFrequencyRunner
from platformd.common.store import (
    index_endpointslice_by_service,
    index_ingress_by_service,
    key_of,
)
from platformd.ingress import annotations as ann_mod
from platformd.ingress import auth
from platformd.ingress import incremental
from platformd.ingress.caches import Caches
from platformd.ingress.dataplane import ApplyResult, DataPlane
from platformd.ingress.model import Backend, Configuration, service_backend_name
from platformd.ingress.render import per_configuration
from platformd.ingress.secret_refs import index_ingress_by_any_secret
from platformd.ingress.snapshot import Snapshot
from platformd.ingress.translate import Problem, TranslateOptions, Translation, build

__all__ = ["Controller", "ControllerOptions", "SyncError", "SyncState"]

log = logging.getLogger(__name__)

_BY_SERVICE = "service"
_BY_SECRET = "secret"
_BY_AUTH_SECRET = "auth-secret"  # Opaque Secrets named by auth-secret
_BY_AUTH_CONFIGMAP = "auth-configmap"  # ConfigMaps named by auth-proxy-set-headers
_BY_DEFAULT_BACKEND = "default-backend"  # Services named by the default-backend annotation
_BY_HOST = "host"  # rule, TLS and alias hosts (incremental.index_ingress_by_host)


_backend_name = operator.attrgetter("name")


def index_ingress_by_default_backend(obj: Mapping) -> list[str]:
    """``ns/service`` of an Ingress's ``default-backend`` annotation (if any)."""
    meta = obj.get("metadata") or {}
    name = (meta.get("annotations") or {}).get(ann_mod.PREFIX + "default-backend")
    return [f"{meta.get('namespace', '')}/{name}"] if isinstance(name, str) and name else []


class SyncError(Exception):
    """A sync could not be applied; the runner retries it."""


class Recorder(Protocol):
    def event(self, obj: Mapping, type: str, reason: str, message: str) -> None: ...  # noqa: A002


@dataclass(frozen=True)
class ControllerOptions:
    """How the loop runs. Times in seconds.

    ``route_interval``: least time between two full syncs: route changes
    are coalesced over this (10 ms), as endpoint changes are over
    ``endpoint_interval``. ``min_sync_interval``: least time between two
    reloads (1 / ``--sync-rate-limit``; ingress-nginx's default rate 0.3/s
    gives 3.3 s), enforced by the data plane (``min_reload_interval``),
    since only global settings reload.
    ``resync_interval``: a full sync at least this often even when nothing
    changed (5 minutes: repairs a missed event without costing much at
    10,000 Ingresses). ``retry_interval``: a failed sync is tried again this
    soon (never sooner than ``min_sync_interval``): a bad reload is retried
    every few seconds, not in a busy loop. ``endpoint_interval``: least time
    between two endpoint syncs (10 ms: merges a rollout's slice updates
    without adding visible latency).
    """

    translate: TranslateOptions = TranslateOptions()
    configmap: str | None = None  # "ns/name"
    min_sync_interval: float = 1 / 0.3
    route_interval: float = 0.01
    resync_interval: float = 300.0
    retry_interval: float = 5.0
    endpoint_interval: float = 0.01
    cache_sync_timeout: float | None = None  # None: wait for the caches forever
    worker_user: str | None = None  # nginx worker user forced onto every configuration


@dataclass(frozen=True)
class SyncState:
    """What ``/status`` and ``/readyz`` report; replaced whole after each sync.

    ``applied`` turns True with the first successful apply and stays so.
    """

    applied: bool = False
    last_sync_time: float | None = None  # wall clock of the last successful sync
    last_sync_duration: float | None = None
    last_result: str = "none"  # "ok" or "failed: <reason>"
    reload_count: int = 0
    # Wall time of the first failed apply since the last one that succeeded
    # (None: the last apply succeeded). nginx keeps serving what it had.
    failing_since: float | None = None
    ingresses: int = 0
    backends: int = 0
    endpoints: int = 0
    configuration: Configuration | None = field(default=None, repr=False)

    def checksum(self) -> str | None:
        """A stable digest of the applied configuration (None before the first)."""
        return _config_checksum(self.configuration) if self.configuration is not None else None


@per_configuration  # once per Configuration object; /status asks for it on every scrape
def _config_checksum(config: Configuration) -> str:
    digest = hashlib.sha256(repr(config).encode())
    for cert in config.certificates:  # PEMs are left out of the repr
        digest.update(cert.cert_pem.encode())
        digest.update(cert.key_pem.encode())
    return digest.hexdigest()


class _Marker:
    """An informer handler that calls ``fn(obj)`` for every add, update and delete."""

    def __init__(self, fn: Callable[[dict], None]) -> None:
        self._fn = fn

    def on_add(self, obj: dict) -> None:
        self._fn(obj)

    def on_update(self, old: dict, new: dict) -> None:
        if old is not new:  # resyncs hand the same object; nothing changed
            self._fn(new)

    def on_delete(self, obj: dict | DeletedFinalStateUnknown) -> None:
        self._fn(obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj)


class _IngressMarker:
    """Calls ``fn(old, new)`` for every change of an Ingress's input (None:
    added or deleted); an update that changes only its status (which our own
    status writer does for every Ingress) marks nothing."""

    def __init__(self, fn: Callable[[dict | None, dict | None], None]) -> None:
        self._fn = fn

    def on_add(self, obj: dict) -> None:
        self._fn(None, obj)

    def on_update(self, old: dict, new: dict) -> None:
        if _ingress_input(old) != _ingress_input(new):
            self._fn(old, new)

    def on_delete(self, obj: dict | DeletedFinalStateUnknown) -> None:
        self._fn(obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj, None)


def _ingress_input(obj: Mapping) -> tuple:
    """What the translation reads from an Ingress."""
    meta = obj.get("metadata") or {}
    return (meta.get("annotations"), meta.get("creationTimestamp"), obj.get("spec"))


def _ingress_hosts(obj: Mapping) -> set[str]:
    spec = obj.get("spec") or {}
    return {str(rule.get("host") or "").lower() for rule in spec.get("rules") or () if isinstance(rule, Mapping)}


def _ingress_backends(obj: Mapping) -> set[str]:
    """Backend names (``model.service_backend_name``) an Ingress routes to:
    its rules' paths and its default backend."""
    namespace = (obj.get("metadata") or {}).get("namespace", "")
    spec = obj.get("spec") or {}
    backends = [spec.get("defaultBackend")]
    for rule in spec.get("rules") or ():
        for path in ((rule.get("http") or {}).get("paths") or ()) if isinstance(rule, Mapping) else ():
            backends.append(path.get("backend") if isinstance(path, Mapping) else None)
    names = set()
    for backend in backends:
        service = (backend.get("service") or {}) if isinstance(backend, Mapping) else {}
        port = service.get("port") or {}
        names.add(service_backend_name(namespace, str(service.get("name")), port.get("number") or port.get("name")))
    return names


class Controller:
    """Keeps ``plane`` serving what the informers of ``factory`` hold.

    ``configmap_factory`` serves the ConfigMap's namespace when it differs
    from the watched one (default: ``factory``). ``recorder`` turns problems
    into Events (None: they are logged). ``on_synced(translation)`` is called
    after every successful full sync (the status writer hooks in here).
    """

    def __init__(self, factory: InformerFactory, plane: DataPlane, options: ControllerOptions, *,
                 recorder: Recorder | None = None, configmap_factory: InformerFactory | None = None,
                 on_synced: Callable[[Translation], None] | None = None,
                 metrics=None, clock: Clock = REAL_CLOCK, caches: Caches | None = None) -> None:
        self.factory = factory
        # What our builds reuse (see caches): main shares it with the data plane.
        self.caches = caches if caches is not None else Caches()
        self.plane = plane
        self.options = options
        self.recorder = recorder
        self.metrics = metrics
        self.clock = clock
        self._on_synced = on_synced
        self.ingresses = factory.informer(resources.INGRESSES, {
            _BY_SERVICE: index_ingress_by_service, _BY_SECRET: index_ingress_by_any_secret,
            _BY_DEFAULT_BACKEND: index_ingress_by_default_backend, _BY_HOST: incremental.index_ingress_by_host,
            _BY_AUTH_SECRET: auth.index_ingress_by_auth_secret, _BY_AUTH_CONFIGMAP: auth.index_ingress_by_auth_configmap})
        self.classes = factory.informer(resources.INGRESS_CLASSES)
        self.services = factory.informer(resources.SERVICES)
        self.slices = factory.informer(resources.ENDPOINT_SLICES, {_BY_SERVICE: index_endpointslice_by_service})
        # TLS Secrets only: the only ones we serve; no other Secret is ever held.
        self.secrets = factory.informer(resources.TLS_SECRETS)
        # Opaque Secrets, for auth-secret: a second watch with its own type
        # selector, so TLS handling is unchanged (docs/security.md, "Secrets").
        self.auth_secrets = factory.informer(resources.OPAQUE_SECRETS)
        self.configmaps = None
        self._configmaps_used: frozenset[str] = frozenset()  # header ConfigMaps the last sync read
        if options.configmap:
            self.configmaps = (configmap_factory or factory).informer(resources.CONFIGMAPS)
        self._full = BoundedFrequencyRunner("ingress-sync", self.sync, options.route_interval,
                                            max(options.resync_interval, options.route_interval),
                                            options.retry_interval, clock)
        self._fast = BoundedFrequencyRunner("ingress-endpoints", self.sync_endpoints, options.endpoint_interval,
                                            3600.0, max(options.retry_interval, options.endpoint_interval), clock)
        self._model_lock = threading.Lock()  # held while deriving and applying a model
        # Under ``_model_lock``:
        self._model: Configuration | None = None  # last configuration given to the data plane
        self._translation: Translation | None = None  # the full translation ``_model`` started from
        # Under ``_dirty_lock`` (never held for long: handlers take it):
        self._dirty_lock = threading.Lock()
        self._slice_generation = 0
        self._dirty_services: set[str] = set()  # waiting for the endpoint sync
        self._slice_changes: dict[str, int] = {}  # "ns/svc" -> generation of its last slice change
        # What changed since the last full sync took its changes (incremental);
        # empty (a resync, a retry, ``trigger``) or ``everything``: a full build.
        self._changes = incremental.Changes()
        self._reapply = False  # ``trigger``: apply the last configuration again
        self._last_full = float("-inf")  # clock time of the last full translation (sync thread only)
        self._state = SyncState()
        self._reported: frozenset[Problem] = frozenset()
        self._seen_versions: dict[str, tuple] = {}  # owned Ingress -> its input last told "Sync"
        self._caches_synced = threading.Event()
        self._register_handlers()
        if metrics is not None and hasattr(metrics, "watch_problems"):
            metrics.watch_problems(self.problems)

    # --- public ---------------------------------------------------------------

    @property
    def state(self) -> SyncState:
        return self._state

    @property
    def translation(self) -> Translation | None:
        return self._translation

    def informers_synced(self) -> bool:
        synced = self.factory.has_synced()
        if self.configmaps is not None:
            synced = synced and self.configmaps.has_synced()
        return synced

    def ready(self) -> bool:
        """Informers synced, the first sync applied and the last apply succeeded."""
        return self.informers_synced() and self._state.applied and self._state.failing_since is None

    def not_applied(self) -> str | None:
        """"configuration not applied since <time>: <reason>" while applies fail, else None."""
        state = self._state
        if state.failing_since is None:
            return None
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(state.failing_since))
        return f"configuration not applied since {since}: {state.last_result}"

    def healthy(self) -> tuple[bool, str]:
        """Whether requested changes get applied; a reason when not."""
        if self._caches_synced.is_set() and not self._full.healthy(max(300.0, 4 * self.options.min_sync_interval)):
            return False, f"sync pending too long ({self._full.health().last_error or 'no error recorded'})"
        return True, "ok"

    def trigger(self) -> None:
        """Ask for the current configuration to be applied again soon (nginx
        restarted, Gateway routes to merge): translates nothing by itself."""
        with self._dirty_lock:
            self._reapply = True
        self._full.run()

    def snapshot_of(self, ingresses: Iterable[dict]) -> Snapshot:
        """A ``Snapshot`` of just ``ingresses`` with what they reference from
        the stores (the admission webhook translates neighbourhoods with it)."""
        return self._partial_snapshot(ingresses)

    def run(self, stop: threading.Event) -> None:
        """Start the informers, wait for their first lists, then sync until ``stop``."""
        self.factory.start()
        if self.configmaps is not None and not self.configmaps.started:
            self.configmaps.start()
        if not self._wait_for_caches(stop):
            return
        fast = threading.Thread(target=self._fast.loop, args=(stop,), name="ingress-endpoints", daemon=True)
        fast.start()
        self._full.run()
        self._full.loop(stop)
        fast.join(timeout=5)

    # --- handlers: only mark work ----------------------------------------------

    def _register_handlers(self) -> None:
        self.ingresses.add_handler(_IngressMarker(self._on_ingress))
        self.classes.add_handler(_Marker(lambda obj: self._mark_everything()))
        self.services.add_handler(_Marker(self._on_service))
        self.secrets.add_handler(_Marker(self._on_secret))
        self.auth_secrets.add_handler(_Marker(self._on_auth_secret))
        self.slices.add_handler(_Marker(self._on_slice))
        if self.configmaps is not None:
            self.configmaps.add_handler(_Marker(self._on_configmap))

    def _referenced_service(self, key: str) -> str | None:
        """"route", "other" (default backends) or None for a Service key."""
        if self.ingresses.store.index_keys(_BY_SERVICE, key):
            return "route"
        opts = self.options.translate
        if key == opts.default_backend_service or self.ingresses.store.index_keys(_BY_DEFAULT_BACKEND, key):
            return "other"
        return None

    def _mark_everything(self) -> None:
        with self._dirty_lock:
            self._changes.everything = True
        self._full.run()

    def _on_ingress(self, old: dict | None, new: dict | None) -> None:
        with self._dirty_lock:
            self._changes.ingress(old, new)
        self._full.run()

    def _on_service(self, obj: dict) -> None:
        key = key_of(obj)
        use = self._referenced_service(key)
        if use == "route":
            with self._dirty_lock:
                self._changes.services.add(key)
            self._full.run()
        elif use is not None:
            self._mark_everything()

    def _on_secret(self, obj: dict) -> None:
        key = key_of(obj)
        if key == self.options.translate.default_ssl_certificate:
            self._mark_everything()
        elif self.ingresses.store.index_keys(_BY_SECRET, key):
            with self._dirty_lock:
                self._changes.secrets.add(key)
            self._full.run()

    def _on_slice(self, obj: dict) -> None:
        for service in index_endpointslice_by_service(obj):
            use = self._referenced_service(service)
            if use is None:
                continue
            with self._dirty_lock:
                self._slice_generation += 1
                self._dirty_services.add(service)
                self._slice_changes[service] = self._slice_generation
            self._fast.run()
            if use == "other":
                self._mark_everything()

    def _on_auth_secret(self, obj: dict) -> None:
        key = key_of(obj)
        if self.ingresses.store.index_keys(_BY_AUTH_SECRET, key) or self.ingresses.store.index_keys(_BY_SECRET, key):
            self._mark_everything()

    def _on_configmap(self, obj: dict) -> None:
        key = key_of(obj)
        if (key == self.options.configmap or key in self._configmaps_used
                or self.ingresses.store.index_keys(_BY_AUTH_CONFIGMAP, key)):
            self._mark_everything()

    # --- the full sync ---------------------------------------------------------

    def sync(self) -> None:
        """One full sync (see the module docstring). Raises ``SyncError`` to be retried."""
        try:
            self._sync()
        except BaseException:
            with self._dirty_lock:
                self._changes.everything = True  # what this one took is not lost: the retry translates all
            raise

    def _sync(self) -> None:
        started = self.clock.monotonic()
        with self._dirty_lock:
            generation = self._slice_generation
            changes, self._changes = self._changes, incremental.Changes()
            reapply, self._reapply = self._reapply, False
        translation, changed, how = self._translate(changes, reapply)
        self._configmaps_used = translation.configmaps_used
        config = self._localize(translation.configuration)
        with self._model_lock:
            with self._dirty_lock:
                # Slices that changed after the snapshot was taken.
                self._slice_changes = {s: g for s, g in self._slice_changes.items() if g > generation}
                late = set(self._slice_changes)
            if late:
                config, _ = self._patch_endpoints(config, late)
            self._model, self._translation = config, translation
            applying = self.plane.submit(config)
        log.debug("sync: %s translation in %.3fs", how, self.clock.monotonic() - started)
        # Waiting out a reload (tens of seconds at 10,000 Ingresses) would hold
        # back the next sync, and with it a new Ingress the Lua router could
        # serve at once: when another sync is due, leave this one to the data
        # plane (it applies it with, or replaces it by, the next) and return.
        result = applying(self._full.requested)
        if result is None:
            log.info("sync handed over to the next one while its reload waits")
            self._tell(translation, changed)
            return
        if result.refused:
            # Left out by the data plane, reported like translation problems.
            translation = replace(translation, problems=translation.problems + self._refused_problems(result.refused))
            self._translation = translation
        self._record(result, config, translation, self.clock.monotonic() - started)
        self._tell(translation, changed)
        if result.ok and result.reload_in > 0:
            # A global change came too soon after the last reload: the rest
            # is served; apply again when the reload is allowed.
            timer = threading.Timer(result.reload_in, self._full.run)
            timer.daemon = True
            timer.start()
        if not result.ok:
            raise SyncError(f"applying the configuration failed ({result.kind}): {result.error}")
        if self._on_synced is not None:
            self._on_synced(translation)

    def _translate(self, changes: incremental.Changes,
                   reapply: bool) -> tuple[Translation, frozenset[str] | None, str]:
        """(translation, the Ingresses that may have changed (None: any), how it was made).

        Full: the first sync, ``changes.everything``, the periodic resync
        (``resync_interval`` after the last full one: repairs whatever a
        missed event left), a run with nothing recorded (the runner's
        periodic call, or a handler that only asked for a sync), or changes
        beyond a neighbourhood. Only ``trigger`` (nginx restarted, Gateway
        routes changed) and nothing recorded: the last configuration again.
        Else the neighbourhood (incremental)."""
        now = self.clock.monotonic()
        why = ("first sync" if self._translation is None else "everything" if changes.everything
               else "resync" if now - self._last_full >= self.options.resync_interval else None)
        if why is None and not changes:
            if reapply:
                with self._model_lock:
                    return replace(self._translation, configuration=self._model), frozenset(), "no (re-applied)"
            why = "nothing recorded"
        if why is None:
            hood = self._neighbourhood(changes)
            translation = self._translate_changed(hood) if hood is not None else None
            if translation is not None:
                return translation, hood.changed, f"incremental ({len(hood.ingresses)} ingresses, {len(hood.hosts)} hosts)"
            why = "beyond a neighbourhood" if hood is None else "not spliceable"
        self._last_full = now
        return build(self._snapshot(), self.options.translate, self.caches), None, f"full ({why})"

    def _translate_changed(self, hood: incremental.Neighbourhood) -> Translation | None:
        """The last translation with ``hood`` translated again (None: build in full).

        It starts from ``_model``, which has the endpoint syncs' patches;
        slices that change meanwhile are patched in by ``sync`` as for a
        full build (``_slice_changes``)."""
        partial = build(self._partial_snapshot(hood.ingresses.values()), self.options.translate, self.caches)
        partial = replace(partial, configuration=self._localize(partial.configuration))
        with self._model_lock:
            previous = replace(self._translation, configuration=self._model)
        return incremental.splice(previous, partial, hood, self.options.translate)

    def _neighbourhood(self, changes: incremental.Changes) -> incremental.Neighbourhood | None:
        """What to translate again for ``changes`` (None: everything; see incremental)."""
        store = self.ingresses.store
        index = {incremental.HOST: _BY_HOST, incremental.SERVICE: _BY_SERVICE, incremental.SECRET: _BY_SECRET,
                 incremental.DEFAULT_BACKEND: _BY_DEFAULT_BACKEND}
        return incremental.neighbourhood(changes, store.get, lambda kind, value: store.by_index(index[kind], value),
                                         self.options.translate)

    def _wait_for_caches(self, stop: threading.Event) -> bool:
        deadline = None if self.options.cache_sync_timeout is None else time.monotonic() + self.options.cache_sync_timeout
        while not stop.is_set():
            if self.factory.wait_for_sync(0.5) and (self.configmaps is None or self.configmaps.wait_for_sync(0.5)):
                log.info("informer caches synced; starting the sync loop")
                self._caches_synced.set()
                return True
            if deadline is not None and time.monotonic() > deadline:
                raise SyncError("informer caches did not sync in time")
        return False

    def _snapshot(self) -> Snapshot:
        slices: dict[str, list[dict]] = {}
        for obj in self.slices.store.list():
            for service in index_endpointslice_by_service(obj):
                slices.setdefault(service, []).append(obj)
        configmap = None
        if self.configmaps is not None and self.options.configmap:
            configmap = self.configmaps.store.get(self.options.configmap)
        ingresses = tuple(self.ingresses.store.list())
        return Snapshot(
            ingresses=ingresses,
            ingress_classes=tuple(self.classes.store.list()),
            services=dict(self.services.store.items()),
            endpoint_slices={k: tuple(v) for k, v in slices.items()},
            secrets={**self._auth_secrets(ingresses), **dict(self.secrets.store.items())},
            configmap=configmap,
            configmaps=dict(self.configmaps.store.items()) if self.configmaps is not None else {},
        )

    def _auth_secrets(self, ingresses: Iterable[dict]) -> dict[str, dict]:
        """The Opaque Secrets some Ingress names (auth-secret, and the CA
        bundles of auth-tls-secret / proxy-ssl-secret); no other is handed to
        the translation."""
        store = self.auth_secrets.store
        keys = {k for obj in ingresses
                for k in (*auth.index_ingress_by_auth_secret(obj), *index_ingress_by_any_secret(obj))}
        return {k: o for k in keys if (o := store.get(k)) is not None}

    def _localize(self, config: Configuration) -> Configuration:
        """Process-level settings that are not the cluster's to choose."""
        user = self.options.worker_user
        if user is None or config.settings.workers.user == user:
            return config
        workers = replace(config.settings.workers, user=user)
        return replace(config, settings=replace(config.settings, workers=workers))

    # --- the endpoint sync -----------------------------------------------------

    def sync_endpoints(self) -> None:
        """Patch the endpoints of Services whose slices changed into the model and apply."""
        with self._model_lock:
            with self._dirty_lock:
                services, self._dirty_services = self._dirty_services, set()
            if self._model is None or not services:
                return  # the first full sync reads everything
            started = self.clock.monotonic()
            config, complete = self._patch_endpoints(self._model, services)
            applying = None
            if config is not self._model:
                self._model = config
                applying = self.plane.submit(config)
        patched = self.clock.monotonic()
        # As in ``sync``: behind a reload, newer endpoint changes must not wait.
        result = applying(self._fast.requested) if applying is not None else None
        # One INFO line per applied batch (a rollout is a few batches, not a line per slice).
        log.log(logging.INFO if result is not None and result.ok else logging.DEBUG,
                "endpoint sync of %d service(s): patch %.3fs, apply %.3fs (%s)", len(services),
                patched - started, self.clock.monotonic() - patched,
                result.kind if result else ("handed over" if applying else "no change"))
        if not complete:
            self._mark_everything()
        if result is None:
            return
        if not result.ok:
            self._mark_everything()  # the full sync retries with everything current
            self._failed(result)
            raise SyncError(f"endpoint update failed: {result.error}")
        self._count(config, result)

    def _patch_endpoints(self, config: Configuration, services: Iterable[str]) -> tuple[Configuration, bool]:
        """``config`` with fresh endpoints for the backends of ``services``, and
        whether the patch is known to be the whole story (see module docstring)."""
        store = self.ingresses.store
        ingresses: dict[str, dict] = {}
        complete = True
        for service in services:
            if service == self.options.translate.default_backend_service or store.index_keys(_BY_DEFAULT_BACKEND, service):
                complete = False
            for obj in store.by_index(_BY_SERVICE, service):
                ingresses[key_of(obj)] = obj
        if not ingresses:
            return config, complete
        for obj in ingresses.values():
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            if ann_mod.PREFIX + "canary" in annotations or ann_mod.PREFIX + "default-backend" in annotations:
                complete = False
        partial = build(self._partial_snapshot(ingresses.values()), self.options.translate, self.caches).configuration
        # Backends are sorted by name (model invariant): find each by bisection
        # and copy the tuple once, rather than index 20,000 names per change.
        backends = config.backends
        patched: list[Backend] | None = None
        for backend in partial.backends:
            at = bisect.bisect_left(backends, backend.name, key=_backend_name)
            if at == len(backends) or backends[at].name != backend.name:
                complete = False
            elif backends[at].endpoints != backend.endpoints:
                patched = patched or list(backends)
                patched[at] = replace(backends[at], endpoints=backend.endpoints)
        if patched is None:
            return config, complete
        return replace(config, backends=tuple(patched)), complete

    def _partial_snapshot(self, ingresses: Iterable[dict]) -> Snapshot:
        ingresses = tuple(ingresses)
        service_keys: set[str] = set()
        secret_keys: set[str] = set()
        for obj in ingresses:
            service_keys.update(index_ingress_by_service(obj))
            service_keys.update(index_ingress_by_default_backend(obj))
            secret_keys.update(index_ingress_by_any_secret(obj))
        opts = self.options.translate
        if opts.default_ssl_certificate:
            secret_keys.add(opts.default_ssl_certificate)
        if opts.default_backend_service:
            service_keys.add(opts.default_backend_service)  # a host without a "/" of its own uses it
        services = {k: o for k in service_keys if (o := self.services.store.get(k)) is not None}
        secrets = {k: o for k in secret_keys if (o := self.secrets.store.get(k)) is not None}
        slices = {k: tuple(self.slices.store.by_index(_BY_SERVICE, k)) for k in service_keys}
        configmap = None
        if self.configmaps is not None and opts is not None and self.options.configmap:
            configmap = self.configmaps.store.get(self.options.configmap)
        secrets.update(self._auth_secrets(ingresses))
        return Snapshot(ingresses=ingresses, ingress_classes=tuple(self.classes.store.list()),
                        services=services, endpoint_slices=slices, secrets=secrets, configmap=configmap,
                        configmaps=dict(self.configmaps.store.items()) if self.configmaps is not None else {})

    # --- recording and telling ------------------------------------------------------

    def _record(self, result: ApplyResult, config: Configuration, translation: Translation,
                duration: float) -> None:
        state = self._state
        if result.ok:
            self._state = replace(
                state, applied=True, last_sync_time=self.clock.wall(), last_sync_duration=duration,
                last_result="ok", reload_count=state.reload_count + (result.kind in ("reload", "start")),
                failing_since=None,
                ingresses=len(translation.owned_ingresses), backends=len(self._served(config).backends),
                endpoints=_endpoint_count(self._served(config)), configuration=config)
            log.info("sync applied (%s) in %.3fs: %d ingresses, %d backends, %d endpoints", result.kind, duration,
                     self._state.ingresses, self._state.backends, self._state.endpoints)
        else:
            self._failed(result)
        if self.metrics is not None:
            self.metrics.observe_sync(duration, result.ok, self._state)

    def _failed(self, result: ApplyResult) -> None:
        state = self._state
        self._state = replace(state, last_result=f"failed: {result.error}",
                              failing_since=state.failing_since or self.clock.wall())

    def _served(self, config: Configuration) -> Configuration:
        """What the data plane serves after a successful apply: ``config`` plus
        what a wrapping plane merged in (Gateway API routes' backends), less
        what it left out; counts come from it, so they match what Lua holds."""
        running = getattr(self.plane, "running", None)
        return running if isinstance(running, Configuration) else config

    def _count(self, config: Configuration, result: ApplyResult) -> None:
        """Record an endpoint sync that succeeded."""
        self._state = replace(self._state, last_sync_time=self.clock.wall(), last_result="ok", failing_since=None,
                              endpoints=_endpoint_count(self._served(config)), configuration=config)
        if self.metrics is not None:
            self.metrics.observe_counts(self._state)

    def _refused_problems(self, refused: Iterable[tuple[str, str, str]]) -> tuple[Problem, ...]:
        """Problems on the Ingresses behind what the data plane refused: those
        naming the host, or routing to the backend (``ns.service.port``)."""
        problems = []
        for kind, name, reason in refused:
            if kind == "settings":
                namespace, _, cm = (self.options.configmap or "").partition("/")
                problems.append(Problem("ConfigMap", namespace, cm or "-", "RefusedByDataPlane",
                                        f"global settings left out, the running ones stay: {reason}"))
                continue
            for obj in self.ingresses.store.list():
                meta = obj.get("metadata") or {}
                if name in _ingress_hosts(obj) if kind == "host" else name in _ingress_backends(obj):
                    problems.append(Problem("Ingress", meta.get("namespace", ""), meta.get("name", ""),
                                            "RefusedByDataPlane",
                                            f"{kind} {name} left out: the data plane refused it: {reason}"))
        return tuple(problems)

    def _tell(self, translation: Translation, changed: Iterable[str] | None = None) -> None:
        """Problems (``_report``), then "Sync" for changed Ingresses that are served as asked.

        ``changed``: the only Ingresses that may have changed since the last
        sync (an incremental one); None: any."""
        self._report(translation.problems)
        flagged = {f"{p.namespace}/{p.name}" for p in self._reported if p.kind == "Ingress"}
        before = self._seen_versions
        if changed is None:
            seen: dict[str, tuple] = {}
            keys: Iterable[str] = translation.owned_ingresses
        else:
            seen = before  # only the sync thread uses it: changed in place
            owned = translation.owned_ingresses
            keys = []
            for key in changed:
                at = bisect.bisect_left(owned, key)
                if at < len(owned) and owned[at] == key:
                    keys.append(key)
                else:
                    seen.pop(key, None)
        for key in keys:
            obj = self.ingresses.store.get(key)
            if obj is None:
                seen.pop(key, None)
                continue
            version = _ingress_input(obj)  # not resourceVersion: our status writes change that
            # A refused Ingress hears a Warning from ``_report``, not a "Sync"
            # that reads as if all went well.
            if before.get(key) != version and self.recorder is not None and key not in flagged:
                self.recorder.event(obj, "Normal", "Sync", "Scheduled for sync")
            seen[key] = version
        self._seen_versions = seen

    # --- problems: the one path from "refused" to Events, /status and metrics ---------

    def _report(self, problems: Iterable[Problem]) -> None:
        """Publish the current problems: everything refused and why.

        The one way a refusal becomes visible, whoever found it (translation,
        annotation parser, the data plane refusing an object): a Warning
        Event for each new problem (once while it lasts; the recorder
        coalesces, never drops), and the whole set, swapped in at once, for
        ``problems()`` (``/status``, ``platformctl status`` and the
        ``nginx_ingress_controller_problems`` metric read it).
        """
        current = frozenset(problems)
        for problem in sorted(current - self._reported):
            self._event_for(problem)
        self._reported = current

    def problems(self) -> tuple[Problem, ...]:
        """Every current problem, sorted: the last sync's, then files the source ignores."""
        found = sorted(self._reported)
        source_problems = getattr(self.factory.source, "problems", None)
        if callable(source_problems):
            found += [Problem("File", "", path, "InvalidManifest", message)
                      for path, message in sorted(source_problems().items())]
        return tuple(found)

    def _event_for(self, problem: Problem) -> None:
        log.warning("%s %s/%s: %s: %s", problem.kind, problem.namespace, problem.name, problem.reason, problem.message)
        if self.recorder is None:
            return
        key = f"{problem.namespace}/{problem.name}" if problem.namespace else problem.name
        stores = {"Ingress": self.ingresses.store, "Service": self.services.store, "Secret": self.secrets.store,
                  "IngressClass": self.classes.store}
        if self.configmaps is not None:
            stores["ConfigMap"] = self.configmaps.store
        store = stores.get(problem.kind)
        obj = store.get(key) if store is not None else None
        if obj is None:
            return
        # Every problem refuses something: Warning, whatever the finder said.
        self.recorder.event(obj, "Warning", problem.reason, problem.message)


_ENDPOINTS = operator.attrgetter("endpoints")


def _endpoint_count(config: Configuration) -> int:
    return sum(map(len, map(_ENDPOINTS, config.backends)))  # in C: 20,000 backends per sync
