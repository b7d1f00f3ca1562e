"""The ``routes`` section: the whole route table of the Lua router, as data.

nginx.conf has no server or location per Ingress (``view.py``); every
request is matched by lua/router.lua against this table. Everything a
request needs is decided here, once per change, and shipped as data: the
matching order (Exact, then the longest Prefix, then on hosts with Regex
paths the regexes longest first, a Prefix winning a tie, then Prefix
``/``), the regex anchors, each route's effective settings (globals
folded in) and which of the template's lanes proxies it. The router only
looks up and applies (docs/architecture.md, "Data plane protocol").

Payload::

    {"hosts": {"<name>": host}, "default": host,      # the catch-all
     "policies": {"<id>": policy},                     # shared by equal settings
     "hsts": "max-age=...; includeSubDomains" | "",    # sent on https to hsts hosts
     "ssl_redirect": {"code": 308, "port": 443},
     "binds": [...],                                   # per address / port tables (bound.py)
     "client_tls": {...}, "host_tls": {...},            # only when used: client_tls.py, host_tls.py
     "wildcards": {"*.<domain>": host}}                 # only when used: gateway_wildcards.py
    host = {"hsts": bool, "redirect": {"code", "target"} | null,
            "client_tls": {"id", "verify", ...},               # only when the host asks (client_tls.py)
            "exact": {"/p": route}, "prefix": {"/p": route},   # canonical prefix: no trailing "/"
            "regex": [route + {"pattern", "length"}, ...]}      # in matching order
    route = {"backend": "<name>" | null, "policy": "<id>",
             "rewrite": "<PCRE for rewrite-target>" | null, "zone": "<limit key>" | null}
    policy = {"fast", "lane", "scheme", "body_size" (bytes, 0 = unlimited),
              "timeouts": [connect, send, read], "upstream_vhost", "ssl_redirect",
              "redirect": {"code", "target"} | null, "rewrite_target": str | null,
              "cors": {...} | null, "allow": [cidr], "deny": [cidr],
              "limit_rps", "limit_burst", "limit_connections",
              "auth": {...} | null,                          # platformd.ingress.auth.payload
              "request_redirect": {...} | null,        # bound.redirect_payload
              "headers": [statement] | null (headers.payload), "mirror": {...} | null (mirror.payload),
              "deadline": {"request_ms", "attempt_ms"} (only when set: deadline.payload)}

Names are a server's hostname and aliases (``*.example.com`` covers
exactly one label). ``fast``: the route's settings equal the defaults
``location /`` is rendered with (and need none of the CORS headers only the
lanes print), so it is proxied there unless its backend
needs the balancer's access or log phase (lua/balancer.lua decides that);
``lane`` is the named location that proxies it otherwise.

``RouteTable`` keeps the host entry of each Server object of the last two
configurations (the translator reuses the Server objects of unchanged
hosts), so a change re-encodes only the hosts it touched.
"""

from __future__ import annotations

import hashlib
import json
import operator
import re
import threading
import zlib
from dataclasses import dataclass
from typing import Any, Iterable

from platformd.ingress import auth as auth_mod
from platformd.ingress import bound, client_tls, deadline, gateway_wildcards, headers, host_tls, lanes, mirror, route_choice
from platformd.ingress import traffic as traffic_mod
from platformd.ingress import validate as v
from platformd.ingress import www_redirect
from platformd.ingress.model import (
    BackendProtocol,
    Configuration,
    Cors,
    GlobalSettings,
    Location,
    PathMatch,
    Server,
    prefix_base,
)

__all__ = ["SHARDS", "RouteTable", "payload", "shard_of"]

_UNITS = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
# "auto" (AUTO_HTTP): the router proxies with the request's own scheme.
_SCHEMES = {BackendProtocol.HTTPS: "https", BackendProtocol.AUTO_HTTP: "auto"}


def size_bytes(text: str) -> int:
    """An nginx size ("1m", "512k", "0") in bytes."""
    text = v.size("size", text)
    if text[-1] in _UNITS:
        return int(text[:-1]) * _UNITS[text[-1]]
    return int(text)


