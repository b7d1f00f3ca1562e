"""Kubernetes objects → data plane ``Configuration`` (one pure function).

``build(snapshot, options)`` reads a ``Snapshot`` and returns a
``Translation``: the whole configuration, the problems found (each becomes a
Kubernetes Event on the object named), and the Ingresses that are ours (for
status). It never raises for bad input: whatever is wrong is reported and
left out, and everything else keeps serving.

Each sync translates everything again, but what did not change is not
redone: pure steps (one Ingress object read on its own, a Service's
endpoints, a location, a server, a backend) are reused across translations
when their inputs are the same objects (the caller's ``caches.Caches``), so the result is
exactly a fresh translation's and unchanged hosts keep their Server objects
(which ``view`` and ``routes`` reuse in turn). The step of a host whose
Ingresses touch nothing outside it is replayed whole (``_HostStep``: its
server, problems and the backends it registered) while its inputs and the
backends it registered are unchanged, so a sync after one new Ingress costs
a lookup per host rather than a translation of each. Everything between
Ingresses (conflicts, ownership, canaries, TLS claims) is decided afresh.

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

import itertools
import operator
import time
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

from platformd.common import gcpause
from platformd.ingress import annotations as ann_mod
from platformd.ingress import auth as auth_mod
from platformd.ingress import certificates as certs_mod
from platformd.ingress import endpoints as eps_mod
from platformd.ingress import globalconfig
from platformd.ingress import validate as v
from platformd.ingress.caches import Caches, Generations
from platformd.ingress.classes import is_ours, our_class_names
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
    service_backend_name,
)
from platformd.ingress.snapshot import Issue, Snapshot, key_of

__all__ = ["Problem", "TranslateOptions", "Translation", "build", "is_ours"]



@dataclass(frozen=True)
class TranslateOptions:
    controller_class: str = "k8s.io/platform-ingress"
    ingress_class: str = "platform"
    watch_ingress_without_class: bool = False
    default_backend_service: str | None = None  # "ns/name"
    default_ssl_certificate: str | None = None  # "ns/name"
    allow_snippet_annotations: bool = False
    external_name_services: bool = True  # False: --disable-svc-external-name
    local_addresses: frozenset[str] = frozenset()  # ExternalName may not point here (hostaddrs.read())
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


def build(snapshot: Snapshot, options: TranslateOptions, caches: Caches | None = None) -> Translation:
    """The whole desired configuration for ``snapshot`` (see module docstring).

    ``caches``: the caller's ``caches.Caches``, whose ``translation`` field
    holds the steps reused from its earlier builds; None translates afresh
    (the result is equal either way)."""
    reuse = (caches or Caches()).translation
    with gcpause.paused:  # see gcpause: a third of a translation otherwise
        return _Translator(snapshot, options, reuse).run()




# --- internal records ------------------------------------------------------------


@dataclass(frozen=True)
class _Ingress:
    key: str
    namespace: str
    name: str
    obj: dict = field(repr=False, compare=False)
    ann: ann_mod.Annotations = field(compare=False)
    # Derived once: the backend-wide settings its backends get (see _backend).
    settings: tuple = field(init=False, repr=False, compare=False)
    # Derived once: nothing it asks of a host reads or changes other hosts
    # (no server-alias, app-root, default-backend annotation or
    # spec.defaultBackend), so its hosts' steps may be replayed (_HostStep).
    isolated: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ann = self.ann
        object.__setattr__(self, "settings",
                           (ann.load_balance, ann.upstream_hash_by, ann.affinity, ann.service_upstream))
        object.__setattr__(self, "isolated", not ann.server_aliases and ann.app_root is None
                           and not ann.default_backend and not (self.obj.get("spec") or {}).get("defaultBackend")
                           and (ann.auth is None or not ann.auth.reads_objects))

    def problem(self, reason: str, message: str) -> Problem:
        return Problem("Ingress", self.namespace, self.name, reason, message)


@dataclass(frozen=True)
class _ServiceRef:
    namespace: str
    name: str
    port: int | str
    # Derived once: asked for several times per route.
    backend_name: str = field(init=False, repr=False, compare=False)
    key: str = field(init=False, repr=False, compare=False)  # "ns/name" of the Service

    def __post_init__(self) -> None:
        # References with a "." are refused: see model.service_backend_name.
        object.__setattr__(self, "backend_name", service_backend_name(self.namespace, self.name, self.port))
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")


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


@dataclass(slots=True)
class _BackendState:
    ref: _ServiceRef
    owner: _Ingress | None  # None: --default-backend-service
    endpoints: tuple
    settings: tuple  # (load_balance, upstream_hash_by, affinity, service_upstream)
    issues: tuple[Issue, ...] = ()
    alternatives: set[str] = field(default_factory=set)
    policy: object = None
    policy_owner: _Ingress | None = None
    # (default load balancing, policy, the Backend): the model made from
    # this state without alternatives, a pure function of the fields above
    # and that default. Kept on the state because a replayed host step
    # (_HostStep) brings its states back.
    model: tuple | None = None


class _HostStep(NamedTuple):  # a tuple: made for every host of a cold build
    """What the server step of one host did, so a later build can replay it.

    Recorded (``_Journal``) only when the step read nothing another host's
    or Ingress's step wrote: every backend it used it registered itself,
    and its Ingresses are ``isolated``. Then the step is a function of its
    key (``_Translator._servers``: host, TLS, certificate, the ssl-redirect
    default, the --default-backend-service, its Ingresses and routes by
    identity) and of the Service and
    slices of each backend it registered (checked before a replay), plus
    the precondition that none of those backends is registered yet in the
    build replaying it. A replay puts the recorded state objects
    themselves into the new build: states change only while canaries are
    merged, before any host's step, so a state a host's step registered
    never changes afterwards, in any build.
    """

    server: Server | None
    problems: tuple[Problem, ...]
    # The backends it registered, as parallel tuples (a replay checks and
    # applies them with map() in C: it runs for every host of a sync).
    states: tuple[tuple[str, _BackendState], ...]  # (backend name, state)
    names: tuple[str, ...]
    service_keys: tuple[str, ...]  # "ns/name" of each one's Service
    services: tuple[object, ...]  # the Service each was resolved from (None: missing)
    slices: tuple[object, ...]  # and its slices (as the snapshot holds them)
    route_backends: tuple[tuple[tuple, str], ...]  # primary_backends entries it made
    told: tuple[tuple[str, str], ...]  # reported entries it made

    @classmethod
    def of(cls, server: Server | None, problems: list[Problem], journal: _Journal) -> _HostStep:
        names, states, services, slices = zip(*journal.states) if journal.states else ((), (), (), ())
        return cls(server, tuple(problems), tuple(zip(names, states)), names, tuple(map(_SERVICE_KEY, states)),
                   services, slices, tuple(journal.route_backends), tuple(journal.told))


class _Journal:
    """What a host's step registers while it runs (see _HostStep)."""

    __slots__ = ("states", "route_backends", "told", "pure")

    def __init__(self) -> None:
        self.states: list[tuple[str, _BackendState, object, tuple]] = []
        self.route_backends: list[tuple[tuple, str]] = []
        self.told: list[tuple[str, str]] = []
        self.pure = True  # False: it read state another step made

    def created(self, backend: str) -> bool:
        return any(entry[0] == backend for entry in self.states)  # a host registers a few


