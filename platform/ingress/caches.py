"""The caches of the ingress controller's pure steps, owned by one object.

A sync after one new Ingress translates and encodes 10,000 unchanged ones
again; these caches make that cost a lookup per unchanged object. They are
all fields of one ``Caches``, made by whoever owns a stream of
configurations (the data plane makes one, or is given one, and ``main``
hands the same object to the controller) and passed in explicitly: ``translate.build(snapshot, options, caches)`` and
``DataPlane(..., caches=caches)`` (which hands it to
``render.dynamic_sections``). Nothing else shares it: the admission webhook
translates without one (fresh each review), so reviews never change what
the controller's next build reuses.

Contract (what makes a hit correct):

* Keys name their inputs by identity (``id``) plus plain values; every entry
  keeps the objects its key names alive (``pins``), so an id cannot be
  reused while the entry exists.
* Inputs are never modified: store objects are replaced, not changed, and
  model objects are frozen. ``tests/ingress/test_caches.py`` checks this
  with a mutation detector (a deep copy of every input compared after use).
* Results are pure functions of their keys, so a build with a warm cache
  equals a fresh one (a generated-change test compares the two).
* Bound: each ``Generations`` keeps two generations; an entry survives while
  it is used at least once every other ``limit`` misses, so memory follows
  what the last few configurations used.
* Threads: the controller's syncs (full and endpoint-only) use
  ``translation``; the data plane's applier uses the other fields
  (``RouteTable`` locks itself). ``Generations`` is unlocked: a race only
  computes a result twice or drops an entry, never returns a wrong one.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from platformd.ingress.lanes import LaneIndex
from platformd.ingress.routes import RouteTable

__all__ = ["Caches", "Generations"]

T = TypeVar("T")


class Generations:
    """Results by key, in two generations (see the module docstring)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._young: dict[Any, tuple[object, object]] = {}
        self._old: dict[Any, tuple[object, object]] = {}

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def get(self, key: Any, pins: object, make: Callable[[], T]) -> T:
        """The result for ``key``, made by ``make`` on a miss; ``pins`` keeps the key's objects alive."""
        hit = self._young.get(key)
        if hit is None:
            hit = self._old.pop(key, None) or (pins, make())
            self._young[key] = hit
            if len(self._young) > self.limit:
                self._old, self._young = self._young, {}
        return hit[1]  # type: ignore[return-value]

    def peek(self, key: Any) -> object | None:
        """The entry for ``key`` (kept, as by ``get``), or None."""
        hit = self._young.get(key)
        if hit is None:
            hit = self._old.pop(key, None)
            if hit is None:
                return None
            self._young[key] = hit
        return hit[1]

    def put(self, key: Any, pins: object, value: object) -> None:
        self._young[key] = (pins, value)
        if len(self._young) > self.limit:
            self._old, self._young = self._young, {}


def _no_section() -> None:
    return None


@dataclass(eq=False)
class Caches:
    """Every cache of one configuration stream (see the module docstring).

    ``translation``: translate's pure steps (an Ingress parsed on its own, a
    Service's endpoints, a backend, a location, a server, a host's whole
    step), keyed by the ids of their inputs. ``encodings``: a Backend's JSON
    and digest, keyed by the Backend's id. ``routes``: the route table's
    host entries and shards (``routes.RouteTable``). ``route_sections``:
    the encoded route sections of the last render, by payload id.
    ``last_backends``: a weak reference to the last backends section, a hint
    for an identity scan (results never depend on it). ``lanes``: the lanes
    each Server needs (``lanes.LaneIndex``; the applier's).
    """

    translation: Generations = field(default_factory=lambda: Generations(1 << 17))
    encodings: Generations = field(default_factory=lambda: Generations(4096))
    routes: RouteTable = field(default_factory=RouteTable)
    route_sections: dict[int, tuple[object, Any]] = field(default_factory=dict)
    last_backends: Callable[[], Any] = field(default=_no_section)
    lanes: LaneIndex = field(default_factory=LaneIndex)

    def remember_backends(self, section: object) -> None:
        self.last_backends = weakref.ref(section)