def hsts_value(settings: GlobalSettings) -> str:
    hsts = settings.tls.hsts
    if not hsts.enabled:
        return ""
    value = f"max-age={hsts.max_age}"
    if hsts.include_subdomains:
        value += "; includeSubDomains"
    if hsts.preload:
        value += "; preload"
    return value


def _cors(cors: Cors) -> dict[str, Any]:
    origins = [v.cors_origin("cors.allow_origins", o) for o in cors.allow_origins]
    origin_regex = None
    if "*" not in origins:
        alternatives = "|".join(re.escape(o).replace(r"\*", "[A-Za-z0-9-]+") for o in origins)
        origin_regex = f"^(?:{alternatives})$"
    return {
        "origin_regex": origin_regex,
        "methods": ", ".join(cors.allow_methods),
        "headers": ", ".join(cors.allow_headers),
        "expose": ", ".join(cors.expose_headers) if cors.expose_headers else None,
        "credentials": cors.allow_credentials,
        "max_age": cors.max_age,
    }


def _policy(loc: Location, settings: GlobalSettings) -> dict[str, Any]:
    """The effective settings of ``loc`` (globals folded in), as the router applies them."""
    proxy = loc.proxy
    timeouts = [proxy.timeouts.connect or settings.timeouts.connect,
                proxy.timeouts.send or settings.timeouts.send,
                proxy.timeouts.read or settings.timeouts.read]
    buffering = settings.buffering if proxy.buffering is None else proxy.buffering
    body_size = size_bytes(proxy.body_size or settings.body_size)
    limit = loc.rate_limit
    fast = (proxy.protocol is BackendProtocol.HTTP and buffering == settings.buffering
            and not loc.lane_directives
            and timeouts == [settings.timeouts.connect, settings.timeouts.send, settings.timeouts.read]
            and not proxy.upstream_vhost
            and not limit.connections and loc.cors is None and loc.auth is None
            and not loc.headers and not settings.headers and loc.mirror is None
            and loc.traffic == traffic_mod.DEFAULT
            and loc.conditions is None and not loc.split  # chosen per request: route() decides
            and loc.deadline is None)  # set per attempt by the lane (deadline.py)
    redirect = None
    if loc.redirect is not None:
        redirect = {"code": loc.redirect.code,
                    "target": v.redirect_target("redirect.target", loc.redirect.target)}
    policy = {
        "fast": fast,
        "lane": (lanes.lane_name(lanes.base_lane(loc, settings), loc.lane_directives) if loc.lane_directives
                 else lanes.base_lane(loc, settings)),
        "scheme": _SCHEMES.get(proxy.protocol, "http"),
        "body_size": body_size,
        "timeouts": timeouts,
        "upstream_vhost": proxy.upstream_vhost,
        "ssl_redirect": loc.ssl_redirect,
        "redirect": redirect,
        "rewrite_target": (v.rewrite_target("rewrite_target", loc.rewrite_target)
                           if loc.rewrite_target is not None else None),
        "cors": _cors(loc.cors) if loc.cors is not None else None,
        "allow": list(loc.access.allow),
        "deny": list(loc.access.deny),
        "limit_rps": limit.rps,
        "limit_burst": limit.rps * limit.burst_multiplier,
        "limit_connections": limit.connections,
        # Credentials (htpasswd hashes): in the routes sections only (auth.payload).
        "auth": auth_mod.payload(loc.auth) if loc.auth is not None else None,
        "request_redirect": bound.redirect_payload(loc.request_redirect),
        "headers": headers.payload(settings.headers + loc.headers),
        "mirror": mirror.payload(loc.mirror),
        "limit_rpm": limit.rpm,
        "limit_rpm_burst": limit.rpm * limit.burst_multiplier,
        "limit_allow": list(limit.allowlist),
        "limit_status": [limit.req_status, limit.conn_status],
        "traffic": traffic_mod.policy(loc.traffic),
    }
    if loc.deadline is not None:  # only when set: other policies (and their ids) stay as they were
        policy["deadline"] = deadline.payload(loc.deadline)
    return policy


