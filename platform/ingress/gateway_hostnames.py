"""Gateway API hostname rules: wildcard matching, listener/route intersection
and the order of hostnames by specificity.

A wildcard ``*.example.com`` matches one or more labels in front of
``example.com`` (``a.example.com``, ``a.b.example.com``) but not
``example.com`` itself. ``None`` (or "*") stands for "any hostname".
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["ANY", "intersect", "isolated", "matches", "specificity"]

ANY = "*"


def _is_wildcard(name: str) -> bool:
    return name.startswith("*.")


def matches(pattern: str | None, host: str) -> bool:
    """Whether the exact ``host`` is covered by ``pattern`` (exact, wildcard or any)."""
    if pattern is None or pattern == ANY:
        return True
    if _is_wildcard(pattern):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def _covers(wide: str, narrow: str) -> bool:
    """Whether every host ``narrow`` (exact or wildcard) matches is matched by ``wide``."""
    if wide == ANY:
        return True
    if _is_wildcard(narrow):
        return _is_wildcard(wide) and narrow[1:].endswith(wide[1:])
    return matches(wide, narrow)


def intersect(listener: str | None, route_hostnames: tuple[str, ...]) -> tuple[str, ...]:
    """The hostnames a route serves on a listener, sorted; () when none match.

    A route without hostnames takes the listener's (or "*"); a route hostname
    that is narrower than the listener's is kept, a wider one narrows to the
    listener's (``*.com`` on a ``*.example.com`` listener serves
    ``*.example.com``).
    """
    listener = listener or ANY
    if not route_hostnames:
        return (listener,)
    found = set()
    for name in route_hostnames:
        if _covers(listener, name):
            found.add(name)
        elif _covers(name, listener):
            found.add(listener)
    return tuple(sorted(found))


def isolated(listener: str | None, names: tuple[str, ...], siblings: Iterable[str | None]) -> tuple[str, ...]:
    """Of ``names`` (a route's hostnames on a listener of hostname
    ``listener``), those the listener really handles: a request goes to the
    most specific listener of the Gateway's port that matches its host
    (listener isolation), so a name that a narrower sibling listener covers
    whole is that sibling's (``bar.example.com`` of a route on the listener
    without hostname belongs to a ``*.example.com`` sibling, and a route
    there gets none of its requests)."""
    listener = listener or ANY
    narrower = [s for s in (s or ANY for s in siblings) if s != listener and _covers(listener, s)]
    if not narrower:
        return names
    return tuple(n for n in names if not any(_covers(s, n) for s in narrower))


def specificity(hostname: str) -> tuple[int, int]:
    """A sort key putting more specific hostnames first: exact names, then
    wildcards by length (longest first), then "*"."""
    if hostname == ANY:
        return (2, 0)
    return (1 if _is_wildcard(hostname) else 0, -len(hostname))
