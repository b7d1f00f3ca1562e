"""Translation of what changed: the route-change path of the Gateway API loop.

A change of one HTTPRoute changes the entries of a few hosts. A full
``gateway_translate.build`` + ``gateway_lowering.lower`` still walks all
10,000 routes and hosts to find that out (about 0.2 s at 10,000, most of a
route change's latency, with every per-route cache hit). As the Ingress side
does (``incremental``), the Gateway loop instead:

1. records what changed (``Changes``): each changed route's (kind, key), each
   changed Service, each Service whose EndpointSlices changed; anything else
   (a GatewayClass, Gateway, ReferenceGrant, Namespace or Secret, the options)
   is ``everything``;
2. translates again just the changed routes and those whose last translation
   looked up a changed Service (``RouteCache.readers``), and takes their old
   entries out of the kept table and puts the new ones in
   (``gateway_translate.update``): the hosts whose entries changed come out;
3. lowers again just the host names of those hosts and resolves again the
   Backends of the changed Services (``gateway_lowering.relower``).

Both steps answer None where the change reaches beyond what they replace (a
host on a pool address or a mapped port, or the listener without hostname,
whose tables are shared across names; no kept build to start from): the
caller then translates or lowers in full, with the same caches. A route's
translation depends on nothing but the route, the Gateway states, the
Namespaces, the ReferenceGrants and the Services it looks up, and a host's
entries are ordered by precedence keys alone, so what is not named keeps its
result. A sync with nothing recorded (the first, the periodic resync, a
retry) is a full build, which repairs whatever a missed event left.
``tests/ingress/test_gateway_incremental.py`` checks ``apply`` against a fresh
full build and lowering over random change sequences.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from platformd.ingress.gateway_input import GatewayOptions
from platformd.ingress.gateway_lowering import Lowered, LoweringCache, lower, relower
from platformd.ingress.gateway_translate import GatewayTranslation, RouteCache, update

__all__ = ["Changes", "apply", "retranslated"]


@dataclass
class Changes:
    """What changed since the last sync (the controller's handlers fill it).
    Not thread-safe: the owner locks it."""

    routes: set[tuple[str, str]] = field(default_factory=set)  # (kind, "ns/name")
    services: set[str] = field(default_factory=set)  # "ns/name" of changed Services
    slices: set[str] = field(default_factory=set)  # Services whose EndpointSlices changed
    everything: bool = False

    def __bool__(self) -> bool:
        return bool(self.everything or self.routes or self.services or self.slices)


@dataclass(frozen=True)
class Sources:
    """Where ``apply`` reads the current objects: ``route(kind, key)`` (None:
    deleted), ``services`` (``get(key)``), ``slices(service key)``,
    ``secrets``; ``now``: wall-clock seconds."""

    route: Callable[[str, str], Mapping | None]
    services: Mapping[str, dict]
    slices: Callable[[str], tuple[dict, ...]]
    secrets: Mapping[str, dict]
    now: float


def retranslated(changes: Changes, routes_cache: RouteCache) -> set[tuple[str, str]]:
    """The routes ((kind, key)) ``apply`` translates again for ``changes``
    (not ``everything``): the changed ones and the readers of the changed
    Services. Only their statuses can differ (the status writer looks at
    them alone). Ask before ``apply``: it records the readers anew."""
    names = set(changes.routes)
    for service in changes.services:
        names |= routes_cache.readers(service)
    return names


def apply(translation: GatewayTranslation, lowered: Lowered | None, changes: Changes, options: GatewayOptions,
          sources: Sources, routes_cache: RouteCache,
          servers_cache: LoweringCache) -> tuple[GatewayTranslation, Lowered | None] | None:
    """The translation and lowering (None: not lowered, no data plane) of the
    last sync with ``changes`` applied; the very same pair when they change
    nothing; None when the translation cannot be updated (build in full).
    The lowering falls back to a full ``lower`` with ``servers_cache`` when
    ``relower`` cannot splice."""
    if changes.everything:
        return None
    names = retranslated(changes, routes_cache)
    touched = changes.services | changes.slices
    if not names and not (lowered is not None and any(servers_cache.uses(s) for s in touched)):
        return translation, lowered
    hosts = {}
    if names:  # else only Backends change (endpoints): the translation stays the very same
        updated = update(translation, {name: sources.route(*name) for name in names}, sources.services, routes_cache)
        if updated is None:
            return None
        translation, hosts = updated
    if lowered is None:
        return translation, None
    ports = dict(http_port=options.http_port, https_port=options.https_port, services=sources.services,
                 slices=sources.slices, secrets=sources.secrets, now=sources.now, cache=servers_cache)
    again = relower(lowered, translation.table, hosts, touched, **ports)
    return translation, again if again is not None else lower(translation.table, **ports)