_PATH_TYPES = {"Exact": PathMatch.EXACT, "Prefix": PathMatch.PREFIX}
_SERVICE_KEY = operator.attrgetter("ref.key")
_NO_SLICES = itertools.repeat(())  # the default of each endpoint_slices.get in a map()
# One object, so the steps reused by the identity of an Ingress's annotations
# (``_annotated``) are reused for locations with none too.
_NO_ANNOTATIONS = ann_mod.Annotations()
_NO_AUTH = auth_mod.AuthRequest()  # an Ingress without auth annotations (the global auth may cover it)


# --- one Ingress on its own ---------------------------------------------------------


class _Parsed(NamedTuple):  # a tuple: made for every Ingress of a cold build
    """What the translation needs of one Ingress object that depends on
    nothing else: a pure function of the object and the snippet option
    (``_parse``), so it is made once per object and reused (``Caches.translation``)
    while the store keeps that object. Everything between Ingresses
    (conflicts, ownership, canaries, TLS claims) is decided per build."""

    key: str
    rank: tuple[str, str]  # (creationTimestamp, key): oldest first
    ing: _Ingress | None  # None: a refused annotation, the Ingress contributes nothing
    routes: tuple[_Route, ...]  # valid paths, in spec order
    hosts: tuple[str, ...]  # valid rule hosts, in spec order, each once
    problems: tuple[Problem, ...]  # what is wrong with the object itself


