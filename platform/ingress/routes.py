"""The ``routes`` section: hosts the Lua router may serve before a reload.

A new host has no server block in the running nginx.conf, so its requests
land in the catch-all server until the reload that renders it (seconds to
tens of seconds with thousands of hosts). The catch-all asks the router
(lua/router.lua) first; it serves the hosts this section lists, so a new
host needs only a dynamic push. Hosts with a server block never reach the
catch-all, so listing every routable desired host is harmless and keeps
this a pure function of the Configuration.

The router can serve a location exactly only if the location is *plain*:
an Exact or Prefix path to a backend, whose rendered body (``view.LocationBody``)
equals that of a location with no settings of its own, and whose backend
needs no Lua hooks besides the balancer. Comparing rendered bodies rather
than listing annotations means any setting that renders a directive
(rewrite-target, CORS, allowlists, limits, timeouts, body size, gRPC, a new
annotation tomorrow...) makes a location unroutable by default. A host is
listed only if *all* its locations are plain and it has no host redirect: a
host served partly by the router and partly by the catch-all's own
locations would be wrong. Unlisted hosts wait for the reload.

Payload (docs/architecture.md, "Data plane protocol")::

    {"servers": {"<name>": {"hsts": bool, "locations": [
        {"path": "/api", "match": "exact" | "prefix", "backend": "<name>", "ssl_redirect": bool}]}},
     "ssl_redirect": {"code": 308, "port": 443}}

Names are a server's hostname and aliases (``*.example.com`` for a
wildcard, which covers exactly one label, as rendered). Prefix paths are
sent in their canonical form (``model.prefix_base``).
"""

from __future__ import annotations

import itertools
import operator
import threading
from dataclasses import dataclass
from typing import Any

from platformd.common import gcpause
from platformd.ingress import view
from platformd.ingress.model import Backend, Configuration, GlobalSettings, PathMatch, Server, prefix_base

__all__ = ["payload"]

_ROUTABLE = (PathMatch.EXACT, PathMatch.PREFIX)


@dataclass(frozen=True)
class _Host:
    """A server whose locations are all plain; listed unless a backend needs Lua hooks."""

    names: tuple[str, ...]
    entry: dict[str, Any]
    backends: frozenset[str]


def payload(config: Configuration) -> dict[str, Any]:
    """The routes section for ``config`` (see module docstring).

    The same object is returned while the servers, the settings and the
    set of backends needing Lua hooks are unchanged (an endpoint change
    keeps all three), so callers may cache what they derive from it by
    identity. Callers must not modify it.
    """
    with gcpause.paused:  # see gcpause: two thirds of a cold section otherwise
        candidates = _memo.candidates(config)
        hooked = _memo.hooked(config.backends)
        return _memo.payload(candidates, hooked, config.settings)


def _plain_host(server: Server, bodies: view.Bodies) -> _Host | None:
    if server.redirect is not None or not server.locations:
        return None
    locations = []
    for loc in server.locations:
        if loc.match not in _ROUTABLE or loc.backend is None:
            return None
        if bodies.of(loc, server.hostname, server.tls) != bodies.plain(loc.match, server.tls, loc.ssl_redirect):
            return None
        path = prefix_base(loc.path) if loc.match is PathMatch.PREFIX else loc.path
        locations.append({"path": path, "match": loc.match.value, "backend": loc.backend,
                          "ssl_redirect": loc.ssl_redirect})
    hsts = bodies.plain(PathMatch.PREFIX, server.tls, False).hsts
    return _Host(server.names, {"hsts": hsts, "locations": locations},
                 frozenset(loc["backend"] for loc in locations))


