"""Informers: a reflector, a store, and event handlers, shared per resource.

An ``Informer`` runs a reflector in a daemon thread that keeps ``.store``
equal to one collection, and tells handlers what changed:

- ``on_add(obj)``: a key appeared;
- ``on_update(old, new)``: a key's object changed (and, with a resync period,
  ``on_update(obj, obj)`` for every object once per period);
- ``on_delete(obj)``: a key went away. ``obj`` is the final object when a
  watch reported the delete, or a ``DeletedFinalStateUnknown`` tombstone
  (``.key``, ``.obj`` = the last state we had) when the delete was only
  discovered by a relist, because the watch missed it.

Guarantees: for one informer, handlers are called from one thread, in the
order changes were observed, and the store already holds the new state when
a handler runs. ``old`` in ``on_update`` is the very object handlers were
last given for that key. Replaying a handler's calls therefore rebuilds
exactly the store's contents. Handlers must be quick (mark something dirty, queue a key):
a slow handler delays every later event of that resource. A handler that
raises is logged and the informer carries on.

Handlers receive the store's own objects: **they must not modify them.**

A ``transform`` (like client-go's ``SetTransform``) is applied to every
object on its way from the source into the store, before any handler sees
it; the store then holds only what the transform returns. Use it to drop
what nobody in this process reads (``drop_field_management``). Contract:
a transform returns a new object or its argument unchanged, never modifies
its argument (a source may share objects between informers: the file source
serves the same dicts to every lister), is deterministic, and is idempotent
(a relist hands it objects it has seen before). One that raises is a bug:
the reflector logs it and lists again after its backoff. Because informers
are shared per resource, a factory's transform applies to every user of its
informers; the default is none.

``InformerFactory`` hands out one informer per resource per process, so the
ingress controller and anything else that needs Services share one watch
and one cache::

    factory = InformerFactory(ApiSource(kubeclient.load(kubeconfig)))  # or FileSource(folder)
    slices = factory.informer(ENDPOINT_SLICES, {"service": index_endpointslice_by_service})
    slices.add_handler(FuncHandler(add=mark_dirty, update=..., delete=...))
    factory.start()
    if not factory.wait_for_sync(timeout=60):
        ...  # not synced: do not act on a partial cache
    slices.store.by_index("service", "ns/web")
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from platformd.common.clock import REAL_CLOCK, Clock
from platformd.common.reflector import Reflector, ReflectorOptions, Source
from platformd.common.resources import Resource
from platformd.common.store import IndexFunc, Store, key_of

log = logging.getLogger(__name__)

Transform = Callable[[dict], dict]

#: Written by ``kubectl apply``: the whole object as JSON, as big as the object.
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"


def drop_field_management(obj: dict) -> dict:
    """``obj`` without ``metadata.managedFields`` and the last-applied annotation.

    Both record who set which field for server-side and client-side apply;
    together they are often larger than the rest of the object, and a
    controller that only reads objects (and writes status with patches)
    never needs them. Returns ``obj`` itself when it has neither, else a
    copy that shares everything but the top-level, ``metadata`` and
    ``annotations`` dicts. A ``transform`` for ``InformerFactory``.
    """
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    annotations = meta.get("annotations")
    has_last_applied = isinstance(annotations, dict) and LAST_APPLIED_ANNOTATION in annotations
    if "managedFields" not in meta and not has_last_applied:
        return obj
    meta = {k: v for k, v in meta.items() if k != "managedFields"}
    if has_last_applied:
        meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED_ANNOTATION}
    return {**obj, "metadata": meta}


@dataclass(frozen=True)
class DeletedFinalStateUnknown:
    """A delete seen only on relist: ``obj`` is the last state we knew, which
    may be older than the object's real final state."""

    key: str
    obj: dict


class EventHandler(Protocol):
    def on_add(self, obj: dict) -> None: ...

    def on_update(self, old: dict, new: dict) -> None: ...

    def on_delete(self, obj: dict | DeletedFinalStateUnknown) -> None: ...