def _rewrite_pattern(loc: Location) -> str | None:
    """The regex rewrite-target applies to $uri: the path itself for Regex
    paths (case-insensitive, as the path matches), else the literal path."""
    if loc.rewrite_target is None:
        return None
    if loc.rewrite_rest:  # Gateway ReplacePrefixMatch: $1 is "/rest" (or none), $2 "rest"
        return "^" + re.escape(v.path("path", loc.path).rstrip("/")) + "(/(.*))?$"
    if loc.match is PathMatch.REGEX:
        pattern = v.regex("path", loc.path)
        return "(?i)" + (pattern if pattern.startswith("^") else "^" + pattern)
    return "^" + re.escape(v.path("path", loc.path))


def _zone(host: str, path: str) -> str:
    return hashlib.sha256(f"{host}\x00{path}".encode()).hexdigest()[:16]


# Distinct settings remembered before the policy table starts afresh (it
# only grows while the global settings stay; ~1 KB each).
_POLICY_LIMIT = 1 << 16


class _Policies:
    """Policy ids by settings: equal settings share one policy (most routes
    have none of their own). Keyed by the settings objects' values."""

    def __init__(self, settings: GlobalSettings) -> None:
        self.settings = settings
        self.by_key: dict[tuple, tuple[str, dict[str, Any]]] = {}

    def id_of(self, loc: Location) -> tuple[str, dict[str, Any]]:
        key = (loc.proxy, loc.access, loc.rate_limit, loc.cors, loc.rewrite_target, loc.redirect, loc.ssl_redirect,
               loc.lane_directives, loc.auth, loc.request_redirect, loc.headers, loc.mirror, loc.traffic,
               loc.conditions is None and not loc.split, loc.deadline)
        hit = self.by_key.get(key)
        if hit is None:
            policy = _policy(loc, self.settings)
            pid = hashlib.sha256(json.dumps(policy, sort_keys=True).encode()).hexdigest()[:16]
            hit = self.by_key[key] = (pid, policy)
        return hit


def _host(name: str, locations: tuple[Location, ...], policies: _Policies, *, hsts: bool,
          redirect: dict | None = None) -> tuple[dict[str, Any], dict[str, dict]]:
    """A host entry and the policies it uses."""
    exact: dict[str, dict] = {}
    prefix: dict[str, dict] = {}
    regex: list[tuple[tuple, dict]] = []
    chained: dict[str, dict] = {}  # regex path -> its first route (route_choice.put)
    used: dict[str, dict] = {}
    for loc in locations:
        try:
            pid, policy = policies.id_of(loc)
            backend = v.backend_name("backend", loc.backend) if loc.backend is not None else None
            route = {"backend": backend, "policy": pid, "rewrite": _rewrite_pattern(loc),
                     "zone": _zone(name, loc.path) if loc.rate_limit.enabled else None}
            if loc.conditions is not None or loc.split:
                route_choice.extend(route, loc)
            if loc.match is PathMatch.EXACT:
                route_choice.put(exact, v.path("path", loc.path), route)
            elif loc.match is PathMatch.PREFIX:
                route_choice.put(prefix, prefix_base(v.path("path", loc.path)), route)
            elif route_choice.put(chained, loc.path, route) is route:  # else a further candidate, chained
                pattern = v.regex("path", loc.path)
                route["pattern"] = pattern if pattern.startswith("^") else "^" + pattern
                route["length"] = len(loc.path)
                regex.append(((-len(loc.path), loc.path), route))
        except v.ValidationError as exc:
            raise exc.within(f"server[{name}].location[{loc.path}]") from None
        used[pid] = policy
    entry = {
        "hsts": hsts,
        "redirect": redirect,
        "exact": exact,
        "prefix": prefix,
        "regex": [route for _, route in sorted(regex, key=lambda item: item[0])],
    }
    return entry, used


def _server_entry(server: Server, policies: _Policies) -> tuple[dict[str, Any], dict[str, dict]]:
    redirect = None
    if server.redirect is not None:
        redirect = {"code": server.redirect.code,
                    "target": v.redirect_target("redirect.target", server.redirect.target)}
        origin = www_redirect.origin_host(redirect["target"])
        if origin is not None:  # from-to-www-redirect: the request's scheme and URI on that host
            redirect["host"] = origin
    hsts = server.tls and policies.settings.tls.hsts.enabled
    entry, used = _host(server.hostname, server.locations, policies, hsts=hsts, redirect=redirect)
    if server.client_tls is not None:
        entry["client_tls"] = client_tls.route_entry(server.client_tls)
    return entry, used