_rank = operator.attrgetter("rank")


def _parse(obj: dict, allow_snippets: bool) -> _Parsed:
    meta = obj.get("metadata") or {}
    key = key_of(obj)
    # RFC 3339 UTC timestamps sort as text; a missing one sorts last.
    rank = (meta.get("creationTimestamp") or "\uffff", key)
    parsed = ann_mod.parse(meta.get("annotations"), allow_snippets=allow_snippets)
    ing = _Ingress(key, meta.get("namespace", ""), meta.get("name", ""), obj, parsed.annotations)
    problems = [ing.problem("UnsupportedAnnotation", f"annotation {name} is not supported and was ignored")
                for name in parsed.unsupported]
    problems += [ing.problem("InvalidAnnotation", error.message + "; the Ingress is not served") for error in parsed.errors]
    if parsed.errors:
        return _Parsed(key, rank, None, (), (), tuple(problems))
    routes: list[_Route] = []
    hosts: dict[str, None] = {}
    for rule in (obj.get("spec") or {}).get("rules") or ():
        host = _rule_host(ing, rule.get("host"), problems)
        if host is None:
            continue
        if host:
            hosts[host] = None
        for item in ((rule.get("http") or {}).get("paths")) or ():
            route = _route(ing, host, item, problems)
            if route is not None:
                routes.append(route)
    return _Parsed(key, rank, ing, tuple(routes), tuple(hosts), tuple(problems))


def _rule_host(ing: _Ingress, raw: object, problems: list[Problem]) -> str | None:
    """The rule's host ("" for none), or None when it is invalid."""
    if not raw:
        return ""
    try:
        return v.hostname("host", raw)
    except v.ValidationError as exc:
        problems.append(ing.problem("InvalidHost", f"host {raw!r} {exc.reason}; its rule is ignored"))
        return None


def _route(ing: _Ingress, host: str, item: dict, problems: list[Problem]) -> _Route | None:
    path = item.get("path") or "/"
    path_type = item.get("pathType") or "ImplementationSpecific"
    match = _PATH_TYPES.get(path_type)
    if match is None:
        match = PathMatch.REGEX if ing.ann.regex_paths else PathMatch.PREFIX
    backend = item.get("backend") or {}
    if backend.get("resource") is not None:
        problems.append(ing.problem(
            "ResourceBackendUnsupported",
            f"path {path!r} of host {host or '*'!r} has a resource backend; only Service backends are supported, the path is ignored",
        ))
        return None
    service = _service_ref(ing, backend.get("service"))
    if service is None:
        problems.append(ing.problem("InvalidBackend", f"path {path!r} of host {host or '*'!r} has no valid Service backend; the path is ignored"))
        return None
    try:
        check_path(match, path)  # the backend name was checked by _service_ref
    except v.ValidationError as exc:
        problems.append(ing.problem("InvalidPath", f"path {path!r} ({match.value}) of host {host or '*'!r}: {exc.reason}; the path is ignored"))
        return None
    return _Route(ing, host, path, match, service)