@dataclass(frozen=True)
class FuncHandler:
    """An ``EventHandler`` from up to three callables (missing ones do nothing)."""

    add: Callable[[dict], None] | None = None
    update: Callable[[dict, dict], None] | None = None
    delete: Callable[[dict | DeletedFinalStateUnknown], None] | None = None

    def on_add(self, obj: dict) -> None:
        if self.add:
            self.add(obj)

    def on_update(self, old: dict, new: dict) -> None:
        if self.update:
            self.update(old, new)

    def on_delete(self, obj: dict | DeletedFinalStateUnknown) -> None:
        if self.delete:
            self.delete(obj)


def _changed(old: Mapping, new: Mapping) -> bool:
    """Whether a relist found a new state. resourceVersions decide when both
    have one (cheap); otherwise compare contents."""
    old_rv = (old.get("metadata") or {}).get("resourceVersion")
    new_rv = (new.get("metadata") or {}).get("resourceVersion")
    if old_rv and new_rv:
        return old_rv != new_rv
    return old != new


class _Dispatcher:
    """The reflector's sink: updates the store, then calls the handlers.

    ``lock`` serialises store updates with handler calls, resyncs and
    ``add_handler`` replays, so every handler sees one consistent sequence.
    Objects pass through ``transform`` (if any) before anything else.
    """

    def __init__(self, store: Store, name: str, transform: Transform | None = None) -> None:
        self.store = store
        self.name = name
        self.transform = transform
        self.lock = threading.RLock()
        self.handlers: list[EventHandler] = []

    def replace(self, objects: list[dict]) -> None:
        if self.transform is not None:
            objects = [self.transform(obj) for obj in objects]
        with self.lock:
            old = dict(self.store.items())
            kept: list[dict] = []
            changes: list[tuple[str, tuple[dict, ...]]] = []
            for obj in objects:
                previous = old.pop(key_of(obj), None)
                if previous is None:
                    changes.append(("on_add", (obj,)))
                elif _changed(previous, obj):
                    changes.append(("on_update", (previous, obj)))
                else:
                    # Unchanged: keep the object handlers already have, so
                    # the store only ever holds objects they were given.
                    obj = previous
                kept.append(obj)
            self.store.replace(kept)
            for method, args in changes:
                self._notify(method, *args)
            # What is left in ``old`` was deleted while we were not watching.
            for key, previous in old.items():
                self._notify("on_delete", DeletedFinalStateUnknown(key, previous))

    def add(self, obj: dict) -> None:
        if self.transform is not None:
            obj = self.transform(obj)
        with self.lock:
            previous = self.store.add(obj)
            if previous is None:
                self._notify("on_add", obj)
            else:
                self._notify("on_update", previous, obj)

    update = add

    def delete(self, obj: dict) -> None:
        if self.transform is not None:
            obj = self.transform(obj)
        with self.lock:
            if self.store.delete(obj) is not None:
                self._notify("on_delete", obj)

    def resync(self) -> None:
        with self.lock:
            for obj in self.store.list():
                self._notify("on_update", obj, obj)

    def add_handler(self, handler: EventHandler) -> None:
        with self.lock:
            for obj in self.store.list():
                self._call(handler, "on_add", obj)
            self.handlers.append(handler)

    def _notify(self, method: str, *args: object) -> None:
        for handler in self.handlers:
            self._call(handler, method, *args)

    def _call(self, handler: EventHandler, method: str, *args: object) -> None:
        try:
            getattr(handler, method)(*args)
        except Exception:
            log.exception("%s: handler %r failed in %s", self.name, handler, method)


@dataclass(frozen=True)
class InformerHealth:
    """``last_success``: clock time of the last successful list, watch start
    or watch event (None before the first); ``watching``: a watch is open."""

    synced: bool
    watching: bool
    last_success: float | None