def _default_entry(config: Configuration, policies: _Policies) -> tuple[dict[str, Any], dict[str, dict]]:
    """The catch-all: host-less rules, then the default backend as ``/`` (else 404)."""
    locations = config.default_server_locations
    has_root = any(loc.match is PathMatch.PREFIX and prefix_base(loc.path) == "/" for loc in locations)
    if config.default_backend is not None and not has_root:
        locations = (*locations, Location(path="/", backend=config.default_backend))
    return _host("_", locations, policies, hsts=False)


# Hosts are shipped in this many sections (routes_0 ..), each host in the
# one its name's crc32 picks (lua/router.lua looks it up the same way): a
# route change re-encodes, posts and makes workers decode one shard, about
# 11 KB at 10,000 Ingresses instead of 2.7 MB. Why 256 and not 16 (170 KB
# shards): each worker's decode of a shard is garbage once the next version
# comes, and that garbage set the Lua heaps' working size. At 10,000
# Ingresses over 1,000 route changes nginx's RSS grew +33% with 16 shards,
# +14% with 256 (bench/bench_dataplane.py, route changes; the p50 of a
# change to its first request halved). The price: a first push posts 257
# sections (+0.2 s at one Ingress). lua/configuration.lua's ROUTE_SHARDS
# must be the same (it refuses other counts).
SHARDS = 256


def shard_of(name: str) -> int:
    return zlib.crc32(name.encode()) % SHARDS


