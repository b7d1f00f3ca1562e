"""Interning the strings of decoded JSON, for objects kept for the life of the process.

Informers keep every object they are given. ``json.loads`` makes a new
string for every value and shares keys only within one call, so 50,000
small objects hold the same namespaces, kinds, label keys and "TCP" tens of
thousands of times. Interned (``sys.intern``) each is held once: 117 MB of
list pages become about 100 MB (see apisource). Both sources that decode
JSON (the API server's list pages and watch events, JSON manifests in a
folder) use these.
"""

from __future__ import annotations

import sys

__all__ = ["intern_values", "interned"]

_intern = sys.intern


def intern_values(value: dict | list) -> None:
    """Intern, in place, every string value in decoded JSON (keys are left:
    one ``json.loads`` call already shares them). About 4 µs per object."""
    pairs = value.items() if type(value) is dict else enumerate(value)
    for at, item in pairs:
        kind = type(item)
        if kind is str:
            value[at] = _intern(item)  # replaces a value, never adds a key: safe while iterating
        elif kind is dict or kind is list:
            intern_values(item)


def interned(value):
    """A copy of decoded JSON with every key and string value interned (about
    20 µs per object: for documents decoded one by one, whose keys no call shares)."""
    kind = type(value)
    if kind is str:
        return _intern(value)
    if kind is dict:
        return {_intern(k): interned(v) for k, v in value.items()}
    if kind is list:
        return [interned(v) for v in value]
    return value