class Informer:
    """Keeps ``store`` equal to one collection and tells handlers about changes.

    See the module docstring for the handler and ``transform`` contracts.
    ``start()`` may be called once; ``stop()`` ends the thread (handlers are
    not called after ``stop()`` returns, except by a resync already running).
    """

    def __init__(self, source: Source, resource: Resource, *, namespace: str | None = None,
                 indexers: Mapping[str, IndexFunc] | None = None,
                 resync_period: float | None = None, clock: Clock = REAL_CLOCK,
                 options: ReflectorOptions | None = None, transform: Transform | None = None) -> None:
        self.resource = resource
        self.namespace = namespace
        self.store = Store(indexers)
        self._clock = clock
        self._resync_period = resync_period
        self._dispatcher = _Dispatcher(self.store, str(resource), transform)
        self._reflector = Reflector(source, resource, self._dispatcher, namespace=namespace,
                                    clock=clock, options=options)
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def reflector(self) -> Reflector:
        return self._reflector

    def add_handler(self, handler: EventHandler) -> None:
        """Register a handler. Added after start, it first gets ``on_add`` for
        every object already in the store, then events as usual."""
        self._dispatcher.add_handler(handler)

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        self.store.add_indexers(indexers)

    def has_synced(self) -> bool:
        """True once the first full list is in the store and handlers have seen it."""
        return self._reflector.has_synced()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._reflector.wait_for_sync(timeout)

    def health(self) -> InformerHealth:
        return InformerHealth(self.has_synced(), self._reflector.watching, self._reflector.last_success)

    @property
    def started(self) -> bool:
        return bool(self._threads)

    def start(self) -> None:
        if self._threads:
            raise RuntimeError(f"informer for {self.resource} already started")
        name = f"informer-{self.resource}"
        self._threads.append(threading.Thread(target=self._reflector.run, name=name, daemon=True))
        if self._resync_period:
            self._threads.append(threading.Thread(target=self._resync_loop, name=f"{name}-resync",
                                                  daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopped.set()
        self._reflector.stop()
        for thread in self._threads:
            thread.join(timeout)

    def _resync_loop(self) -> None:
        while not self._clock.wait(self._stopped, self._resync_period):
            if self.has_synced():
                self._dispatcher.resync()


class InformerFactory:
    """One informer per resource for this process, all fed from ``source``.

    ``informer(resource)`` returns the same object every time for the same
    resource; index functions asked for by different callers are merged.
    Informers requested after ``start()`` are started at once. ``transform``
    (None: keep objects whole) is given to every informer, so it must suit
    every caller of ``informer()`` (see the module docstring).
    """

    def __init__(self, source: Source, namespace: str | None = None,
                 resync_period: float | None = None, clock: Clock = REAL_CLOCK,
                 options: ReflectorOptions | None = None, transform: Transform | None = None) -> None:
        self.source = source
        self.namespace = namespace
        self._resync_period = resync_period
        self._clock = clock
        self._options = options
        self._transform = transform
        self._lock = threading.Lock()
        self._informers: dict[Resource, Informer] = {}
        self._started = False

    def informer(self, resource: Resource, indexers: Mapping[str, IndexFunc] | None = None) -> Informer:
        with self._lock:
            informer = self._informers.get(resource)
            if informer is None:
                # Cluster-scoped resources are listed cluster-wide whatever the namespace.
                namespace = self.namespace if resource.namespaced else None
                informer = Informer(self.source, resource, namespace=namespace, indexers=indexers,
                                    resync_period=self._resync_period, clock=self._clock,
                                    options=self._options, transform=self._transform)
                self._informers[resource] = informer
                if self._started:
                    informer.start()
            elif indexers:
                informer.add_indexers(indexers)
            return informer

    def start(self) -> None:
        with self._lock:
            self._started = True
            for informer in self._informers.values():
                if not informer.started:
                    informer.start()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """True when every informer has synced, False if ``timeout`` (seconds, shared) ran out."""
        # Real time, like threading.Event.wait underneath.
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            informers = list(self._informers.values())
        for informer in informers:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not informer.wait_for_sync(remaining):
                return False
        return True

    def has_synced(self) -> bool:
        with self._lock:
            return all(informer.has_synced() for informer in self._informers.values())

    def health(self) -> dict[Resource, InformerHealth]:
        with self._lock:
            return {resource: informer.health() for resource, informer in self._informers.items()}

    def stop(self) -> None:
        with self._lock:
            informers = list(self._informers.values())
            self._started = False
        for informer in informers:
            informer.stop()
