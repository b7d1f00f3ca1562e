"""Translation of what changed: the route-change path of the controller.

A change of one Ingress (or of a Service or TLS Secret some use) changes the
servers of a few hosts. A full ``translate.build`` still walks all 10,000
Ingresses to find that out (about 0.15 s at 10,000, most of a route change's
latency). Here the controller instead:

1. records what changed (``Changes``): each changed Ingress's key, and the
   hosts, Services and TLS Secrets of its old version (``refs``; the new
   one is read from the store); a changed Service or Secret by key;
2. finds the ``Neighbourhood``: the closure of those over shared hosts (rule
   and TLS hosts), Services and TLS Secrets, through the Ingress store's
   indexes (``Related``), so every Ingress whose translation could read a
   changed object, or whose outcome (path and TLS conflicts, the owner of a
   backend's settings, a canary's primary, a certificate's host list) could
   depend on one, is in it;
3. translates just those Ingresses (``translate.build`` of a snapshot of
   them and what they reference: the same pure steps and the same caches);
4. ``splice``\\s the result into the last configuration: the servers of the
   neighbourhood's hosts, the backends those servers used and the
   certificates of its Secrets are replaced, the problems of its Ingresses
   too; everything else is kept.

The result equals a full build because a full build decides nothing across
the neighbourhood's boundary, except through the things for which
``neighbourhood`` or ``splice`` answer None (the caller then builds in full):
an Ingress that reaches beyond its own hosts and Services (rules without a
host: the catch-all; ``spec.defaultBackend``; the ``server-alias`` and
``default-backend`` annotations; a wildcard TLS host, which covers other
hosts), the ``--default-backend-service`` or ``--default-ssl-certificate``
used as an ordinary backend or Secret, a problem on a Service (only the
default backend's), a full certificate store, or a neighbourhood larger than
``limit``. A changed IngressClass or ConfigMap is always a full build, and
so is a sync with nothing recorded (the periodic resync, a retry), which
repairs whatever a missed event left. ``tests/ingress/test_translate_incremental.py``
checks ``splice`` against a fresh full build over random change sequences.

An annotation that makes an Ingress's translation read or change another
host or Service than its own must be added to ``CROSSING_ANNOTATIONS``.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Callable

from platformd.common.store import index_ingress_by_secret, index_ingress_by_service, key_of
from platformd.ingress import annotations as ann_mod
from platformd.ingress import certificates as certs_mod
from platformd.ingress.translate import TranslateOptions, Translation
from platformd.ingress.webhook_review import index_ingress_by_host

__all__ = ["CROSSING_ANNOTATIONS", "Changes", "Neighbourhood", "Related", "index_ingress_by_host",
           "neighbourhood", "refs", "splice"]

#: Annotations (without the prefix) whose effect reaches another host or
#: Service than the Ingress's own rules name: an Ingress with one is always
#: translated with everything.
CROSSING_ANNOTATIONS = (
    "server-alias", "default-backend",
    "from-to-www-redirect",  # makes a server for another host name (www_redirect)
    "mirror-target",  # may name another Service, whose Backend the copies use
    "custom-http-errors",  # the error backend is another Service's
    "custom-headers",  # reads a ConfigMap (Translation.configmaps_used)
    "ssl-passthrough",  # Configuration.passthrough: a list across all Ingresses
)

_NAME = operator.attrgetter("name")
_HOSTNAME = operator.attrgetter("hostname")
_ID = operator.attrgetter("id")

# What ``Related`` is asked by: kinds of reference.
HOST, SERVICE, SECRET, DEFAULT_BACKEND = "host", "service", "secret", "default-backend"

Related = Callable[[str, str], Iterable[dict]]
"""``related(kind, value)``: the Ingresses (current objects) that name
``value`` as a ``kind`` (``HOST``: ``index_ingress_by_host``; ``SERVICE``:
``index_ingress_by_service``; ``SECRET``: ``index_ingress_by_secret``;
``DEFAULT_BACKEND``: the Service of a ``default-backend`` annotation)."""


@dataclass
class Changes:
    """What changed since the last sync (the controller's handlers fill it).

    ``everything``: a change the neighbourhood cannot follow (an IngressClass,
    the ConfigMap, an Ingress that reached or reaches beyond its own hosts);
    the next sync builds in full. Not thread-safe: the owner locks it."""

    ingresses: set[str] = field(default_factory=set)  # "ns/name" of changed Ingresses
    hosts: set[str] = field(default_factory=set)
    services: set[str] = field(default_factory=set)
    secrets: set[str] = field(default_factory=set)
    everything: bool = False

    def __bool__(self) -> bool:
        return bool(self.everything or self.ingresses or self.hosts or self.services or self.secrets)

    def ingress(self, old: Mapping | None, new: Mapping | None) -> None:
        """Record a change of an Ingress (``old``/``new``: None when added/deleted).

        The new version needs no more than its key: ``neighbourhood`` reads
        the current object from the store. The old one's hosts, Services
        and Secrets are recorded now: they may be gone from the store, and
        their servers and backends must be rebuilt."""
        self.ingresses.add(key_of(new if new is not None else old))
        if old is None:
            return
        found = refs(old)
        if found is None:
            self.everything = True
            return
        hosts, services, secrets = found
        self.hosts.update(hosts)
        self.services.update(services)
        self.secrets.update(secrets)


def crosses(obj: Mapping) -> bool:
    """Whether an Ingress's translation reaches beyond its own hosts and Services."""
    spec = obj.get("spec") or {}
    if spec.get("defaultBackend"):
        return True
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if any(ann_mod.PREFIX + name in annotations for name in CROSSING_ANNOTATIONS):
        return True
    rule_hosts = []
    for rule in spec.get("rules") or ():
        host = rule.get("host") if isinstance(rule, Mapping) else None
        if not host:
            return True  # the catch-all server's
        rule_hosts.append(host)
    for entry in spec.get("tls") or ():
        names = (entry.get("hosts") if isinstance(entry, Mapping) else None) or rule_hosts
        if any(isinstance(name, str) and name.startswith("*") for name in names):
            return True  # a wildcard TLS host covers hosts of other Ingresses
    return False


def refs(obj: Mapping) -> tuple[list[str], list[str], list[str]] | None:
    """(hosts, Services, TLS Secrets) an Ingress names; None when it ``crosses``."""
    if crosses(obj):
        return None
    return index_ingress_by_host(obj), index_ingress_by_service(obj), index_ingress_by_secret(obj)


@dataclass(frozen=True)
class Neighbourhood:
    """The Ingresses to translate again, and the hosts, Services and Secrets they
    (and the old versions of the changed ones) name: what ``splice`` replaces."""

    ingresses: Mapping[str, dict]  # key -> current object
    changed: frozenset[str]  # keys of changed Ingresses (maybe deleted)
    hosts: frozenset[str]
    services: frozenset[str]
    secrets: frozenset[str]


def neighbourhood(changes: Changes, get: Callable[[str], dict | None], related: Related,
                  options: TranslateOptions, limit: int = 1000) -> Neighbourhood | None:
    """The closure of ``changes`` (see the module docstring); None: build in full."""
    if changes.everything:
        return None
    members: dict[str, dict] = {}
    seen = {HOST: set(), SERVICE: set(), SECRET: set()}
    todo = [(HOST, h) for h in changes.hosts] + [(SERVICE, s) for s in changes.services] + \
           [(SECRET, s) for s in changes.secrets]

    def add(obj: dict) -> bool:
        key = key_of(obj)
        if key in members:
            return True
        found = refs(obj)
        if found is None:
            return False
        members[key] = obj
        for kind, values in zip((HOST, SERVICE, SECRET), found):
            todo.extend((kind, value) for value in values if value not in seen[kind])
        return len(members) <= limit

    fallback = options.default_backend_service
    if fallback and (any(related(SERVICE, fallback)) or any(related(DEFAULT_BACKEND, fallback))):
        return None  # its backend's settings are decided across all hosts
    for key in changes.ingresses:
        obj = get(key)
        if obj is not None and not add(obj):
            return None
    while todo:
        kind, value = todo.pop()
        if value in seen[kind]:
            continue
        seen[kind].add(value)
        found = list(related(kind, value))
        if kind == HOST and not value.startswith("*"):
            # Who claims the wildcard TLS host covering it (they cross: None).
            parent = value.partition(".")[2]
            found += related(HOST, f"*.{parent}") if parent else ()
        if kind == SERVICE:
            if value == fallback:
                return None  # a change of the default backend service (its users are every host)
            found += related(DEFAULT_BACKEND, value)
        if kind == SECRET and value == options.default_ssl_certificate:
            return None  # its certificate lists the hosts of every Ingress using it
        for obj in found:
            if not add(obj):
                return None
    return Neighbourhood(members, frozenset(changes.ingresses), frozenset(seen[HOST]), frozenset(seen[SERVICE]),
                         frozenset(seen[SECRET]))


def splice(previous: Translation, partial: Translation, hood: Neighbourhood,
           options: TranslateOptions) -> Translation | None:
    """``previous`` with the neighbourhood's part replaced by ``partial`` (the
    translation of ``hood.ingresses`` alone); None where the two cannot be
    joined (see the module docstring): build in full."""
    old, new = previous.configuration, partial.configuration
    if new.default_server_locations or not (new.settings is old.settings or new.settings == old.settings):
        return None
    if _has_shared_problem(previous.problems) or _has_shared_problem(partial.problems):
        return None
    # Servers: the neighbourhood's hosts come from the partial translation.
    if not all(server.hostname in hood.hosts for server in new.servers):
        return None  # a host named differently from the index's spelling: not ours to place
    dropped = _found(old.servers, hood.hosts, _HOSTNAME)
    servers = _replaced(old.servers, dropped, new.servers, _HOSTNAME)
    # Backends: those the dropped servers used (with their canaries) came
    # from the neighbourhood's Services alone; the partial's replace them.
    # The one exception is --default-backend-service's (the partial's
    # catch-all: its members have no rules of their own there), which any
    # host without a "/" uses: a full build has it when anything uses it.
    fallback = new.default_backend
    gone = _found(old.backends, {loc.backend for server in dropped for loc in server.locations}, _NAME)
    gone += _found(old.backends, {name for b in gone for name in b.alternative_backends}, _NAME)
    fresh = [b for b in new.backends if b.name != fallback]
    if fallback is not None:
        gone += _found(old.backends, (fallback,), _NAME)
        if old.default_backend == fallback or any(
                loc.backend == fallback for server in servers or () for loc in server.locations):
            fresh += [b for b in new.backends if b.name == fallback]
    backends = _replaced(old.backends, gone, fresh, _NAME)
    # Certificates: those of the neighbourhood's Secrets.
    default_cert = options.default_ssl_certificate
    certificates = _replaced(old.certificates, _found(old.certificates, hood.secrets, _ID),
                             [c for c in new.certificates if c.id != default_cert], _ID)
    if servers is None or backends is None or certificates is None:
        return None  # something both sides made: shared across the boundary after all
    if sum(len(c.cert_pem) + len(c.key_pem) for c in certificates) > certs_mod.STORE_BUDGET:
        return None  # the store's budget decides across all certificates
    configuration = replace(old, servers=servers, backends=backends, certificates=certificates)
    mine = hood.changed | hood.ingresses.keys()
    problems = {p for p in previous.problems if not (p.kind == "Ingress" and f"{p.namespace}/{p.name}" in mine)}
    problems.update(partial.problems)
    owned = list(previous.owned_ingresses)
    now_owned = set(partial.owned_ingresses)
    for key in hood.changed:
        at = bisect.bisect_left(owned, key)
        present = at < len(owned) and owned[at] == key
        if present and key not in now_owned:
            del owned[at]
        elif not present and key in now_owned:
            owned.insert(at, key)
    return Translation(configuration, tuple(sorted(problems)), tuple(owned),
                       previous.configmaps_used | partial.configmaps_used)


def _has_shared_problem(problems: Iterable) -> bool:
    """A problem that depends on more than the Ingresses it is about."""
    return any(p.kind == "Service" or p.reason == "CertificateStoreFull" for p in problems)


def _found(items: tuple, names: Iterable[str], key) -> list:
    """The items of ``items`` (sorted by ``key``, keys unique) whose key is in ``names``."""
    found = []
    for name in names:
        if name is None:  # a location without a backend (a redirect)
            continue
        at = bisect.bisect_left(items, name, key=key)
        if at < len(items) and key(items[at]) == name:
            found.append(items[at])
    return found


def _replaced(items: tuple, dropped: Iterable, fresh: Iterable, key) -> tuple | None:
    """``items`` (sorted by ``key``, keys unique) less ``dropped`` (some of its
    items), plus ``fresh``, still sorted; None when a fresh key is there already.

    By bisection: a change touches a few of 10,000 servers or 20,000 backends."""
    out = list(items)
    for item in dropped:
        at = bisect.bisect_left(out, key(item), key=key)
        if at < len(out) and out[at] is item:
            del out[at]
    for item in fresh:
        name = key(item)
        at = bisect.bisect_left(out, name, key=key)
        if at < len(out) and key(out[at]) == name:
            return None
        out.insert(at, item)
    return tuple(out)
