"""Gateway API objects -> the route table and the status of every object.

``build(snapshot, options, now)`` is a pure function: the same snapshot
gives an equal ``GatewayTranslation``. Its steps:

1. GatewayClasses: ours by controllerName; accepted or not (gateway_classes);
2. our Gateways (class is ours), oldest first (creationTimestamp, then
   namespace/name): addresses (gateway_addresses), listeners and their
   conflicts (gateway_listeners);
3. HTTPRoutes then GRPCRoutes, oldest first: parentRefs -> listeners
   (gateway_attach), rules -> matches and actions (gateway_rules), each
   match placed under every (bind, hostname) its listeners serve;
4. every host's entries sorted by the spec's precedence (gateway_rules
   explains the key; ties: older route, then namespace/name, then rule
   order, then match order);
5. statuses: attachedRoutes per listener from step 3.

Objects that are not ours (other controllers' classes, their Gateways,
routes with no parentRef to our Gateways) get no status at all.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from platformd.common import gcpause
from platformd.ingress import gateway_addresses, gateway_attach, gateway_classes, gateway_listeners
from platformd.ingress import gateway_features
from platformd.ingress import gateway_fields as f
from platformd.ingress import gateway_hostnames as hostnames
from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_grants import Grants
from platformd.ingress.gateway_input import GatewayOptions, GatewaySnapshot
from platformd.ingress.gateway_listeners import GatewayState
from platformd.ingress.gateway_model import Bind, GatewayTable, HostRoutes, RouteEntry, TlsBinding
from platformd.ingress.gateway_rules import Rule, RuleContext, grpc_rule, http_rule

__all__ = ["GatewayTranslation", "RouteCache", "build", "update"]

HTTP_ROUTE, GRPC_ROUTE = "HTTPRoute", "GRPCRoute"


@dataclass(frozen=True)
class GatewayTranslation:
    """The table to serve and the status each of our objects should show.

    Status maps are keyed like the stores ("name" for classes, "ns/name"
    otherwise) and hold only our objects. ``served``: per Gateway, the
    (bind, listener hostname or "*") of each listener that is served, so a
    host the data plane leaves out can be traced to its Gateways."""

    table: GatewayTable
    classes: Mapping[str, st.ClassStatus] = field(default_factory=dict)
    gateways: Mapping[str, st.GatewayStatus] = field(default_factory=dict)
    http_routes: Mapping[str, st.RouteStatus] = field(default_factory=dict)
    grpc_routes: Mapping[str, st.RouteStatus] = field(default_factory=dict)
    served: Mapping[str, tuple[tuple[Bind, str], ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("classes", "gateways", "http_routes", "grpc_routes", "served"):
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):  # a proxy is another translation's: never changed
                object.__setattr__(self, name, MappingProxyType(dict(value)))


def _key(obj: Mapping) -> str:
    meta = f.mapping(obj.get("metadata"))
    namespace, name = f.string(meta.get("namespace")), f.string(meta.get("name"))
    return f"{namespace}/{name}" if namespace else name


def _created(obj: Mapping) -> str:
    return f.string(f.mapping(obj.get("metadata")).get("creationTimestamp"))


def _age_order(objects) -> list[tuple[str, Mapping]]:
    """(key, object) oldest first; ties by key. Objects that are not objects are skipped."""
    return sorted(((_key(o), o) for o in objects if isinstance(o, Mapping)), key=lambda kv: (_created(kv[1]), kv[0]))


def _generation(obj: Mapping) -> int:
    return f.integer(f.mapping(obj.get("metadata")).get("generation"))


def _host_order(host: HostRoutes) -> tuple:
    """The table's host order: by bind (address, port), specificity, name; the
    bind's protocol and listener port last, so the order is total and a host
    spliced in (``update``) lands where a full build puts it."""
    bind = host.bind
    return (bind.address or "", bind.port, hostnames.specificity(host.hostname), host.hostname, bind.protocol,
            bind.listener_port)


class _Table:
    """Entries collected per (bind, hostname), with their precedence keys.

    Kept by the ``RouteCache`` after a build, so ``update`` can take a
    changed route's entries out and put its new ones in; ``dirty`` collects
    the (bind, hostname) pairs touched since (None: not collected)."""

    def __init__(self) -> None:
        self._hosts: dict[tuple[Bind, str], dict[tuple, RouteEntry]] = {}
        self.dirty: set[tuple[Bind, str]] | None = None

    def add(self, bind: Bind, hostname: str, key: tuple, entry: RouteEntry) -> None:
        # Keyed by precedence key: the same match reached through two listeners is one entry.
        self._hosts.setdefault((bind, hostname), {})[key] = entry
        if self.dirty is not None:
            self.dirty.add((bind, hostname))

    def remove(self, bind: Bind, hostname: str, key: tuple) -> None:
        entries = self._hosts.get((bind, hostname))
        if entries is None or entries.pop(key, None) is None:
            return
        if not entries:
            del self._hosts[(bind, hostname)]
        if self.dirty is not None:
            self.dirty.add((bind, hostname))

    def host(self, bind: Bind, hostname: str) -> HostRoutes | None:
        entries = self._hosts.get((bind, hostname))
        return HostRoutes(bind, hostname, tuple(entries[k] for k in sorted(entries))) if entries else None

    def freeze(self, certificates: list[TlsBinding], cache: RouteCache | None = None) -> GatewayTable:
        hosts = [HostRoutes(bind, name, tuple(entries[k] for k in sorted(entries)))
                 for (bind, name), entries in self._hosts.items()]
        if cache is not None:
            hosts = cache.same_hosts(hosts)
        hosts.sort(key=_host_order)
        certificates.sort(key=lambda c: (c.bind.address or "", c.bind.port, hostnames.specificity(c.hostname), c.hostname))
        return GatewayTable(tuple(hosts), tuple(certificates))


def _route_status(route: Mapping, parents: list[gateway_attach.ParentResult], rules: list[Rule]) -> st.RouteStatus:
    dropped = [r for r in rules if r.unsupported]
    problems = [p for r in rules for p in r.problems]
    resolved = problems[0] if problems else st.Condition(st.RESOLVED_REFS, True, st.R_RESOLVED_REFS,
                                                         "all references resolved")
    out = []
    for parent in parents:
        accepted = parent.accepted
        extra: tuple[st.Condition, ...] = ()
        if accepted.status and rules and len(dropped) == len(rules):
            accepted = st.Condition(st.ACCEPTED, False, st.R_UNSUPPORTED_VALUE,
                                    f"no rule can be served: {dropped[0].unsupported}")
        elif accepted.status and dropped:
            listed = ", ".join(str(r.index) for r in dropped)
            extra = (st.Condition(st.PARTIALLY_INVALID, True, st.R_UNSUPPORTED_VALUE,
                                  f"Dropped Rule(s) {listed}: {dropped[0].unsupported}"),)
        out.append(st.ParentStatus(parent.parent_ref, (accepted, resolved, *extra)))
    return st.RouteStatus(_generation(route), tuple(out))


class _Reads:
    """The Services a route's rules look up (``get`` is all they use), each
    with what it found (None: missing), so a cached translation can be checked."""

    __slots__ = ("services", "seen")

    def __init__(self, services: Mapping[str, dict]) -> None:
        self.services = services
        self.seen: dict[str, dict | None] = {}

    def get(self, key: str, default=None):
        value = self.services.get(key)
        self.seen[key] = value
        return default if value is None else value


def _same(a, b) -> bool:
    return a is b or a == b


@dataclass
class _Kept:
    """What a build leaves in its ``RouteCache`` for ``update``: the table it
    filled, the listeners' attached routes, the route statuses, and what the
    routes were translated against (Gateway states, Namespaces, grants)."""

    translation: GatewayTranslation
    table: _Table
    attached: dict[tuple[str, str], set]
    statuses: dict[str, dict[str, st.RouteStatus]]  # kind -> key -> status
    states: tuple[GatewayState, ...]
    namespaces: Mapping
    grants: Grants


class RouteCache:
    """Per-route translations kept between builds (``build(..., cache=)``).

    A route's status, the listeners it counts for and the entries it places
    (``_place``) are a function of the route object,
    the Gateway states, the Namespaces, the ReferenceGrants and the Services
    its rules looked up. All but the last are checked once per build (any
    difference empties the cache); an entry is reused only when its route
    object is equal to the one now given and every Service it looked up is
    still what it found. So a build with the cache equals one without it
    (tests/ingress/test_gateway_routecache.py), and one changed route costs
    the translation of that route only.

    It also keeps the last build's table (``_Kept``), so that ``update`` can
    translate only the routes that changed since, and which routes read each
    Service (``readers``). Owned by one caller, used by one build or update
    at a time."""

    def __init__(self) -> None:
        self._context: tuple | None = None
        # (kind, key) -> (route, Services seen, status, (Gateway, listener) attached to, placed entries)
        self._entries: dict[tuple[str, str], tuple] = {}
        self._readers: dict[str, set[tuple[str, str]]] = {}  # Service key -> routes that looked it up
        self._hosts: dict[tuple, HostRoutes] = {}  # the last build's hosts by (bind, hostname)
        self._sort_keys: dict[int, tuple] = {}  # id(route) -> (route, creationTimestamp, key), last build's
        self._next_sort_keys: dict[int, tuple] = {}  # this build's
        self._kept: _Kept | None = None

    def begin(self, states: Mapping[str, GatewayState], namespaces: Mapping, grants: tuple) -> None:
        context = (dict(states), namespaces, grants)
        if self._context is None or not all(_same(a, b) for a, b in zip(self._context, context)):
            self._entries, self._readers = {}, {}
        self._context = context
        self._next_sort_keys = {}
        self._kept = None

    def get(self, kind: str, key: str, route: Mapping, services: Mapping[str, dict]):
        entry = self._entries.get((kind, key))
        if entry is None or not _same(entry[0], route):
            return None
        for name, found in entry[1].items():
            if not _same(services.get(name), found):
                return None
        return entry[2:]

    def put(self, kind: str, key: str, route: Mapping, seen: dict, status, listeners, placed) -> None:
        self._forget(kind, key)
        self._entries[(kind, key)] = (route, seen, status, listeners, placed)
        for name in seen:
            self._readers.setdefault(name, set()).add((kind, key))

    def _forget(self, kind: str, key: str) -> tuple | None:
        entry = self._entries.pop((kind, key), None)
        if entry is not None:
            for name in entry[1]:
                readers = self._readers.get(name)
                if readers is not None:
                    readers.discard((kind, key))
                    if not readers:
                        del self._readers[name]
        return entry

    def readers(self, service: str) -> frozenset[tuple[str, str]]:
        """The routes (kind, key) whose translation looked up Service ``service``."""
        return frozenset(self._readers.get(service, ()))

    def age_order(self, objects) -> list[tuple[str, Mapping]]:
        """``_age_order``, with each object's sort key (key, creationTimestamp)
        kept by object identity (the kept object holds its id)."""
        last, keys = self._sort_keys, self._next_sort_keys
        pairs = []
        for obj in objects:
            if not isinstance(obj, Mapping):
                continue
            found = last.get(id(obj))
            if found is None or found[0] is not obj:
                found = (obj, _created(obj), _key(obj))
            keys[id(obj)] = found
            pairs.append(found)
        pairs.sort(key=lambda p: (p[1], p[2]))
        return [(p[2], p[0]) for p in pairs]

    def same_hosts(self, hosts: list[HostRoutes]) -> list[HostRoutes]:
        """``hosts`` where each one equal to the last build's is that very
        object (the lowering then finds its Server by identity, without
        hashing the host's entries)."""
        last = self._hosts
        out = []
        for host in hosts:
            old = last.get((host.bind, host.hostname))
            out.append(old if old is not None and old.entries == host.entries else host)
        self._hosts = {(h.bind, h.hostname): h for h in out}
        return out

    def keep(self, live: set[tuple[str, str]]) -> None:
        """Forget the routes no longer there."""
        self._sort_keys, self._next_sort_keys = self._next_sort_keys, {}
        for gone in self._entries.keys() - live:
            self._forget(*gone)


def _translate_route(kind: str, key: str, route: Mapping, states: Mapping[str, GatewayState], services,
                     namespaces: Mapping, grants: Grants):
    """One route: (status (None: no parentRef to our Gateways), the (Gateway,
    listener) pairs it counts for, the entries it places, the Services it
    looked up). ``services``: anything with ``get(key)``."""
    status, listeners, placed = None, [], []
    parents = gateway_attach.attach(route, kind, states, namespaces)
    reads = _Reads(services)
    if parents:
        namespace = f.string(f.mapping(route.get("metadata")).get("namespace"))
        ctx = RuleContext(kind, namespace, reads, grants)  # type: ignore[arg-type] - only .get is used
        make_rule = http_rule if kind == HTTP_ROUTE else grpc_rule
        rules = [make_rule(i, rule, ctx) for i, rule in enumerate(f.items(f.mapping(route.get("spec")).get("rules")))]
        status = _route_status(route, parents, rules)
        for parent, parent_status in zip(parents, status.parents):
            if not parent_status.conditions[0].status:
                continue  # not accepted by this parent: neither counted nor served there
            for attachment in parent.attachments:
                listeners.append((attachment.gateway.key, attachment.listener.name))
                placed += _place(attachment, rules, f"{kind} {key}", _created(route))
    return status, listeners, placed, reads.seen


def _translate_routes(kind: str, routes, states: Mapping[str, GatewayState], snapshot: GatewaySnapshot,
                      grants: Grants, table: _Table, attached: dict[tuple[str, str], set],
                      cache: RouteCache | None = None, live: set | None = None) -> dict[str, st.RouteStatus]:
    statuses = {}
    for key, route in (cache.age_order(routes) if cache is not None else _age_order(routes)):
        hit = cache.get(kind, key, route, snapshot.services) if cache is not None else None
        if hit is not None:
            status, listeners, placed = hit
        else:
            status, listeners, placed, seen = _translate_route(kind, key, route, states, snapshot.services,
                                                               snapshot.namespaces, grants)
            if cache is not None:
                cache.put(kind, key, route, seen, status, listeners, placed)
        if live is not None:
            live.add((kind, key))
        if status is None:
            continue  # no parentRef to our Gateways
        statuses[key] = status
        for listener in listeners:
            attached.setdefault(listener, set()).add((kind, key))
        for bind, hostname, precedence, entry in placed:
            table.add(bind, hostname, precedence, entry)
    return statuses


def _place(attachment: gateway_attach.Attachment, rules: list[Rule], name: str,
           created: str) -> list[tuple[Bind, str, tuple, RouteEntry]]:
    """Every match of the servable rules under each hostname the attachment
    serves: (bind, hostname, precedence key, entry) for ``_Table.add``."""
    bind = attachment.gateway.bind(attachment.listener)
    if bind is None:
        return []  # attached, but the listener is not served (conflicted, no certificate, no address)
    out = []
    for rule in rules:
        if rule.unsupported:
            continue
        action = rule.action_for(bind)
        for m, (match, precedence) in enumerate(rule.matches):
            entry = RouteEntry(match, action, name, rule.index)
            for hostname in attachment.hostnames:
                out.append((bind, hostname, (*precedence, created, name, rule.index, m), entry))
    return out


def _gateway_status(state: GatewayState, attached: Mapping[tuple[str, str], set]) -> st.GatewayStatus:
    address_ok = state.address_ok
    listeners = tuple(st.ListenerStatus(
        name=lst.name, supported_kinds=lst.kinds,
        attached_routes=len(attached.get((state.key, lst.name), ())),
        conditions=lst.conditions(state.assignment.address, address_ok)) for lst in state.listeners)
    return st.GatewayStatus(state.generation, state.assignment.reported, state.conditions(), listeners)


def _unaccepted_class_status(gateway: Mapping, class_name: str) -> st.GatewayStatus:
    message = f"GatewayClass {class_name} is not accepted"
    return st.GatewayStatus(_generation(gateway), (), (
        st.Condition(st.ACCEPTED, False, st.R_INVALID, message),
        st.Condition(st.PROGRAMMED, False, st.R_INVALID, message)), ())


def build(snapshot: GatewaySnapshot, options: GatewayOptions, now: float,
          cache: RouteCache | None = None) -> GatewayTranslation:
    """See the module docstring. ``now``: wall-clock seconds (certificate validity).
    ``cache``: reuse the translation of unchanged routes (``RouteCache``); the
    result is the same with or without it."""
    with gcpause.paused:  # see gcpause: at 10,000 routes 994 -> 424 ms (bench/bench_gateway.py)
        return _build(snapshot, options, now, cache)


def _build(snapshot: GatewaySnapshot, options: GatewayOptions, now: float,
           cache: RouteCache | None = None) -> GatewayTranslation:
    features = gateway_features.supported(set(options.listener_ports) - options.tls_listener_ports)
    classes = {_key(c): gateway_classes.class_status(c, snapshot.crd_version, features)
               for _, c in _age_order(snapshot.gateway_classes) if gateway_classes.is_ours(c, options.controller_name)}
    accepted_classes = {name for name, s in classes.items() if s.conditions[0].status}
    ours = [(k, g) for k, g in _age_order(snapshot.gateways)
            if f.string(f.mapping(g.get("spec")).get("gatewayClassName")) in classes]
    gateway_statuses: dict[str, st.GatewayStatus] = {}
    serving = []
    for key, gateway in ours:
        class_name = f.string(f.mapping(gateway.get("spec")).get("gatewayClassName"))
        if class_name in accepted_classes:
            serving.append((key, gateway))
        else:
            gateway_statuses[key] = _unaccepted_class_status(gateway, class_name)
    grants = Grants(snapshot.reference_grants)
    assignments = gateway_addresses.assign(serving, options.address_pool, options.publish_addresses)
    states = gateway_listeners.mark_conflicts(
        gateway_listeners.evaluate(key, gw, assignments[key], options, snapshot.secrets, grants, now)
        for key, gw in serving)
    by_key = {s.key: s for s in states}
    table = _Table()
    attached: dict[tuple[str, str], set] = {}
    live: set[tuple[str, str]] = set()
    if cache is not None:
        cache.begin(by_key, snapshot.namespaces, snapshot.reference_grants)
    http = _translate_routes(HTTP_ROUTE, snapshot.http_routes, by_key, snapshot, grants, table, attached, cache, live)
    grpc = _translate_routes(GRPC_ROUTE, snapshot.grpc_routes, by_key, snapshot, grants, table, attached, cache, live)
    if cache is not None:
        cache.keep(live)
    certificates, served = [], {}
    for state in states:
        gateway_statuses[state.key] = _gateway_status(state, attached)
        binds = [(state.bind(lst), lst) for lst in state.listeners]
        served[state.key] = tuple((bind, lst.hostname or hostnames.ANY) for bind, lst in binds if bind is not None)
        certificates += [TlsBinding(bind, lst.hostname or hostnames.ANY, lst.secrets)
                         for bind, lst in binds if bind is not None and lst.protocol == "HTTPS"]
    translation = GatewayTranslation(table.freeze(certificates, cache), classes, gateway_statuses, http, grpc, served)
    if cache is not None:
        cache._kept = _Kept(translation, table, attached, {HTTP_ROUTE: http, GRPC_ROUTE: grpc}, tuple(states),
                            snapshot.namespaces, grants)
    return translation


def update(previous: GatewayTranslation, routes: Mapping[tuple[str, str], Mapping | None], services,
           cache: RouteCache) -> tuple[GatewayTranslation, dict[tuple[Bind, str], HostRoutes | None]] | None:
    """``previous`` with the routes in ``routes`` ((kind, "ns/name") -> the
    current object, None: deleted) translated again, and the hosts that
    changed ((bind, hostname) -> its routes, None: gone); None when
    ``previous`` is not the last build or update made with ``cache`` (build
    in full then). ``services``: the current Services (``get(key)``).

    Equal to ``build`` of the same objects as long as nothing else changed
    since ``previous``: the Gateways, GatewayClasses, Namespaces,
    ReferenceGrants and Secrets, the options and the Services other routes
    looked up (the caller adds their ``cache.readers`` to ``routes``);
    tests/ingress/test_gateway_incremental.py checks it over random changes.
    A route's translation depends on nothing but those and the route itself,
    and a host's entries are ordered by their precedence keys alone, so the
    routes not named keep their entries and statuses as they are."""
    kept = cache._kept
    if kept is None or kept.translation is not previous:
        return None
    cache._kept = None  # until it is whole again: an exception midway leaves nothing to update from
    with gcpause.paused:
        out = _update(kept, routes, services, cache)
    cache._kept = kept
    return out


def _update(kept: _Kept, routes: Mapping[tuple[str, str], Mapping | None], services,
            cache: RouteCache) -> tuple[GatewayTranslation, dict[tuple[Bind, str], HostRoutes | None]]:
    table, attached = kept.table, kept.attached
    by_key = {s.key: s for s in kept.states}
    table.dirty = set()
    for (kind, key), route in routes.items():
        old = cache._forget(kind, key)
        if old is not None:  # take out what its last translation put in
            _, _, _, listeners, placed = old
            for listener in listeners:
                routes_of = attached.get(listener)
                if routes_of is not None:
                    routes_of.discard((kind, key))
            for bind, hostname, precedence, _entry in placed:
                table.remove(bind, hostname, precedence)
            kept.statuses[kind].pop(key, None)
        if route is None:
            continue
        status, listeners, placed, seen = _translate_route(kind, key, route, by_key, services, kept.namespaces,
                                                           kept.grants)
        cache.put(kind, key, route, seen, status, listeners, placed)
        if status is None:
            continue
        kept.statuses[kind][key] = status
        for listener in listeners:
            attached.setdefault(listener, set()).add((kind, key))
        for bind, hostname, precedence, entry in placed:
            table.add(bind, hostname, precedence, entry)
    dirty, table.dirty = table.dirty, None
    changed: dict[tuple[Bind, str], HostRoutes | None] = {}
    hosts = list(kept.translation.table.hosts)
    for bind, hostname in dirty:
        host = table.host(bind, hostname)
        old = cache._hosts.get((bind, hostname))
        if host is not None and old is not None and old.entries == host.entries:
            continue  # the same entries again (a route changed back, or a change that placed nothing new)
        if old is not None:
            at = bisect.bisect_left(hosts, _host_order(old), key=_host_order)
            if at < len(hosts) and hosts[at] is old:
                del hosts[at]
            del cache._hosts[(bind, hostname)]
        if host is not None:
            bisect.insort(hosts, host, key=_host_order)
            cache._hosts[(bind, hostname)] = host
        changed[(bind, hostname)] = host
    previous = kept.translation
    gateways = dict(previous.gateways)
    for state in kept.states:
        gateways[state.key] = _gateway_status(state, attached)
    translation = GatewayTranslation(GatewayTable(tuple(hosts), previous.table.certificates), previous.classes,
                                     gateways, kept.statuses[HTTP_ROUTE], kept.statuses[GRPC_ROUTE], previous.served)
    kept.translation = translation
    return translation, changed
