"""Kubernetes objects → data plane ``Configuration`` (one pure function).

``build(snapshot, options)`` reads a ``Snapshot`` and returns a
``Translation``: the whole configuration, the problems found (each becomes a
Kubernetes Event on the object named), and the Ingresses that are ours (for
status). It never raises for bad input: whatever is wrong is reported and
left out, and everything else keeps serving.

Each sync translates everything again, but what did not change is not
redone: pure steps (a Service's endpoints, a location, a server, a backend)
are reused across translations when their inputs are the same objects
(``_Reuse``), so the result is exactly a fresh translation's and unchanged
hosts keep their Server objects (which ``view`` and ``routes`` reuse in turn).

Steps (``_Translator.run``): global settings from the ConfigMap → our
Ingresses, oldest first → annotations (an Ingress with a refused annotation
contributes nothing) → routes (host, path match, Service port) with conflict
resolution → canaries merged into their primaries → TLS claims and
certificates → backends with endpoints → servers → the catch-all.

Semantics decided here (see also each module's docstring):

* Order. Ingresses are ranked by ``creationTimestamp``, then
  ``namespace/name``; the first to claim a host+path+match (or a TLS host, a
  backend's settings, an alias, the catch-all) keeps it, later ones get a
  warning Problem. Result and problems are sorted, so equal snapshots give
  equal ``Translation``\\s whatever the input order.
* "Bad part". A refused annotation (invalid value, snippet, ``auth-*``) costs
  the *whole Ingress*: every annotation here is Ingress-wide, and serving its
  paths without, say, an allowlist would widen access. An invalid host costs
  that rule; an invalid path or a Resource backend costs that path; a missing
  Service or port keeps the path with an empty backend (503) and a Problem;
  a bad TLS Secret costs only the certificate (the default one is served).
* Paths. ``Exact`` and ``Prefix`` always keep their Kubernetes meaning.
  ``ImplementationSpecific`` is ``Prefix`` unless the Ingress sets
  ``use-regex`` or ``rewrite-target``, then it is a case-insensitive regex
  anchored at the start. Unlike ingress-nginx this is per Ingress, not per
  host: another team's ``use-regex`` never turns our Prefix paths into
  regexes that match ``/foobar`` for ``/foo``. On a host with both, the
  longest matching path wins, Exact first (``view`` renders that).
* Hosts. Lower-cased; a host with rules but no path (or only a TLS entry)
  still gets a server. Each host's unmatched paths go to the ``spec.
  defaultBackend`` of its oldest Ingress that has one (with that Ingress's
  annotations, so an allowlist guards it too), else to
  ``--default-backend-service``, else get a 404. Rules without a host
  belong to the catch-all server ``_`` (any host no rule names): their paths
  become ``Configuration.default_server_locations`` with their Ingress's
  annotations, the same precedence rules as a named host (see ``view``),
  and no TLS of their own (only ``force-ssl-redirect`` redirects them).
* Catch-all. ``default_backend`` is, in order: a host-less ``Prefix /`` rule
  without per-location annotations, the ``spec.defaultBackend`` of the
  oldest Ingress without rules, the ``--default-backend-service``; none →
  404. A host-less ``/`` rule with annotations is a catch-all location
  instead (and so takes the ``/`` of the catch-all server).
* TLS. A ``spec.tls`` entry without hosts covers all rule hosts of its
  Ingress. A TLS host's locations redirect HTTP to HTTPS unless
  ``ssl-redirect: "false"`` (ConfigMap default ``ssl-redirect``), whether its
  Secret was usable or not (the default certificate still terminates TLS);
  ``force-ssl-redirect`` redirects any host. A wildcard TLS host covers one
  label. A Secret whose certificate does not cover the host is not used for it.
  A TLS host is ``Server.tls`` (HSTS on its https answers) either way.
  A usable ``--default-ssl-certificate`` is ``Configuration.default_certificate``:
  served for TLS names no certificate covers.
* Canaries (``canary: "true"``) make no locations of their own (their TLS
  and defaultBackend are ignored too): each path's Service becomes an
  alternative backend of the primary at the same host, path and match,
  carrying the traffic-shaping policy. As in ingress-nginx the
  alternative is attached to the primary *backend*, so it applies wherever
  that backend is used.
* Backends are named ``namespace-service-port`` (the port as the Ingress
  wrote it, number or name). Backend-wide settings (``load-balance``,
  ``upstream-hash-by``, affinity, ``service-upstream``) come from the oldest
  Ingress using the backend; a later one asking otherwise gets a Problem.
* ``default-backend`` (annotation): a path whose Service has no endpoints is
  sent to that Service (its first port) instead, as in ingress-nginx.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, TypeVar

from platformd.ingress import annotations as ann_mod
from platformd.ingress import certificates as certs_mod
from platformd.ingress import endpoints as eps_mod
from platformd.ingress import gcpause, globalconfig
from platformd.ingress import validate as v
from platformd.ingress.classes import is_ours
from platformd.ingress.model import (
    Backend,
    Certificate,
    Configuration,
    Location,
    PathMatch,
    Redirect,
    Server,
    check_path,
    prefix_base,
)
from platformd.ingress.snapshot import Issue, Snapshot, key_of

__all__ = ["Problem", "TranslateOptions", "Translation", "build", "is_ours"]

T = TypeVar("T")


@dataclass(frozen=True)
class TranslateOptions:
    controller_class: str = "k8s.io/platform-ingress"
    ingress_class: str = "platform"
    watch_ingress_without_class: bool = False
    default_backend_service: str | None = None  # "ns/name"
    default_ssl_certificate: str | None = None  # "ns/name"
    allow_snippet_annotations: bool = False
    http_port: int = 80
    https_port: int = 443
    # Unix time certificates are checked against; None reads the wall clock
    # once per build. (The one input that is not in the snapshot.)
    now: float | None = None


@dataclass(frozen=True, order=True)
class Problem:
    """Something wrong with one object; becomes a Kubernetes Event on it."""

    kind: str
    namespace: str
    name: str
    reason: str
    message: str
    type: str = "Warning"


@dataclass(frozen=True)
class Translation:
    configuration: Configuration
    problems: tuple[Problem, ...]
    owned_ingresses: tuple[str, ...]  # "ns/name" of Ingresses that are ours (for status)


def build(snapshot: Snapshot, options: TranslateOptions) -> Translation:
    """The whole desired configuration for ``snapshot`` (see module docstring)."""
    with gcpause.paused:  # see gcpause: a third of a translation otherwise
        return _Translator(snapshot, options).run()


class _Reuse:
    """Results of pure steps of recent translations, keyed by their inputs.

    A sync after one new Ingress translates 10,000 unchanged ones again.
    Store objects are never modified (a change is a new object) and model
    objects are frozen, so a result made from the same inputs (the same
    objects, by identity) is still right, and equal inputs give equal
    configurations whether or not an entry was reused. ``pins`` keeps the
    objects a key names by ``id`` alive, so an id cannot be reused while its
    entry exists. Two generations: an entry is kept while used at least
    every other ``limit`` lookups-that-missed, so memory follows what recent
    translations used. Unlocked: a race only makes a result twice.
    """

    def __init__(self, limit: int = 1 << 17) -> None:
        self.limit = limit
        self._young: dict[tuple, tuple[object, object]] = {}
        self._old: dict[tuple, tuple[object, object]] = {}

    def get(self, key: tuple, pins: object, make: Callable[[], T]) -> T:
        hit = self._young.get(key)
        if hit is None:
            hit = self._old.pop(key, None) or (pins, make())
            self._young[key] = hit
            if len(self._young) > self.limit:
                self._old, self._young = self._young, {}
        return hit[1]  # type: ignore[return-value]


_reuse = _Reuse()


# --- internal records ------------------------------------------------------------


@dataclass(frozen=True)
class _Ingress:
    key: str
    namespace: str
    name: str
    obj: dict = field(repr=False, compare=False)
    ann: ann_mod.Annotations = field(compare=False)

    def problem(self, reason: str, message: str) -> Problem:
        return Problem("Ingress", self.namespace, self.name, reason, message)


@dataclass(frozen=True)
class _ServiceRef:
    namespace: str
    name: str
    port: int | str
    # Derived once: asked for several times per route.
    backend_name: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend_name", f"{self.namespace}-{self.name}-{self.port}")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class _Route:
    ing: _Ingress
    host: str  # "" = no host (catch-all)
    path: str
    match: PathMatch
    service: _ServiceRef
    # Derived once: asked for several times per route.
    key: tuple[str, PathMatch, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        base = prefix_base(self.path) if self.match is PathMatch.PREFIX else self.path
        object.__setattr__(self, "key", (self.host, self.match, base))

    def describe(self) -> str:
        return f"{self.match.value} path {self.path!r} of host {self.host or '*'!r}"


@dataclass
class _BackendState:
    ref: _ServiceRef
    owner: _Ingress | None  # None: --default-backend-service
    endpoints: tuple
    settings: tuple  # (load_balance, upstream_hash_by, affinity, service_upstream)
    issues: tuple[Issue, ...] = ()
    alternatives: set[str] = field(default_factory=set)
    policy: object = None
    policy_owner: _Ingress | None = None


_PATH_TYPES = {"Exact": PathMatch.EXACT, "Prefix": PathMatch.PREFIX}


class _Translator:
    def __init__(self, snapshot: Snapshot, options: TranslateOptions) -> None:
        self.snap = snapshot
        self.opts = options
        self.now = options.now if options.now is not None else time.time()
        self.problems: list[Problem] = []
        self.backends: dict[str, _BackendState] = {}
        self.reported: set[tuple[str, str]] = set()  # (ingress key, backend) endpoint issues already told
        self.primary_backends: dict[tuple, str] = {}  # route key -> backend its location uses
        self.defaults = globalconfig.Defaults()

    # -- the steps -----------------------------------------------------------------

    def run(self) -> Translation:
        config = self._global_config()
        self.defaults = config.defaults
        owned = self._our_ingresses()
        ingresses = [ing for ing in (self._annotations(obj) for obj in owned) if ing is not None]
        primaries = [i for i in ingresses if not i.ann.canary]
        canaries = [i for i in ingresses if i.ann.canary]
        routes = self._winning_routes(primaries)
        hosts = self._hosts(primaries)
        self._merge_canaries(canaries, routes)
        tls_hosts, host_certs, certificates = self._tls(primaries, hosts)
        servers = self._servers(hosts, routes, tls_hosts, host_certs)
        default_backend, catch_all = self._catch_all(routes, primaries)
        default_certificate = self.opts.default_ssl_certificate
        configuration = Configuration(
            servers=tuple(servers),
            backends=self._backend_models(servers, catch_all, default_backend),
            certificates=tuple(certificates),
            settings=config.settings,
            default_backend=default_backend,
            default_server_locations=tuple(catch_all),
            default_certificate=(
                default_certificate if any(c.id == default_certificate for c in certificates) else None
            ),
        )
        return Translation(
            configuration=configuration,
            problems=tuple(sorted(set(self.problems))),
            owned_ingresses=tuple(sorted(key_of(obj) for obj in owned)),
        )

    def _global_config(self) -> globalconfig.GlobalConfig:
        config = globalconfig.parse(self.snap.configmap, http_port=self.opts.http_port, https_port=self.opts.https_port)
        meta = (self.snap.configmap or {}).get("metadata") or {}
        for issue in config.issues:
            self.problems.append(Problem("ConfigMap", meta.get("namespace", ""), meta.get("name", ""), issue.reason, issue.message))
        return config

    def _our_ingresses(self) -> list[dict]:
        classes = self.snap.ingress_classes
        ours = [obj for obj in self.snap.ingresses if is_ours(obj, classes, self.opts)]

        def rank(obj: dict) -> tuple[str, str]:
            meta = obj.get("metadata") or {}
            # RFC 3339 UTC timestamps sort as text; a missing one sorts last.
            return (meta.get("creationTimestamp") or "\uffff", key_of(obj))

        return sorted(ours, key=rank)

    def _annotations(self, obj: dict) -> _Ingress | None:
        meta = obj.get("metadata") or {}
        parsed = ann_mod.parse(meta.get("annotations"), allow_snippets=self.opts.allow_snippet_annotations)
        ing = _Ingress(key_of(obj), meta.get("namespace", ""), meta.get("name", ""), obj, parsed.annotations)
        for key in parsed.unsupported:
            self.problems.append(ing.problem("UnsupportedAnnotation", f"annotation {key} is not supported and was ignored"))
        for error in parsed.errors:
            self.problems.append(ing.problem("InvalidAnnotation", error.message + "; the Ingress is not served"))
        return None if parsed.errors else ing

    # -- routes ----------------------------------------------------------------------

    def _routes_of(self, ing: _Ingress) -> Iterable[_Route]:
        for rule in (ing.obj.get("spec") or {}).get("rules") or ():
            host = self._host(ing, rule.get("host"))
            if host is None:
                continue
            for item in ((rule.get("http") or {}).get("paths")) or ():
                route = self._route(ing, host, item)
                if route is not None:
                    yield route

    def _host(self, ing: _Ingress, raw: object) -> str | None:
        if not raw:
            return ""
        try:
            return v.hostname("host", raw)
        except v.ValidationError as exc:
            self.problems.append(ing.problem("InvalidHost", f"host {raw!r} {exc.reason}; its rule is ignored"))
            return None

    def _route(self, ing: _Ingress, host: str, item: dict) -> _Route | None:
        path = item.get("path") or "/"
        path_type = item.get("pathType") or "ImplementationSpecific"
        match = _PATH_TYPES.get(path_type)
        if match is None:
            match = PathMatch.REGEX if ing.ann.regex_paths else PathMatch.PREFIX
        backend = item.get("backend") or {}
        if backend.get("resource") is not None:
            self.problems.append(ing.problem(
                "ResourceBackendUnsupported",
                f"path {path!r} of host {host or '*'!r} has a resource backend; only Service backends are supported, the path is ignored",
            ))
            return None
        service = self._service_ref(ing, backend.get("service"))
        if service is None:
            self.problems.append(ing.problem("InvalidBackend", f"path {path!r} of host {host or '*'!r} has no valid Service backend; the path is ignored"))
            return None
        try:
            check_path(match, path)  # the backend name was checked by _service_ref
        except v.ValidationError as exc:
            self.problems.append(ing.problem("InvalidPath", f"path {path!r} ({match.value}) of host {host or '*'!r}: {exc.reason}; the path is ignored"))
            return None
        return _Route(ing, host, path, match, service)

    @staticmethod
    def _service_ref(ing: _Ingress, service: dict | None) -> _ServiceRef | None:
        if not service or not service.get("name"):
            return None
        port = service.get("port") or {}
        number, name = port.get("number"), port.get("name")
        chosen = number if isinstance(number, int) and not isinstance(number, bool) else name
        if chosen is None or chosen == "":
            return None
        ref = _ServiceRef(ing.namespace, str(service["name"]), chosen)
        try:
            v.backend_name("backend", ref.backend_name)
        except v.ValidationError:
            return None
        return ref

    def _winning_routes(self, ingresses: list[_Ingress]) -> dict[tuple, _Route]:
        winners: dict[tuple, _Route] = {}
        for ing in ingresses:
            for route in self._routes_of(ing):
                held = winners.get(route.key)
                if held is None:
                    winners[route.key] = route
                elif held.ing is not ing or held != route:
                    self.problems.append(ing.problem(
                        "PathConflict",
                        f"{route.describe()} is already served by Ingress {held.ing.key}; this one is ignored",
                    ))
        return winners

    def _hosts(self, ingresses: list[_Ingress]) -> dict[str, list[_Ingress]]:
        """Every named host with the Ingresses contributing to it, oldest first."""
        hosts: dict[str, list[_Ingress]] = {}
        seen: set[tuple[str, str]] = set()  # (host, Ingress key): a set, not `in` on each host's list
        for ing in ingresses:
            for rule in (ing.obj.get("spec") or {}).get("rules") or ():
                if not rule.get("host"):
                    continue
                try:
                    host = v.hostname("host", rule["host"])
                except v.ValidationError:
                    continue  # reported by _host
                if (host, ing.key) not in seen:
                    seen.add((host, ing.key))
                    hosts.setdefault(host, []).append(ing)
        return hosts

    # -- backends -----------------------------------------------------------------------

    def _backend(self, ing: _Ingress, ref: _ServiceRef, *, use_default: bool = True) -> str:
        """Register ``ref`` for ``ing``; the backend name its locations use.

        The first (oldest) Ingress to use a backend fixes its settings and how
        its endpoints are found; every user hears about endpoint problems.
        """
        settings = (ing.ann.load_balance, ing.ann.upstream_hash_by, ing.ann.affinity, ing.ann.service_upstream)
        state = self._register(ref, settings, ing)
        if settings != state.settings and ing is not state.owner:
            self.problems.append(ing.problem(
                "BackendSettingsConflict",
                f"backend {ref.backend_name} already has load-balancing/affinity/service-upstream settings "
                f"from Ingress {state.owner.key if state.owner else '--default-backend-service'}; those are used",
            ))
        self._tell(ing, ref.backend_name, state.issues)
        if use_default and not state.endpoints and ing.ann.default_backend:
            fallback = self._annotation_default_backend(ing)
            if fallback is not None:
                return fallback
        return ref.backend_name

    def _register(self, ref: _ServiceRef, settings: tuple, owner: _Ingress | None) -> _BackendState:
        state = self.backends.get(ref.backend_name)
        if state is None:
            service = self.snap.services.get(ref.key)
            slices = tuple(self.snap.endpoint_slices.get(ref.key, ()))
            resolved = _reuse.get(
                ("resolve", ref.key, ref.port, settings[3], id(service), *map(id, slices)), (service, slices),
                lambda: eps_mod.resolve(ref.key, service, slices, ref.port, service_upstream=settings[3]),
            )
            state = _BackendState(ref, owner, resolved.endpoints, settings, resolved.issues)
            self.backends[ref.backend_name] = state
        return state

    def _tell(self, ing: _Ingress, backend: str, issues: Iterable[Issue]) -> None:
        if (ing.key, backend) in self.reported:
            return
        self.reported.add((ing.key, backend))
        for issue in issues:
            self.problems.append(ing.problem(issue.reason, issue.message))

    def _first_port_ref(self, namespace: str, name: str) -> _ServiceRef | None:
        service = self.snap.services.get(f"{namespace}/{name}")
        ports = ((service or {}).get("spec") or {}).get("ports") or ()
        if not ports or not isinstance(ports[0].get("port"), int):
            return None
        return _ServiceRef(namespace, name, ports[0]["port"])

    def _annotation_default_backend(self, ing: _Ingress) -> str | None:
        ref = self._first_port_ref(ing.namespace, ing.ann.default_backend or "")
        if ref is None:
            self.problems.append(ing.problem(
                "DefaultBackendNotFound",
                f"default-backend Service {ing.namespace}/{ing.ann.default_backend} not found or has no ports",
            ))
            return None
        return self._backend(ing, ref, use_default=False)

    def _spec_default_backend(self, ing: _Ingress) -> str | None:
        backend = (ing.obj.get("spec") or {}).get("defaultBackend")
        if not backend:
            return None
        if backend.get("resource") is not None:
            self.problems.append(ing.problem(
                "ResourceBackendUnsupported", "spec.defaultBackend is a resource backend; only Service backends are supported"
            ))
            return None
        ref = self._service_ref(ing, backend.get("service"))
        if ref is None:
            self.problems.append(ing.problem("InvalidBackend", "spec.defaultBackend has no valid Service backend"))
            return None
        return self._backend(ing, ref)

    def _backend_models(self, servers: list[Server], catch_all: list[Location],
                        default_backend: str | None) -> tuple[Backend, ...]:
        used: set[str] = {default_backend} if default_backend else set()
        used.update(loc.backend for loc in catch_all if loc.backend)
        for server in servers:
            used.update(loc.backend for loc in server.locations if loc.backend)
        for name in list(used):
            state = self.backends.get(name)
            if state is not None:
                used.update(state.alternatives)
        models = []
        for name in sorted(used):
            state = self.backends[name]
            load_balance, hash_by, affinity, _ = state.settings
            fields = (name, state.endpoints, load_balance or self.defaults.load_balance, hash_by, affinity,
                      tuple(sorted(state.alternatives)), state.policy)
            pins = (state.endpoints, fields[2], affinity, state.policy)
            models.append(_reuse.get(("backend", name, hash_by, fields[5], *map(id, pins)), pins,
                                     lambda: Backend(*fields)))
        return tuple(models)

    # -- canaries -------------------------------------------------------------------------

    def _merge_canaries(self, canaries: list[_Ingress], routes: dict[tuple, _Route]) -> None:
        for canary in canaries:
            for route in self._routes_of(canary):
                primary = routes.get(route.key)
                if primary is None:
                    self.problems.append(canary.problem(
                        "CanaryWithoutPrimary",
                        f"canary {route.describe()} has no primary Ingress serving the same host and path; ignored",
                    ))
                    continue
                primary_name = self._route_backend(primary)
                canary_name = self._backend(canary, route.service, use_default=False)
                if canary_name == primary_name:
                    self.problems.append(canary.problem(
                        "CanarySameBackend", f"canary {route.describe()} uses the primary's own backend {canary_name}; ignored"
                    ))
                    continue
                state = self.backends[canary_name]
                policy = canary.ann.traffic_shaping
                if state.policy is not None and (state.policy != policy or state.policy_owner is not canary):
                    if state.policy != policy:
                        self.problems.append(canary.problem(
                            "CanaryConflict",
                            f"backend {canary_name} already is a canary with another policy (Ingress {state.policy_owner.key}); ignored",
                        ))
                        continue
                state.policy = policy
                state.policy_owner = state.policy_owner or canary
                self.backends[primary_name].alternatives.add(canary_name)

    def _route_backend(self, route: _Route) -> str:
        """The backend a primary route's location uses (registered once)."""
        name = self.primary_backends.get(route.key)
        if name is None:
            name = self._backend(route.ing, route.service)
            self.primary_backends[route.key] = name
        return name

    # -- TLS ----------------------------------------------------------------------------

    def _tls(self, ingresses: list[_Ingress], hosts: dict[str, list[_Ingress]]):
        claims: dict[str, tuple[_Ingress, str | None]] = {}  # host -> (ingress, secret key or None)
        # Each Ingress's rule hosts, in ``hosts`` order, indexed once (not a scan per Ingress).
        rule_hosts_of: dict[str, list[str]] = {}
        for host, members in hosts.items():
            for member in members:
                rule_hosts_of.setdefault(member.key, []).append(host)
        for ing in ingresses:
            rule_hosts = rule_hosts_of.get(ing.key, [])
            for entry in (ing.obj.get("spec") or {}).get("tls") or ():
                secret = entry.get("secretName")
                secret_key = f"{ing.namespace}/{secret}" if secret else None
                names = entry.get("hosts") or rule_hosts
                for raw in names:
                    try:
                        host = v.hostname("tls.hosts", raw)
                    except v.ValidationError as exc:
                        self.problems.append(ing.problem("InvalidHost", f"TLS host {raw!r} {exc.reason}; ignored"))
                        continue
                    held = claims.get(host)
                    if held is None:
                        claims[host] = (ing, secret_key)
                    elif held[1] != secret_key:
                        self.problems.append(ing.problem(
                            "TLSConflict",
                            f"TLS host {host!r} already uses Secret {held[1]!r} (Ingress {held[0].key}); {secret_key!r} is ignored for it",
                        ))
        loaded: dict[str, certs_mod.Loaded] = {}
        told: set[tuple[str, str]] = set()
        host_certs: dict[str, str] = {}
        for host, (ing, secret_key) in sorted(claims.items()):
            if secret_key is None:
                continue
            if secret_key not in loaded:
                loaded[secret_key] = certs_mod.load(secret_key, self.snap.secrets.get(secret_key), self.now)
            cert = loaded[secret_key]
            if not cert.ok:
                if (ing.key, secret_key) not in told:
                    told.add((ing.key, secret_key))
                    self.problems.append(ing.problem(cert.issue.reason, cert.issue.message))
                continue
            if not certs_mod.covers(cert.names, host):
                self.problems.append(ing.problem(
                    "CertificateHostMismatch",
                    f"TLS Secret {secret_key!r} is not valid for host {host!r}; using the default certificate for it",
                ))
                continue
            host_certs[host] = secret_key
        certificates = self._certificates(loaded, host_certs)
        return frozenset(claims), host_certs, certificates

    def _certificates(self, loaded: dict[str, certs_mod.Loaded], host_certs: dict[str, str]) -> list[Certificate]:
        default = self.opts.default_ssl_certificate
        if default:
            cert = certs_mod.load(default, self.snap.secrets.get(default), self.now)
            namespace, _, name = default.partition("/")
            if not cert.ok:
                self.problems.append(Problem("Secret", namespace, name, cert.issue.reason, cert.issue.message))
            else:
                loaded.setdefault(default, cert)
        result = []
        for secret_key, cert in sorted(loaded.items()):
            names = tuple(sorted(h for h, k in host_certs.items() if k == secret_key))
            if not cert.ok or (not names and secret_key != default):
                continue
            result.append(Certificate(secret_key, cert.cert_pem, cert.key_pem, hostnames=names))
        return result

    # -- servers -------------------------------------------------------------------------

    def _servers(self, hosts, routes, tls_hosts, host_certs) -> list[Server]:
        by_host: dict[str, list[_Route]] = {}
        for route in routes.values():
            by_host.setdefault(route.host, []).append(route)
        taken: dict[str, _Ingress | None] = {h: None for h in hosts}  # name -> Ingress that aliased it
        servers = []
        for host in sorted(hosts):
            members = hosts[host]
            is_tls = host in tls_hosts or _wildcard_of(host) in tls_hosts
            locations = []
            for route in by_host.get(host, ()):
                location = self._location(route, is_tls)
                if location is not None:
                    locations.append(location)
            locations += self._host_extras(host, members, locations, is_tls)
            aliases = []
            for ing in members:
                for alias in ing.ann.server_aliases:
                    if alias in taken:
                        # An Ingress with several hosts offers its aliases to
                        # each; the first (sorted) host takes them quietly.
                        if taken[alias] is not ing:
                            self.problems.append(ing.problem(
                                "ServerAliasConflict", f"server-alias {alias!r} is already a host or alias; ignored"
                            ))
                        continue
                    taken[alias] = ing
                    aliases.append(alias)
            try:
                servers.append(self._server(host, tuple(aliases), host_certs.get(host) or host_certs.get(_wildcard_of(host)),
                                            tuple(locations), is_tls))
            except v.ValidationError as exc:  # defensive: every part was checked already
                self.problems.append(members[0].problem("InvalidServer", f"host {host!r}: {exc}; not served"))
        return servers

    @staticmethod
    def _server(host: str, aliases: tuple[str, ...], certificate: str | None, locations: tuple[Location, ...],
                tls: bool) -> Server:
        return _reuse.get(("server", host, aliases, certificate, tls, *map(id, locations)), locations,
                          lambda: Server(host, aliases=aliases, tls_certificate=certificate, locations=locations, tls=tls))

    def _location(self, route: _Route, is_tls: bool) -> Location | None:
        ann = route.ing.ann
        backend = None if ann.redirect is not None else self._route_backend(route)
        try:
            return self._annotated(ann, route.path, route.match, backend, is_tls)
        except v.ValidationError as exc:
            self.problems.append(route.ing.problem("InvalidPath", f"{route.describe()}: {exc}; the path is ignored"))
            return None

    def _annotated(self, ann: ann_mod.Annotations, path: str, match: PathMatch, backend: str | None,
                   is_tls: bool) -> Location:
        """A location carrying the Ingress-wide per-location annotations."""
        backend = None if ann.redirect is not None else backend
        ssl_redirect = self._ssl_redirect(ann, is_tls)
        return _reuse.get(("location", id(ann), path, match, backend, ssl_redirect), ann, lambda: Location(
            path,
            match=match,
            backend=backend,
            proxy=ann.proxy,
            access=ann.access,
            rate_limit=ann.rate_limit,
            cors=ann.cors,
            rewrite_target=ann.rewrite_target,
            redirect=ann.redirect,
            ssl_redirect=ssl_redirect,
        ))

    def _ssl_redirect(self, ann: ann_mod.Annotations, is_tls: bool) -> bool:
        if ann.force_ssl_redirect:
            return True
        return is_tls and (self.defaults.ssl_redirect if ann.ssl_redirect is None else ann.ssl_redirect)

    def _host_extras(self, host: str, members: list[_Ingress], locations: list[Location], is_tls: bool) -> list[Location]:
        """app-root and the host's default ``/`` (see module docstring)."""
        extras: list[Location] = []
        has_exact_root = any(loc.match is PathMatch.EXACT and loc.path == "/" for loc in locations)
        for ing in members:
            if ing.ann.app_root is None:
                continue
            if has_exact_root:
                self.problems.append(ing.problem("AppRootConflict", f"app-root: host {host!r} already has an Exact '/' path; ignored"))
                continue
            extras.append(Location("/", match=PathMatch.EXACT, redirect=Redirect(ing.ann.app_root, 302),
                                   ssl_redirect=self._ssl_redirect(ing.ann, is_tls)))
            has_exact_root = True
        if not any(loc.match is PathMatch.PREFIX and loc.path.rstrip("/") == "" for loc in locations):
            backend, owner = None, None
            for ing in members:
                backend, owner = self._spec_default_backend(ing), ing
                if backend is not None:
                    break
            if backend is None:
                backend, owner = self._option_default_backend(), None
            if backend is not None:
                # The Ingress's own annotations (allowlist, limits...) guard its
                # default backend too, as they do its paths.
                ann = owner.ann if owner is not None else ann_mod.Annotations()
                extras.append(self._annotated(ann, "/", PathMatch.PREFIX, backend, is_tls))
        return extras

    # -- the catch-all ----------------------------------------------------------------------

    def _catch_all(self, routes: dict[tuple, _Route], primaries: list[_Ingress]) -> tuple[str | None, list[Location]]:
        """``(default_backend, locations)`` of the catch-all server (module docstring)."""
        chosen, locations = None, []
        for route in sorted((r for r in routes.values() if r.host == ""), key=lambda r: r.key):
            if route.match is PathMatch.PREFIX and prefix_base(route.path) == "/" and not _location_settings(route.ing.ann):
                chosen = self._route_backend(route)
                continue
            location = self._location(route, is_tls=False)
            if location is not None:
                locations.append(location)
        if chosen is not None:
            return chosen, locations
        for ing in primaries:
            if (ing.obj.get("spec") or {}).get("rules"):
                continue
            backend = self._spec_default_backend(ing)
            if backend is not None:
                return backend, locations
        return self._option_default_backend(), locations

    def _option_default_backend(self) -> str | None:
        key = self.opts.default_backend_service
        if not key:
            return None
        namespace, _, name = key.partition("/")
        ref = self._first_port_ref(namespace, name)
        if ref is None:
            self.problems.append(Problem("Service", namespace, name, "DefaultBackendNotFound",
                                         f"--default-backend-service {key!r} not found or has no ports; answering 404"))
            return None
        state = self._register(ref, (None, "", None, False), None)
        for issue in state.issues:
            self.problems.append(Problem("Service", namespace, name, issue.reason, issue.message))
        return ref.backend_name


def _wildcard_of(host: str) -> str:
    first, _, rest = host.partition(".")
    return f"*.{rest}" if rest and first != "*" else ""


def _location_settings(ann: ann_mod.Annotations) -> bool:
    """Whether ``ann`` asks for per-location behaviour (which the plain
    ``default_backend`` location does not carry)."""
    plain = ann_mod.Annotations()
    return any(
        getattr(ann, name) != getattr(plain, name)
        for name in ("rewrite_target", "app_root", "force_ssl_redirect", "redirect", "proxy", "access",
                     "rate_limit", "cors")
    )