class _Memo:
    """Candidates per Server object and the last payload, reused while valid.

    Every new Configuration (an endpoint change makes one) asks for this
    section; walking every location again costs a tenth of a second at
    10,000 Ingresses, and a new payload object makes the data plane encode
    and hash it again. The translator reuses the Server objects of hosts
    that did not change, so candidates are kept per Server object (those of
    the last two configurations, dropped when the settings change), and the
    payload while its candidates, settings and hooked backends are the same.
    Each call works on its own snapshot of the memo, so concurrent calls
    stay correct.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._recent: tuple[dict[int, tuple[Server, _Host | None]], ...] = ()
        self._settings: GlobalSettings | None = None
        self._payload: tuple[tuple[_Host, ...], frozenset[str], GlobalSettings, dict[str, Any]] | None = None
        self._last: tuple[tuple[Server, ...], GlobalSettings, tuple[_Host, ...]] | None = None
        # The last backends tuple asked about, whether each needs hooks, and the names that do.
        self._hooks: tuple[tuple[Backend, ...], list[bool], frozenset[str]] | None = None

    def candidates(self, config: Configuration) -> tuple[_Host, ...]:
        with self._lock:
            recent, settings, last = self._recent, self._settings, self._last
        if last is not None and last[0] is config.servers and last[1] is config.settings:
            return last[2]  # e.g. an endpoint change: the same servers tuple
        if settings is not config.settings and settings != config.settings:
            recent = ()
        # Hooks are checked per backend in ``payload``; here every location
        # is compared with a plain one as if its backend had none.
        bodies = view.Bodies(config, phases={})
        used: dict[int, tuple[Server, _Host | None]] = {}
        for server in config.servers:
            hit = next((c[id(server)] for c in recent if id(server) in c), None)
            if hit is None or hit[0] is not server:
                hit = (server, _plain_host(server, bodies))
            used[id(server)] = hit
        candidates = tuple(host for _, host in used.values() if host is not None)
        with self._lock:
            self._recent, self._settings = (used, *recent[:1]), config.settings
            self._last = (config.servers, config.settings, candidates)
        return candidates

    def hooked(self, backends: tuple[Backend, ...]) -> frozenset[str]:
        """Names of ``backends`` needing Lua hooks. An endpoint change replaces
        a few Backend objects in place in a tuple of 20,000: only the positions
        holding other objects than last time are looked at (found in C)."""
        with self._lock:
            last = self._hooks
        if last is not None and len(last[0]) == len(backends):
            previous, needs, names = last
            changed = list(itertools.compress(itertools.count(), map(operator.is_not, previous, backends)))
            if len(changed) * 4 < len(backends):
                needs = list(needs)
                same = True
                for i in changed:
                    need = view.needs_lua_hooks(backends[i])
                    same = same and need == needs[i] and (not need or backends[i].name == previous[i].name)
                    needs[i] = need
                if not same:
                    names = frozenset(b.name for b, need in zip(backends, needs) if need)
                self._remember_hooks((backends, needs, names))
                return names
        needs = [view.needs_lua_hooks(b) for b in backends]
        names = frozenset(b.name for b, need in zip(backends, needs) if need)
        self._remember_hooks((backends, needs, names))
        return names

    def _remember_hooks(self, hooks: tuple[tuple[Backend, ...], list[bool], frozenset[str]]) -> None:
        with self._lock:
            self._hooks = hooks

    def payload(self, candidates: tuple[_Host, ...], hooked: frozenset[str],
                settings: GlobalSettings) -> dict[str, Any]:
        with self._lock:
            cached = self._payload
        if (cached is not None and cached[1] == hooked and len(cached[0]) == len(candidates)
                and (cached[2] is settings or cached[2] == settings)
                and all(map(operator.is_, cached[0], candidates))):
            return cached[3]
        servers: dict[str, Any] = {}
        for host in candidates:
            if host.backends & hooked:
                continue
            for name in host.names:
                servers[name] = host.entry
        result = {"servers": dict(sorted(servers.items())),
                  "ssl_redirect": {"code": settings.tls.redirect_code, "port": settings.listen.https_port}}
        with self._lock:
            self._payload = (candidates, hooked, settings, result)
        return result


_memo = _Memo()