class RouteTable:
    """Builds the routes payload, reusing the entry of each unchanged Server object.

    Entries are kept per Server object (by identity, each entry holding its
    Server so an id cannot be reused while the entry exists) for the last
    two payloads, and dropped whole when the global settings change. The
    result always equals a fresh build (tests/ingress/test_routes.py).
    Thread-safe: each build works on a snapshot of the cache.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._settings: GlobalSettings | None = None
        self._recent: tuple[dict[int, tuple], ...] = ()
        self._policies: _Policies | None = None
        # The inputs and result of the last build: an endpoint change makes a
        # new Configuration with the same servers tuple, and gets the same
        # objects back (callers cache what they derive by identity).
        self._last: tuple[tuple, _Table] | None = None
        # Per shard: its (name, entry) pairs and payload, reused while the same.
        self._shards: list[tuple[tuple, dict[str, Any]] | None] = [None] * SHARDS
        self._meta: tuple[tuple, dict[str, Any]] | None = None
        self._shard_numbers: dict[str, int] = {}  # host name -> shard_of(name)
        self._recent_hosts: dict[str, tuple[dict, dict]] | None = None  # the hosts of _recent[0]
        # (hosts before, hosts after, names that changed) of the last build when
        # it patched the one before (``_patched``), else None; and the hosts
        # and per-shard member lists of the last ``sections``: a route change
        # regroups the shards of the names it changed, not 10,000 names.
        self._delta: tuple[dict, dict, tuple[str, ...]] | None = None
        self._grouped: tuple[dict, list] | None = None

    def payload(self, config: Configuration) -> dict[str, Any]:
        """The whole table of ``config`` in one (docs/architecture.md). Callers must not modify it."""
        table = self._table(config)
        hosts = {name: entry for name, (entry, _) in table.hosts.items()}
        policies = dict(table.default_policies)
        for _, used in table.hosts.values():
            policies.update(used)
        policies.update(table.bound_policies)
        policies.update(table.wildcard_policies)
        whole = {"hosts": hosts, "default": table.default, "policies": policies,
                 "hsts": table.hsts, "ssl_redirect": table.ssl_redirect, "binds": table.binds}
        if table.wildcards:
            whole["wildcards"] = table.wildcards
        if table.client_tls:
            whole["client_tls"] = table.client_tls
        if table.host_tls:
            whole["host_tls"] = table.host_tls
        return whole

    def sections(self, config: Configuration) -> tuple[dict[str, Any], ...]:
        """The payloads of "routes" (the meta section) and "routes_0" .. in order.
        A shard whose hosts are the same entries is the same object as last
        time, so it is encoded once (render) and not pushed again (decide)."""
        table = self._table(config)
        with self._lock:
            last_grouped, delta = self._grouped, self._delta
        if last_grouped is not None and last_grouped[0] is table.hosts:
            grouped = last_grouped[1]  # the same table: every shard as it was
        elif last_grouped is not None and delta is not None and delta[0] is last_grouped[0] \
                and delta[1] is table.hosts:
            grouped = self._regrouped(last_grouped[1], table.hosts, delta[2])
        else:
            grouped = [[] for _ in range(SHARDS)]
            for name, (entry, used) in table.hosts.items():
                grouped[self._shard(name)].append((name, entry, used))
        out = []
        with self._lock:
            meta_key = (id(table.default), table.hsts, tuple(table.ssl_redirect.values()), id(table.binds),
                        table.client_tls, table.host_tls, id(table.wildcards))
            if self._meta is None or self._meta[0] != meta_key:
                meta = {"default": table.default, "policies": {**table.default_policies, **table.bound_policies},
                        "hsts": table.hsts, "ssl_redirect": table.ssl_redirect, "shards": SHARDS,
                        "binds": table.binds}
                if table.client_tls:
                    meta["client_tls"] = table.client_tls
                if table.host_tls:
                    meta["host_tls"] = table.host_tls
                if table.wildcards:  # Gateway wildcards, more labels (gateway_wildcards)
                    meta["wildcards"] = table.wildcards
                    meta["policies"] = {**meta["policies"], **table.wildcard_policies}
                self._meta = (meta_key, meta, table.default, table.binds, table.wildcards)
            out.append(self._meta[1])
            for index, members in enumerate(grouped):
                last = self._shards[index]
                if last is not None and last[2] is members:
                    out.append(last[1])  # a shard no change touched
                    continue
                key = tuple((name, id(entry)) for name, entry, _ in members)
                if last is not None and last[0] == key:
                    last = self._shards[index] = (*last[:2], members)  # same entries: same payload
                if last is None or last[0] != key:
                    policies: dict[str, dict] = {}
                    for _, _, used in members:
                        policies.update(used)
                    last = self._shards[index] = (key, {"hosts": {name: entry for name, entry, _ in members},
                                                        "policies": policies}, members)
                out.append(last[1])
            self._grouped = (table.hosts, grouped)
        return tuple(out)

    def _shard(self, name: str) -> int:
        shards = self._shard_numbers
        shard = shards.get(name)
        if shard is None:
            if len(shards) > 4 * len(self._recent_hosts or ()) + 1024:
                shards.clear()  # bounded: names no longer served go
            shard = shards[name] = shard_of(name)  # a crc32 per name once, not per route change
        return shard

    def _regrouped(self, grouped: list, hosts: dict, changed: tuple[str, ...]) -> list:
        """``grouped`` (each shard's members) after the hosts named ``changed`` changed;
        the member lists of other shards are the same objects."""
        grouped = list(grouped)
        names = dict.fromkeys(changed)
        touched: dict[int, list[str]] = {}
        for name in names:
            touched.setdefault(self._shard(name), []).append(name)
        for index, its_names in touched.items():
            members = [m for m in grouped[index] if m[0] not in names]
            members += [(name, *hosts[name]) for name in its_names if name in hosts]
            grouped[index] = members
        return grouped

    def _table(self, config: Configuration) -> "_Table":
        inputs = (config.servers, config.default_server_locations, config.default_backend, config.settings,
                  config.bound, config.gateway_wildcards)
        with self._lock:
            last = self._last
        if last is not None and _same(last[0], inputs):
            return last[1]
        result = self._build(config)
        with self._lock:
            self._last = (inputs, result)
        return result

    def _build(self, config: Configuration) -> "_Table":
        settings = config.settings
        with self._lock:
            recent, policies, last_hosts = self._recent, self._policies, self._recent_hosts
            if (policies is None or len(policies.by_key) > _POLICY_LIMIT
                    or not (self._settings is settings or self._settings == settings)):
                recent, policies = (), _Policies(settings)
        hosts = used = changed = None
        if recent and last_hosts is not None:
            hosts, used, changed = _patched(recent, last_hosts, config.servers, policies)
        if hosts is None:
            hosts, used = _walked(recent, config.servers, policies)
        default, default_policies = _default_entry(config, policies)
        binds, bound_policies = bound.payload(config, lambda server: _server_entry(server, policies),
                                              lambda name, locations: _host(name, locations, policies, hsts=False))
        wildcards, wildcard_policies = gateway_wildcards.payload(config.gateway_wildcards,
                                                                 lambda server: _server_entry(server, policies))
        with self._lock:
            self._recent, self._settings, self._policies = (used, *recent[:1]), settings, policies
            self._recent_hosts = hosts
            self._delta = (last_hosts, hosts, changed) if changed is not None else None
        return _Table(hosts, default, default_policies, hsts_value(settings),
                      {"code": settings.tls.redirect_code, "port": settings.listen.https_port},
                      binds, bound_policies,
                      client_tls.handshake_data(config.servers), host_tls.handshake_data(config.servers),
                      wildcards, wildcard_policies)


def _entry_of(server: Server, caches: Iterable[dict[int, tuple]], policies: "_Policies") -> tuple:
    """(server, entry, policies) of ``server``: from the caches of earlier builds, else made."""
    for cache in caches:
        hit = cache.get(id(server))
        if hit is not None and hit[0] is server:
            return hit
    return (server, *_server_entry(server, policies))


def _patched(recent: tuple, last_hosts: dict, servers: tuple, policies: "_Policies") -> tuple:
    """(hosts, used, names that changed) of ``servers`` made from the last
    build's by the servers that changed (by identity), or Nones when many did. A route change
    replaces a few of 10,000 Server objects; walking them all was most of the
    table's cost per change (~10 ms). Equal to ``_walked`` but for the order
    of ``hosts``, which means nothing (shards are keyed by their members)."""
    last_used = recent[0]
    now = dict(zip(map(id, servers), servers))
    added = now.keys() - last_used.keys()
    removed = last_used.keys() - now.keys()
    if len(now) != len(servers) or 4 * (len(added) + len(removed)) > len(servers):
        return None, None, None
    hosts, used, changed = dict(last_hosts), dict(last_used), []
    for key in removed:
        for name in used.pop(key)[0].names:
            hosts.pop(name, None)
            changed.append(name)
    for key in added:
        hit = used[key] = _entry_of(now[key], recent[1:], policies)
        for name in hit[0].names:
            hosts[name] = (hit[1], hit[2])
            changed.append(name)
    return hosts, used, tuple(changed)


def _walked(recent: tuple, servers: tuple, policies: "_Policies") -> tuple:
    """(hosts, used) of ``servers``, each server's entry looked up in ``recent`` or made."""
    hosts: dict[str, tuple[dict, dict]] = {}
    used: dict[int, tuple] = {}
    for server in servers:
        hit = used[id(server)] = _entry_of(server, recent, policies)
        for name in server.names:
            hosts[name] = (hit[1], hit[2])
    return hosts, used


@dataclass(frozen=True)
class _Table:
    """One build: each name's host entry with the policies it uses, and the rest."""

    hosts: dict[str, tuple[dict, dict]]
    default: dict
    default_policies: dict
    hsts: str
    ssl_redirect: dict
    binds: list  # bound.payload: the per-address / per-port tables
    bound_policies: dict
    client_tls: dict  # client_tls.handshake_data: names -> policy id, CA bundles
    host_tls: dict  # host_tls.handshake_data: names -> key, cipher settings
    wildcards: dict  # gateway_wildcards.payload: Gateway "*.<domain>" hosts, more labels
    wildcard_policies: dict


def _same(before: tuple, now: tuple) -> bool:
    """The same inputs: tuples of the same objects (a new tuple of the same
    servers after a translation), equal scalars and settings."""
    for a, b in zip(before, now):
        if a is b:
            continue
        if isinstance(a, tuple):
            if len(a) != len(b) or not all(map(operator.is_, a, b)):
                return False
        elif a != b:
            return False
    return True


def payload(config: Configuration) -> dict[str, Any]:
    """The whole route table of ``config``, built afresh (see ``RouteTable``)."""
    return RouteTable().payload(config)
