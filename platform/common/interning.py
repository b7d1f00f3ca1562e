"""Interning the strings of decoded JSON, for objects kept for the life of the process.

Informers keep every object they are given. ``json.loads`` makes a new
string for every value and shares keys only within one call, so 50,000
small objects hold the same namespaces, kinds, label keys and "TCP" tens of
thousands of times. Interned (``sys.intern``) each is held once: 117 MB of
list pages become about 100 MB (see apisource). Both sources that decode
JSON (the API server's list pages and watch events, JSON manifests in a
folder) use these.

Values under ``UNIQUE_KEYS`` are left alone: every object has its own
``uid`` and ``resourceVersion``, so interning them shares nothing and only
grows the interpreter's table of interned strings (16 bytes an entry, and
the table doubles). At 10,000 Ingresses (50,000 objects, 210,000 distinct
strings of which 100,000 are uids and resourceVersions) that table was one
7.3 MiB block; without them it is 3.7 MiB (bench_ingress,
``BENCH_TRACEMALLOC``).
"""

from __future__ import annotations

import json
import sys

__all__ = ["loads", "interned", "share", "SHARED_KEYS", "UNIQUE_KEYS"]

_intern = sys.intern


#: Keys whose dict/list values repeat across objects (EndpointSlice ports
#: and conditions, Service ports and ipFamilies, status with loadBalancer,
#: backend ports): equal values under them are one shared object. Objects
#: from a source are read-only (informer contract; ``caches`` keys name
#: top-level objects, never these), so sharing is invisible to readers.
SHARED_KEYS = frozenset({"conditions", "ports", "port", "status", "loadBalancer", "ipFamilies"})
#: Keys whose string values are unique per object: never interned (see above).
UNIQUE_KEYS = frozenset({"uid", "resourceVersion"})
_SHARED_LIMIT = 50_000  # distinct values kept for sharing (a bound for clusters where they do not repeat)
_shared: dict = {}


def _frozen(value):
    kind = type(value)
    if kind is str:
        return value
    if kind is dict:
        return (dict, tuple([(k, _frozen(v)) for k, v in value.items()]))
    if kind is list:
        return (list, tuple([_frozen(v) for v in value]))
    return (kind, value)  # True, 1 and 1.0 are equal: the type tells them apart


def _share(value):
    """The one kept object equal to ``value`` (a dict or list of decoded JSON), or ``value``."""
    try:
        key = _frozen(value)
        hit = _shared.get(key)
    except TypeError:
        return value
    if hit is not None:
        return hit
    if len(_shared) < _SHARED_LIMIT:
        _shared[key] = value
    return value


share = _share


def loads(data: str | bytes):
    """``json.loads``, with every string value interned (but those under
    ``UNIQUE_KEYS``) and equal values under ``SHARED_KEYS`` shared; keys are
    shared within the call by the decoder itself.

    Done as the decoder goes (its ``object_hook`` sees each object once its
    members are decoded), not over the whole document afterwards: the
    decoder makes a new string for every value, and interning afterwards
    frees most of them at once, hundreds of thousands of small holes across
    the heap that the allocator keeps. Freed per object, the next object
    reuses the memory. Measured on bench_ingress's 50,000 objects as one
    list (0.35 s either way): the process grew by 144 MB interning after
    decoding, by 99 MB interning during it.
    """
    doc = json.loads(data, object_hook=_interned_members)
    if type(doc) is list:
        _intern_list(doc)
    return doc


def _interned_members(obj: dict) -> dict:
    """``object_hook`` of ``loads``: ``obj``'s members (objects among them are done already)."""
    for at, item in obj.items():
        kind = type(item)
        if kind is str:
            if at not in UNIQUE_KEYS:
                obj[at] = _intern(item)  # replaces a value, never adds a key: safe while iterating
        elif kind is list:
            _intern_list(item)
            if at in SHARED_KEYS:
                obj[at] = _share(item)
        elif kind is dict and at in SHARED_KEYS:
            obj[at] = _share(item)
    return obj


def _intern_list(items: list) -> None:
    """Strings in ``items`` and its nested lists (its objects went through the hook)."""
    for at, item in enumerate(items):
        kind = type(item)
        if kind is str:
            items[at] = _intern(item)
        elif kind is list:
            _intern_list(item)


def interned(value):
    """A copy of decoded JSON with every key and string value (but those
    under ``UNIQUE_KEYS``) interned and equal values under ``SHARED_KEYS``
    shared (about 20 µs per object: for documents decoded one by one, whose
    keys no call shares)."""
    kind = type(value)
    if kind is str:
        return _intern(value)
    if kind is dict:
        out = {}
        for k, v in value.items():
            if type(v) is str:
                if k not in UNIQUE_KEYS:
                    v = _intern(v)
            else:
                v = interned(v)
                if k in SHARED_KEYS and type(v) in (dict, list):
                    v = _share(v)
            out[_intern(k)] = v
        return out
    if kind is list:
        return [interned(v) for v in value]
    return value
