"""A thread-safe object cache keyed by ``namespace/name``, with named indexes.

The store keeps objects by key and nothing else: it neither talks to the API
nor notifies anyone. A reflector keeps it in step with a source; readers call
``get``, ``list`` and ``by_index`` from any thread.

Ownership contract: objects handed to ``add``/``update``/``replace`` become the
store's, and everything returned by ``get``, ``list`` or ``by_index`` is shared
with the store and with every other reader. **Callers must not modify
anything they get from a store**; copy first (``copy.deepcopy``) if you need a
changed version. We do not copy on the way in or out because copying ten
thousand objects on every relist or read would cost more than the whole sync.

An index is a function from an object to the list of values it should be found
under (for example an EndpointSlice to ``["ns/service-name"]``). Index values
are recomputed whenever an object is added, updated or deleted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping

log = logging.getLogger(__name__)

IndexFunc = Callable[[dict], list[str]]

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def key_of(obj: Mapping) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects (no namespace).

    The one key of an object in the project: stores, informers, the
    controllers' handlers, the ingress snapshot, the node proxy's change
    tracker, the file source. An object without ``metadata.name`` has no key
    and raises ``ValueError``: every source rejects such objects before they
    reach a store (the API server never sends one), so meeting one is a bug,
    never a reason to make up a key like "" or "None" that would collide.
    """
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ValueError(f"object without metadata.name has no key: {str(obj)[:120]}")
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def split_key(key: str) -> tuple[str | None, str]:
    """Inverse of ``key_of``: ``(namespace or None, name)``."""
    namespace, sep, name = key.partition("/")
    return (namespace, name) if sep else (None, key)


# ---------------------------------------------------------------- index functions


def index_endpointslice_by_service(obj: Mapping) -> list[str]:
    """``ns/service`` from the ``kubernetes.io/service-name`` label."""
    meta = obj.get("metadata") or {}
    service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    return [f"{meta.get('namespace', '')}/{service}"] if service else []


def _ingress_backends(spec: Mapping) -> Iterable[Mapping]:
    default = spec.get("defaultBackend")
    if default:
        yield default
    for rule in spec.get("rules") or ():
        for path in ((rule or {}).get("http") or {}).get("paths") or ():
            backend = (path or {}).get("backend")
            if backend:
                yield backend


def index_ingress_by_service(obj: Mapping) -> list[str]:
    """``ns/service`` for every Service an Ingress routes to (default backend and rules)."""
    namespace = (obj.get("metadata") or {}).get("namespace", "")
    names = {
        ((backend.get("service") or {}).get("name"))
        for backend in _ingress_backends(obj.get("spec") or {})
    }
    return sorted(f"{namespace}/{name}" for name in names if name)


def index_ingress_by_secret(obj: Mapping) -> list[str]:
    """``ns/secret`` for every TLS secret an Ingress names in ``spec.tls``.

    Secrets named in annotations belong to the ingress translation, which can
    add its own index function for them.
    """
    namespace = (obj.get("metadata") or {}).get("namespace", "")
    names = {(tls or {}).get("secretName") for tls in (obj.get("spec") or {}).get("tls") or ()}
    return sorted(f"{namespace}/{name}" for name in names if name)


# ---------------------------------------------------------------- the store