def _service_ref(ing: _Ingress, service: dict | None) -> _ServiceRef | None:
    if not service or not service.get("name"):
        return None
    port = service.get("port") or {}
    number, name = port.get("number"), port.get("name")
    chosen = number if isinstance(number, int) and not isinstance(number, bool) else name
    if chosen is None or chosen == "":
        return None
    ref = _ServiceRef(ing.namespace, str(service["name"]), chosen)
    if "." in ref.namespace or "." in ref.name or "." in str(ref.port):
        return None  # not a DNS label: the name would be ambiguous
    try:
        v.backend_name("backend", ref.backend_name)
    except v.ValidationError:
        return None
    return ref


class _Translator:
    def __init__(self, snapshot: Snapshot, options: TranslateOptions, reuse: Generations) -> None:
        self.snap = snapshot
        self.reuse = reuse  # the caller's Caches.translation (see caches)
        self.opts = options
        self.now = options.now if options.now is not None else time.time()
        self.problems: list[Problem] = []
        self.backends: dict[str, _BackendState] = {}
        self.reported: set[tuple[str, str]] = set()  # (ingress key, backend) endpoint issues already told
        self.primary_backends: dict[tuple, str] = {}  # route key -> backend its location uses
        self.canary_primaries: set[str] = set()  # backends that got alternatives (_merge_canaries)
        self.journal: _Journal | None = None  # set while a host's step is recorded
        self.defaults = globalconfig.Defaults()
        self.global_auth = auth_mod.GlobalAuth()
        self.auths: dict[str, auth_mod.Auth] = {}  # Ingress key -> its resolved auth (_authorized)

    # -- the steps -----------------------------------------------------------------

    def run(self) -> Translation:
        config = self._global_config()
        self.defaults = config.defaults
        self.global_auth = config.auth
        owned = self._our_ingresses()
        for parsed in owned:
            self.problems.extend(parsed.problems)
        ingresses = self._authorized([parsed for parsed in owned if parsed.ing is not None])
        primaries = [p for p in ingresses if not p.ing.ann.canary]
        canaries = [p for p in ingresses if p.ing.ann.canary]
        routes = self._winning_routes(primaries)
        hosts = self._hosts(primaries)
        self._merge_canaries(canaries, routes)
        primary_ingresses = [p.ing for p in primaries]
        tls_hosts, host_certs, certificates = self._tls(primaries)
        servers = self._servers(hosts, routes, tls_hosts, host_certs)
        default_backend, catch_all = self._catch_all(routes, primary_ingresses)
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
            owned_ingresses=tuple(sorted(parsed.key for parsed in owned)),
        )

    def _global_config(self) -> globalconfig.GlobalConfig:
        config = globalconfig.parse(self.snap.configmap, http_port=self.opts.http_port, https_port=self.opts.https_port)
        meta = (self.snap.configmap or {}).get("metadata") or {}
        for issue in config.issues:
            self.problems.append(Problem("ConfigMap", meta.get("namespace", ""), meta.get("name", ""), issue.reason, issue.message))
        return config

    def _authorized(self, ingresses: list[_Parsed]) -> list[_Parsed]:
        """Resolve each Ingress's auth (its Secret, the global auth) into
        ``self.auths``; an Ingress whose auth cannot be enforced is dropped
        (fail closed) with a Problem naming the annotation and object."""
        glob = self.global_auth
        default = _NO_AUTH
        kept = []
        for parsed in ingresses:
            ing = parsed.ing
            req = ing.ann.auth or default
            if req is default and glob.auth is None and not glob.error:
                kept.append(parsed)
                continue
            secret = configmap = None
            if req.local is not None:
                secret = self.snap.secrets.get(auth_mod.secret_key(req.local.secret, ing.namespace))
            if req.proxy_headers_ref is not None:
                configmap = self.snap.configmaps.get(auth_mod.secret_key(req.proxy_headers_ref, ing.namespace))
            resolved = self.reuse.get(("auth", req, ing.namespace, id(secret), id(configmap), glob),
                                      (secret, configmap), lambda: auth_mod.resolve(
                                          req, ing.namespace, self.snap.secrets, self.snap.configmaps, glob))
            if isinstance(resolved, auth_mod.Refusal):
                self.problems.append(ing.problem(resolved.reason, resolved.message))
                continue
            if resolved is not None:
                self.auths[ing.key] = resolved
            kept.append(parsed)
        return kept

    def _our_ingresses(self) -> list[_Parsed]:
        """Our Ingresses, read (``_parse``), oldest first."""
        classes = self.snap.ingress_classes
        snippets = self.opts.allow_snippet_annotations
        names = our_class_names(classes, self.opts.controller_class)

        def is_our(obj: dict) -> bool:
            class_name = (obj.get("spec") or {}).get("ingressClassName")
            if class_name:  # rule 1 of classes.is_ours, our class names found once per build
                return class_name in names
            return is_ours(obj, classes, self.opts)

        ours = [self.reuse.get(("ingress", id(obj), snippets), obj, lambda: _parse(obj, snippets))
                for obj in self.snap.ingresses if is_our(obj)]
        ours.sort(key=_rank)
        return ours

    # -- routes ----------------------------------------------------------------------

    def _winning_routes(self, ingresses: list[_Parsed]) -> dict[tuple, _Route]:
        winners: dict[tuple, _Route] = {}
        for parsed in ingresses:
            ing = parsed.ing
            for route in parsed.routes:
                held = winners.get(route.key)
                if held is None:
                    winners[route.key] = route
                elif held.ing is not ing or held != route:
                    self.problems.append(ing.problem(
                        "PathConflict",
                        f"{route.describe()} is already served by Ingress {held.ing.key}; this one is ignored",
                    ))
        return winners

    @staticmethod
    def _hosts(ingresses: list[_Parsed]) -> dict[str, list[_Ingress]]:
        """Every named host with the Ingresses contributing to it, oldest first."""
        hosts: dict[str, list[_Ingress]] = {}
        for parsed in ingresses:
            for host in parsed.hosts:
                members = hosts.get(host)
                if members is None:
                    hosts[host] = [parsed.ing]
                else:
                    members.append(parsed.ing)
        return hosts

    # -- backends -----------------------------------------------------------------------

    def _backend(self, ing: _Ingress, ref: _ServiceRef, *, use_default: bool = True) -> str:
        """Register ``ref`` for ``ing``; the backend name its locations use.

        The first (oldest) Ingress to use a backend fixes its settings and how
        its endpoints are found; every user hears about endpoint problems.
        """
        settings = ing.settings
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
        journal = self.journal
        if state is None:
            service = self.snap.services.get(ref.key)
            given = self.snap.endpoint_slices.get(ref.key, ())
            slices = tuple(given)
            resolved = self.reuse.get(
                ("resolve", ref.key, ref.port, settings[3], self.opts.external_name_services,
                 self.opts.local_addresses, id(service),
                 *map(id, slices)), (service, slices),
                lambda: eps_mod.resolve(ref.key, service, slices, ref.port, service_upstream=settings[3],
                                        external_name=self.opts.external_name_services,
                                        local_addresses=self.opts.local_addresses),
            )
            state = _BackendState(ref, owner, resolved.endpoints, settings, resolved.issues)
            self.backends[ref.backend_name] = state
            if journal is not None:
                journal.states.append((ref.backend_name, state, service, given))
        elif journal is not None and not journal.created(ref.backend_name):
            journal.pure = False
        return state

    def _tell(self, ing: _Ingress, backend: str, issues: Iterable[Issue]) -> None:
        if (ing.key, backend) in self.reported:
            if self.journal is not None and not self.journal.created(backend):
                self.journal.pure = False
            return
        self.reported.add((ing.key, backend))
        if self.journal is not None:
            self.journal.told.append((ing.key, backend))
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
        ref = _service_ref(ing, backend.get("service"))
        if ref is None:
            self.problems.append(ing.problem("InvalidBackend", "spec.defaultBackend has no valid Service backend"))
            return None
        return self._backend(ing, ref)

    def _backend_models(self, servers: list[Server], catch_all: list[Location],
                        default_backend: str | None) -> tuple[Backend, ...]:
        used = {loc.backend for server in servers for loc in server.locations}
        used.update(loc.backend for loc in catch_all)
        used.discard(None)
        if default_backend:
            used.add(default_backend)
        for name in self.canary_primaries & used:
            used.update(self.backends[name].alternatives)
        default_lb = self.defaults.load_balance
        models = []
        for name in sorted(used):
            state = self.backends[name]
            made = state.model
            if made is not None and made[0] is default_lb and made[1] is state.policy and not state.alternatives:
                models.append(made[2])
                continue
            alternatives = tuple(sorted(state.alternatives)) if state.alternatives else ()
            # Keyed by the input objects: the endpoints (reused while the
            # Service and slices are), the owner's settings tuple (one per
            # Ingress object) and policy; all pinned by the entry.
            pins = (state.endpoints, state.settings, state.policy, default_lb)
            model = self.reuse.get(("backend", name, alternatives, *map(id, pins)), pins,
                               lambda: self._backend_model(name, state, alternatives))
            if not alternatives:
                state.model = (default_lb, state.policy, model)
            models.append(model)
        return tuple(models)

    def _backend_model(self, name: str, state: _BackendState, alternatives: tuple[str, ...]) -> Backend:
        load_balance, hash_by, affinity, _ = state.settings
        return Backend(name, state.endpoints, load_balance or self.defaults.load_balance, hash_by, affinity,
                       alternatives, state.policy)

    # -- canaries -------------------------------------------------------------------------

    def _merge_canaries(self, canaries: list[_Parsed], routes: dict[tuple, _Route]) -> None:
        for parsed in canaries:
            canary = parsed.ing
            for route in parsed.routes:
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
                self.canary_primaries.add(primary_name)

    def _route_backend(self, route: _Route) -> str:
        """The backend a primary route's location uses (registered once)."""
        name = self.primary_backends.get(route.key)
        if name is None:
            name = self._backend(route.ing, route.service)
            self.primary_backends[route.key] = name
            if self.journal is not None:
                self.journal.route_backends.append((route.key, name))
        elif self.journal is not None:
            self.journal.pure = False  # a canary's merge registered it first
        return name

    # -- TLS ----------------------------------------------------------------------------

    def _tls(self, primaries: list[_Parsed]):
        claims: dict[str, tuple[_Ingress, str | None]] = {}  # host -> (ingress, secret key or None)
        for parsed in primaries:
            ing = parsed.ing
            for entry in (ing.obj.get("spec") or {}).get("tls") or ():
                secret = entry.get("secretName")
                secret_key = f"{ing.namespace}/{secret}" if secret else None
                # Without hosts: the Ingress's rule hosts. (Their order only
                # orders the claims of one Ingress, which cannot conflict.)
                names = entry.get("hosts") or parsed.hosts
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
        return self._within_store(result, host_certs)

    def _within_store(self, result: list[Certificate], host_certs: dict[str, str]) -> list[Certificate]:
        """Certificates that fit Lua's store; the hosts of the others get the default one."""
        kept, refused = certs_mod.within_budget(((c.id, c) for c in result),
                                                lambda c: len(c.cert_pem) + len(c.key_pem))
        for secret_key, cert in refused:
            namespace, _, name = secret_key.partition("/")
            self.problems.append(Problem(
                "Secret", namespace, name, "CertificateStoreFull",
                f"TLS Secret {secret_key!r} ({len(cert.cert_pem) + len(cert.key_pem)} bytes) does not fit the "
                f"certificate store next to the others ({certs_mod.STORE_BUDGET} bytes in all); "
                "using the default certificate"))
            for host in [h for h, k in host_certs.items() if k == secret_key]:
                del host_certs[host]
        return [c for _, c in kept]

    # -- servers -------------------------------------------------------------------------

    def _servers(self, hosts, routes, tls_hosts, host_certs) -> list[Server]:
        by_host: dict[str, list[_Route]] = {}
        for route in routes.values():
            same_host = by_host.get(route.host)
            if same_host is None:
                by_host[route.host] = [route]
            else:
                same_host.append(route)
        taken: dict[str, _Ingress | None] = {h: None for h in hosts}  # name -> Ingress that aliased it
        servers: list[Server] = []
        ssl_default = self.defaults.ssl_redirect
        # Whether a host without a "/" of its own may get one from it; a step
        # that does is not recorded (_option_default_backend).
        default_service = self.opts.default_backend_service
        for host in sorted(hosts):
            members = hosts[host]
            host_routes = by_host.get(host, ())
            wildcard = _wildcard_of(host) if tls_hosts else ""
            is_tls = bool(tls_hosts) and (host in tls_hosts or wildcard in tls_hosts)
            certificate = (host_certs.get(host) or host_certs.get(wildcard)) if host_certs else None
            if not (members[0].isolated if len(members) == 1 else all(ing.isolated for ing in members)):
                self._host(host, members, host_routes, is_tls, certificate, taken, servers)
                continue
            key = ("host", host, is_tls, certificate, ssl_default, default_service, self.global_auth, len(members),
                   *map(id, members), *map(id, host_routes))
            step = self.reuse.peek(key)
            if step is not None and self._replay(step, servers):  # type: ignore[arg-type]
                continue
            journal = self.journal = _Journal()
            problems_before, servers_before = len(self.problems), len(servers)
            try:
                self._host(host, members, host_routes, is_tls, certificate, taken, servers)
            finally:
                self.journal = None
            if journal.pure:
                self.reuse.put(key, (tuple(members), tuple(host_routes)), _HostStep.of(
                    servers[-1] if len(servers) > servers_before else None, self.problems[problems_before:], journal))
        return servers

    def _replay(self, step: _HostStep, servers: list[Server]) -> bool:
        """Apply a recorded host step if its preconditions hold (see _HostStep)."""
        # (A route key of the step taken already, by a canary's merge, means
        # its backend is registered already: the first test covers it.)
        # Slices compare with ==: a tuple compares its items by identity
        # first, and slices equal in content resolve to the same endpoints.
        backends, snap = self.backends, self.snap
        if (any(map(backends.__contains__, step.names))
                or any(map(operator.is_not, map(snap.services.get, step.service_keys), step.services))
                or not all(map(operator.eq, map(snap.endpoint_slices.get, step.service_keys, _NO_SLICES),
                               step.slices))):
            return False
        backends.update(step.states)
        self.primary_backends.update(step.route_backends)
        if step.told:
            self.reported.update(step.told)
        if step.problems:
            self.problems.extend(step.problems)
        if step.server is not None:
            servers.append(step.server)
        return True

    def _host(self, host: str, members: list[_Ingress], host_routes, is_tls: bool, certificate: str | None,
              taken: dict[str, _Ingress | None], servers: list[Server]) -> None:
        """The server of one host (appended to ``servers``), its backends registered."""
        locations = []
        for route in host_routes:
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
            servers.append(self._server(host, tuple(aliases), certificate, tuple(locations), is_tls))
        except v.ValidationError as exc:  # defensive: every part was checked already
            self.problems.append(members[0].problem("InvalidServer", f"host {host!r}: {exc}; not served"))

    def _server(self, host: str, aliases: tuple[str, ...], certificate: str | None, locations: tuple[Location, ...],
                tls: bool) -> Server:
        return self.reuse.get(("server", host, aliases, certificate, tls, *map(id, locations)), locations,
                          lambda: Server(host, aliases=aliases, tls_certificate=certificate, locations=locations, tls=tls))

    def _location(self, route: _Route, is_tls: bool) -> Location | None:
        ann = route.ing.ann
        backend = None if ann.redirect is not None else self._route_backend(route)
        try:
            return self._annotated(ann, route.path, route.match, backend, is_tls, self.auths.get(route.ing.key))
        except v.ValidationError as exc:
            self.problems.append(route.ing.problem("InvalidPath", f"{route.describe()}: {exc}; the path is ignored"))
            return None

    def _annotated(self, ann: ann_mod.Annotations, path: str, match: PathMatch, backend: str | None,
                   is_tls: bool, auth: auth_mod.Auth | None = None) -> Location:
        """A location carrying the Ingress-wide per-location annotations."""
        backend = None if ann.redirect is not None else backend
        ssl_redirect = self._ssl_redirect(ann, is_tls)
        return self.reuse.get(("location", id(ann), path, match, backend, ssl_redirect, id(auth)), (ann, auth), lambda: Location(
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
            auth=auth,
        ))

    def _ssl_redirect(self, ann: ann_mod.Annotations, is_tls: bool) -> bool:
        if ann.force_ssl_redirect:
            return True
        return is_tls and (self.defaults.ssl_redirect if ann.ssl_redirect is None else ann.ssl_redirect)

    def _host_extras(self, host: str, members: list[_Ingress], locations: list[Location], is_tls: bool) -> list[Location]:
        """app-root and the host's default ``/`` (see module docstring)."""
        extras: list[Location] = []
        has_exact_root = has_prefix_root = False
        for loc in locations:
            if loc.path[-1] == "/":  # cheap test first: most paths are not a root
                if loc.match is PathMatch.EXACT and loc.path == "/":
                    has_exact_root = True
                elif loc.match is PathMatch.PREFIX and loc.path.rstrip("/") == "":
                    has_prefix_root = True
        for ing in members:
            if ing.ann.app_root is None:
                continue
            if has_exact_root:
                self.problems.append(ing.problem("AppRootConflict", f"app-root: host {host!r} already has an Exact '/' path; ignored"))
                continue
            extras.append(Location("/", match=PathMatch.EXACT, redirect=Redirect(ing.ann.app_root, 302),
                                   ssl_redirect=self._ssl_redirect(ing.ann, is_tls)))
            has_exact_root = True
        if not has_prefix_root:
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
                ann = owner.ann if owner is not None else _NO_ANNOTATIONS
                extras.append(self._annotated(ann, "/", PathMatch.PREFIX, backend, is_tls,
                                              self.auths.get(owner.key) if owner is not None else None))
        return extras

    # -- the catch-all ----------------------------------------------------------------------

    def _catch_all(self, routes: dict[tuple, _Route], primaries: list[_Ingress]) -> tuple[str | None, list[Location]]:
        """``(default_backend, locations)`` of the catch-all server (module docstring)."""
        chosen, locations = None, []
        for route in sorted((r for r in routes.values() if r.host == ""), key=lambda r: r.key):
            if (route.match is PathMatch.PREFIX and prefix_base(route.path) == "/" and not _location_settings(route.ing.ann)
                    and route.ing.key not in self.auths):
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
        if self.journal is not None:
            self.journal.pure = False  # shared by every host that uses it
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
    return any(
        getattr(ann, name) != getattr(_NO_ANNOTATIONS, name)
        for name in ("rewrite_target", "app_root", "force_ssl_redirect", "redirect", "proxy", "access",
                     "rate_limit", "cors", "auth")
    )
