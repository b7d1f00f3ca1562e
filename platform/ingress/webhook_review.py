"""What the controller would report for one Ingress, answered before it is stored.

The webhook does not have rules of its own: ``IngressReviewer`` runs the
controller's translation (``translate.build``) on the *neighbourhood* of
the reviewed Ingress, once as the cluster is and once as it would be after
the request, and reports what differs:

* the reviewed Ingress's own problems after the change: the ones in
  ``ERROR_REASONS`` deny the request (something it asks for would be
  dropped: a refused annotation, an invalid host or path, a host+path, TLS
  host or alias another Ingress already holds); the others are warnings
  (the controller serves it and warns: an ignored annotation, a Service
  that does not exist yet, a canary without its primary yet). An error the
  old object of an UPDATE already had is only a warning, so metadata edits
  (finalizers on the way out, labels) of an Ingress that has a problem are
  not blocked;
* new problems of *other* Ingresses (an older Ingress taking back a path a
  newer one served, a canary losing its primary on DELETE): warnings,
  naming the Ingress that loses something.

The neighbourhood is the Ingresses that share a host (rule host, TLS host,
``server-alias``, or the wildcard covering a host) or a Service with the
old or new object, found through two indexes on the shared Ingress
informer (``index_ingress_by_host``, ``index_ingress_by_service``), kept up
to date by the informer itself. A review therefore costs two translations
of a few Ingresses, whatever the number in the cluster; it never renders
nginx configuration and never runs nginx (ingress-nginx's webhook did
both: CVE-2025-1974). What the neighbourhood leaves out can only matter at
second hand (a neighbour's own path lost to a third Ingress changes which
of them registered a shared backend first), so ``BackendSettingsConflict``
may in rare cases differ from the full translation; path, TLS, alias and
annotation errors are exactly the controller's.

Until the informers have synced, reviews are answered from the object alone,
with a warning that conflicts were not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from platformd.common.store import index_ingress_by_service
from platformd.ingress import annotations as ann_mod
from platformd.ingress.snapshot import Snapshot, key_of
from platformd.ingress.translate import Problem, TranslateOptions, build
from platformd.ingress.webhook_admission import AdmissionRequest, Verdict

__all__ = ["ERROR_REASONS", "HOST_INDEX", "SERVICE_INDEX", "IngressReviewer", "Reviewer", "index_ingress_by_host"]

#: Problems that drop something the Ingress asks for, and that only
#: changing this Ingress (or another one that holds what it wants) fixes.
#: Everything else the controller reports is served anyway (and may fix
#: itself when the missing Service or Secret appears): a warning.
ERROR_REASONS = frozenset({
    "InvalidAnnotation", "InvalidHost", "InvalidPath", "InvalidBackend", "ResourceBackendUnsupported",
    "PathConflict", "TLSConflict", "ServerAliasConflict", "AppRootConflict", "BackendSettingsConflict",
    "CanaryConflict", "CanarySameBackend",
})

HOST_INDEX = "webhook-host"
SERVICE_INDEX = "webhook-service"
NOT_SYNCED = ("the controller's caches have not synced yet: conflicts with other Ingresses were not checked")


def index_ingress_by_host(obj: Mapping) -> list[str]:
    """Every host name an Ingress claims: rule hosts ("" for rules without
    one), TLS hosts and ``server-alias`` names, lower-cased, unvalidated
    (an invalid one only finds nothing)."""
    spec = obj.get("spec") or {}
    names: set[str] = set()
    for rule in spec.get("rules") or ():
        host = (rule or {}).get("host") if isinstance(rule, Mapping) else None
        names.add(host.lower() if isinstance(host, str) else "")
    for entry in spec.get("tls") or ():
        for host in ((entry or {}).get("hosts") or ()) if isinstance(entry, Mapping) else ():
            if isinstance(host, str):
                names.add(host.lower())
    aliases = ((obj.get("metadata") or {}).get("annotations") or {}).get(ann_mod.PREFIX + "server-alias")
    if isinstance(aliases, str):
        names.update(part.strip().lower() for part in aliases.split(",") if part.strip())
    return sorted(names)


INDEXERS = {HOST_INDEX: index_ingress_by_host, SERVICE_INDEX: index_ingress_by_service}


class Reviewer(Protocol):
    """Reviews one kind of object (the server picks one by group and kind)."""

    def review(self, request: AdmissionRequest) -> Verdict: ...


class IngressStore(Protocol):
    """The shared Ingress store, with ``INDEXERS`` added."""

    def get(self, key: str) -> dict | None: ...

    def index_keys(self, index_name: str, value: str) -> list[str]: ...


class IngressReviewer:
    """Reviews Ingresses (see module docstring).

    ``store``: the Ingress informer's store with ``INDEXERS``;
    ``snapshot_of(ingresses)``: a ``Snapshot`` of those Ingresses with the
    Services, slices, Secrets, classes and ConfigMap they need (the
    controller's partial snapshot); ``synced()``: whether the stores hold
    the cluster yet. Safe to call from several threads at once: it only
    reads the stores and runs pure functions.
    """

    def __init__(self, store: IngressStore, snapshot_of: Callable[[Iterable[dict]], Snapshot],
                 options: TranslateOptions, synced: Callable[[], bool]) -> None:
        self._store = store
        self._snapshot_of = snapshot_of
        self._options = options
        self._synced = synced

    def review(self, request: AdmissionRequest) -> Verdict:
        new = _with_namespace(request.object, request.namespace) if request.operation != "DELETE" else None
        old = _with_namespace(request.old_object, request.namespace) if request.operation != "CREATE" else None
        if request.operation == "CONNECT" or (new is None and old is None):
            return Verdict()
        if new is not None and (new.get("metadata") or {}).get("deletionTimestamp"):
            return Verdict()  # on its way out: only finalizers change, the controller already stopped serving it
        key = key_of(new if new is not None else old)
        if old is None and request.operation == "DELETE":
            old = self._store.get(key)  # API servers before 1.16 send no oldObject
        synced = self._synced()
        neighbours = self._neighbours(key, (new, old)) if synced else []
        before = self._problems(neighbours, old)
        after = self._problems(neighbours, new)
        errors, warnings = [], []
        had = {(p.reason, p.message) for p in before.get(key, ())}
        for problem in after.get(key, ()):
            if problem.reason in ERROR_REASONS and (problem.reason, problem.message) not in had:
                errors.append(problem.message)
            elif problem.reason in ERROR_REASONS:
                warnings.append(f"{problem.message} (already so before this change)")
            else:
                warnings.append(problem.message)
        for other, problems in sorted(after.items()):
            if other == key:
                continue
            known = set(before.get(other, ()))
            warnings += [f"Ingress {other}: {p.message}" for p in problems if p not in known]
        if not synced and new is not None:
            warnings.append(NOT_SYNCED)
        return Verdict(tuple(errors), tuple(warnings))

    def _neighbours(self, key: str, objects: Iterable[dict | None]) -> list[dict]:
        """Stored Ingresses (not ``key`` itself) sharing a host or a Service with ``objects``."""
        keys: set[str] = set()
        for obj in objects:
            if obj is None:
                continue
            for host in index_ingress_by_host(obj):
                keys.update(self._store.index_keys(HOST_INDEX, host))
                first, dot, rest = host.partition(".")
                if dot and first != "*":
                    keys.update(self._store.index_keys(HOST_INDEX, "*." + rest))
            for service in index_ingress_by_service(obj):
                keys.update(self._store.index_keys(SERVICE_INDEX, service))
        keys.discard(key)
        found = (self._store.get(k) for k in sorted(keys))
        return [obj for obj in found if obj is not None]

    def _problems(self, neighbours: list[dict], obj: dict | None) -> dict[str, list[Problem]]:
        """Problems of each Ingress of ``neighbours`` + ``obj``, by ``ns/name``."""
        ingresses = neighbours if obj is None else [*neighbours, obj]
        if not ingresses:
            return {}
        # No caches.Caches: the controller's has one owner, and a neighbourhood is small.
        translation = build(self._snapshot_of(ingresses), self._options)
        by_key: dict[str, list[Problem]] = {}
        for problem in translation.problems:
            if problem.kind == "Ingress":
                by_key.setdefault(f"{problem.namespace}/{problem.name}", []).append(problem)
        return by_key


def _with_namespace(obj: dict | None, namespace: str) -> dict | None:
    """``obj`` with ``metadata.namespace`` (a create may leave it to the URL)."""
    if obj is None:
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return {**obj, "metadata": {"namespace": namespace}}
    if meta.get("namespace") or not namespace:
        return obj
    return {**obj, "metadata": {**meta, "namespace": namespace}}