class Store:
    """Objects by key plus named indexes; every method is thread-safe.

    Invariant: for every index ``n`` and value ``v``, ``_indices[n][v]``
    holds exactly the keys whose object's index function returned ``v``: the
    key itself when there is one, a set of two or more otherwise. Values
    without keys are removed, so ``_indices[n]`` only holds values in use.
    (Most index values name one object: a Service's EndpointSlice, the
    Ingress routing to a Service. An empty set is 216 bytes, a bare key
    nothing, which is 8 MB across the indexes of 10,000 Ingresses.)
    """

    def __init__(self, indexers: Mapping[str, IndexFunc] | None = None) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, dict] = {}
        self._indexers: dict[str, IndexFunc] = dict(indexers or {})
        self._indices: dict[str, dict[str, _Keys]] = {name: {} for name in self._indexers}

    # ---- reading

    def get(self, key: str) -> dict | None:
        with self._lock:
            return self._items.get(key)

    def list(self) -> list[dict]:
        with self._lock:
            return list(self._items.values())

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._items)

    def items(self) -> list[tuple[str, dict]]:
        with self._lock:
            return list(self._items.items())

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def index_keys(self, index_name: str, value: str) -> list[str]:
        """Keys of the objects found under ``value`` in the named index (sorted)."""
        with self._lock:
            return sorted(_members(self._index(index_name).get(value)))

    def by_index(self, index_name: str, value: str) -> list[dict]:
        """Objects found under ``value`` in the named index, in key order.

        Raises KeyError for an index this store does not have.
        """
        with self._lock:
            keys = sorted(_members(self._index(index_name).get(value)))
            return [self._items[key] for key in keys]

    def index_names(self) -> list[str]:
        with self._lock:
            return list(self._indexers)

    # ---- writing (the reflector's side)

    def add(self, obj: dict) -> dict | None:
        """Insert or replace the object under its key; returns the previous one."""
        key = key_of(obj)
        values = self._index_values(obj)
        with self._lock:
            old = self._items.get(key)
            if old is not None:
                self._unindex(key, old)
            self._items[key] = obj
            self._put_index(key, values)
            return old

    update = add

    def delete(self, obj: Mapping) -> dict | None:
        """Remove the object with this object's key; returns the removed one or None."""
        return self.delete_key(key_of(obj))

    def delete_key(self, key: str) -> dict | None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._unindex(key, old)
            return old

    def replace(self, objects: Iterable[dict]) -> dict[str, dict]:
        """Make the store hold exactly ``objects`` (after a relist).

        Returns the previous contents as a ``key -> object`` dict so the caller
        can work out what was added, changed and removed. Indexes are built
        before taking the lock, so readers wait only for the swap.
        """
        items = {key_of(obj): obj for obj in objects}
        with self._lock:
            indexers = dict(self._indexers)
        indices = self._build_indices(items, indexers)
        with self._lock:
            if indexers != self._indexers:  # an index was added meanwhile (rare): redo under the lock
                indices = self._build_indices(items, self._indexers)
            old, self._items, self._indices = self._items, items, indices
            return old

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Add indexes (also after objects are stored: existing objects get indexed).

        Adding an index name that exists with a different function is an
        error; re-adding the same function is a no-op.
        """
        with self._lock:
            for name, fn in indexers.items():
                existing = self._indexers.get(name)
                if existing is not None and existing is not fn:
                    raise ValueError(f"index {name!r} already exists with a different function")
            new = {name: fn for name, fn in indexers.items() if name not in self._indexers}
            if not new:
                return
            self._indexers.update(new)
            self._indices.update(self._build_indices(self._items, new))

    # ---- internals (callers hold the lock unless said otherwise)

    def _index(self, index_name: str) -> dict[str, _Keys]:
        try:
            return self._indices[index_name]
        except KeyError:
            raise KeyError(f"store has no index {index_name!r}") from None

    @staticmethod
    def _safe_index(name: str, fn: IndexFunc, obj: dict) -> list[str]:
        # A bug in one index function must not stop the reflector: the object
        # is stored, only missing from that index, and the error is logged.
        try:
            return fn(obj)
        except Exception:
            log.exception("index function %r failed for %s; object left out of that index",
                          name, (obj.get("metadata") or {}).get("name"))
            return []

    def _index_values(self, obj: dict) -> dict[str, list[str]]:
        # Computed outside the lock; indexers only ever grow, and one added
        # between here and the lock is filled in by _put_index.
        indexers = self._indexers.copy()
        return {name: self._safe_index(name, fn, obj) for name, fn in indexers.items()}

    def _build_indices(self, items: Mapping[str, dict],
                       indexers: Mapping[str, IndexFunc]) -> dict[str, dict[str, _Keys]]:
        indices: dict[str, dict[str, _Keys]] = {name: {} for name in indexers}
        for key, obj in items.items():
            for name, fn in indexers.items():
                for value in self._safe_index(name, fn, obj):
                    _add_key(indices[name], value, key)
        return indices

    def _put_index(self, key: str, values: dict[str, list[str]]) -> None:
        for name, fn in self._indexers.items():
            index = self._indices[name]
            index_values = values[name] if name in values else self._safe_index(name, fn, self._items[key])
            for value in index_values:
                _add_key(index, value, key)

    def _unindex(self, key: str, obj: dict) -> None:
        for name, fn in self._indexers.items():
            index = self._indices[name]
            for value in self._safe_index(name, fn, obj):
                _remove_key(index, value, key)


# ---------------------------------------------------------------- index buckets

_Keys = str | set[str]  # one key, or a set of two or more (see Store's invariant)


def _members(keys: _Keys | None) -> Iterable[str]:
    if keys is None:
        return ()
    return (keys,) if type(keys) is str else keys


def _add_key(index: dict[str, _Keys], value: str, key: str) -> None:
    keys = index.get(value)
    if keys is None:
        index[value] = key
    elif type(keys) is str:
        if keys != key:
            index[value] = {keys, key}
    else:
        keys.add(key)


def _remove_key(index: dict[str, _Keys], value: str, key: str) -> None:
    keys = index.get(value)
    if keys is None:
        return
    if type(keys) is str:
        if keys == key:
            del index[value]
        return
    keys.discard(key)
    if len(keys) == 1:
        (index[value],) = keys  # back to a bare key
