"""``nginx.ingress.kubernetes.io/*`` annotations → one typed, validated value.

Names and meanings are ingress-nginx's. ``parse`` reads every annotation of
one Ingress and returns ``Annotations`` (frozen, made of model objects, so a
value that got in has passed the model's validators) plus an
``AnnotationError`` per refused annotation, naming it and its value.

Safety: before its own parser runs, every string value passes ``_plain``
(no control characters, quotes, backslashes, backticks, ``;``, braces or
``$``). The only exceptions are the annotations whose grammar needs
``$`` or braces, and each has a stricter validator of its own:
``rewrite-target`` (``$1``..``$9`` capture groups only), ``upstream-hash-by``
(nginx variables only, read by Lua) and ``canary-by-header-pattern`` (a regex
with a location regex's token rules, compiled by Lua's own engine); and
``auth-url``, ``auth-signin``, ``auth-cache-key``, which may hold request
variables from an allowlist (``auth``), read by Lua by name. So no annotation value can end an nginx token
or directive, expand a variable, or reach Lua code.

Scope: all annotations here are Ingress-wide; the translator decides what an
error costs (see ``translate``: an Ingress with any refused annotation
contributes nothing). Snippet annotations (``*-snippet``) are always refused:
the model cannot carry raw nginx text, and we never render it. The
authentication group (``auth-*`` but ``auth-tls-*``, ``satisfy``,
``enable-global-auth``) is parsed by ``auth``; ``auth-cache-key`` may hold
``$`` (request variables Lua reads by name, an allowlist). Other
security-bearing annotations we lack (``auth-tls-*``, ``proxy-ssl-*``) are
refused: ignoring them would expose what they protect. Other unknown
annotations under the prefix are only reported (``unsupported``), since they
cannot widen access.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from typing import Callable, Mapping

from platformd.ingress import auth as auth_mod
from platformd.ingress import validate as v
from platformd.ingress.globalconfig import parse_bool, parse_int
from platformd.ingress.model import (
    AccessControl,
    AffinityMode,
    BackendProtocol,
    Cors,
    LoadBalance,
    ProxySettings,
    RateLimit,
    Redirect,
    SessionAffinity,
    Timeouts,
    TrafficShapingPolicy,
)

__all__ = ["PREFIX", "AnnotationError", "Annotations", "Parsed", "parse"]

PREFIX = "nginx.ingress.kubernetes.io/"


@dataclass(frozen=True)
class AnnotationError:
    annotation: str  # full key, with the prefix
    value: str
    reason: str

    @property
    def message(self) -> str:
        shown = self.value if len(self.value) <= 120 else self.value[:117] + "..."
        return f"annotation {self.annotation} value {shown!r} {self.reason}"


@dataclass(frozen=True)
class Annotations:
    """What one Ingress's annotations ask for. Defaults mean "not set"."""

    # per path (copied into each Location of the Ingress)
    use_regex: bool = False
    rewrite_target: str | None = None
    app_root: str | None = None
    ssl_redirect: bool | None = None  # None: the ConfigMap default
    force_ssl_redirect: bool = False
    redirect: Redirect | None = None  # permanent-/temporal-redirect
    proxy: ProxySettings = ProxySettings()
    access: AccessControl = AccessControl()
    rate_limit: RateLimit = RateLimit()
    cors: Cors | None = None
    # per host
    server_aliases: tuple[str, ...] = ()
    # per backend
    load_balance: LoadBalance | None = None  # None: the ConfigMap default
    upstream_hash_by: str = ""
    affinity: SessionAffinity | None = None
    service_upstream: bool = False
    default_backend: str | None = None  # Service in the Ingress's namespace; used when a backend has no endpoints
    # canary
    canary: bool = False
    traffic_shaping: TrafficShapingPolicy | None = None
    auth: auth_mod.AuthRequest | None = None  # auth-*, satisfy (resolved per Ingress by translate)

    @property
    def regex_paths(self) -> bool:
        """ImplementationSpecific paths of this Ingress are regexes."""
        return self.use_regex or self.rewrite_target is not None


@dataclass(frozen=True)
class Parsed:
    annotations: Annotations
    errors: tuple[AnnotationError, ...] = ()  # refused: the Ingress must not be served as if they were absent
    unsupported: tuple[str, ...] = ()  # unknown harmless annotations, ignored


class _Refused(ValueError):
    pass


# --- value parsers (text -> value; ValueError/ValidationError = refused) -------

_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f\"'`\\;{}$]")


def _plain(text: str) -> str:
    if _FORBIDDEN.search(text):
        raise _Refused("contains a forbidden character (control characters, quotes, backslash, ';', '{', '}' or '$')")
    return text


def _checked(fn: Callable[[str, str], object]) -> Callable[[str], object]:
    def parse(text: str) -> object:
        return fn("value", _plain(text))

    return parse


def _unchecked(fn: Callable[[str, str], object]) -> Callable[[str], object]:
    """For grammars that need '$' or braces: ``fn`` is the whole check."""

    def parse(text: str) -> object:
        return fn("value", text)

    return parse


def _bool(text: str) -> bool:
    return parse_bool(_plain(text))


def _int(low: int, high: int) -> Callable[[str], int]:
    return lambda text: parse_int(_plain(text), low, high)


# Bounds on what one annotation may ask for: far above any honest use (an
# allowlist of a few hundred CIDRs), far below what would bloat every sync,
# the Lua payloads and the replies (a 64 KB cookie path came back in every
# Set-Cookie). Kubernetes allows 256 KiB of annotations per object.
MAX_VALUE_LENGTH = 16 * 1024
MAX_LIST_ITEMS = 1000


def _list(item: Callable[[str, str], object]) -> Callable[[str], tuple]:
    def parse(text: str) -> tuple:
        items = [part.strip() for part in _plain(text).split(",") if part.strip()]
        if not items:
            raise _Refused("must list at least one value")
        if len(items) > MAX_LIST_ITEMS:
            raise _Refused(f"lists {len(items)} values (at most {MAX_LIST_ITEMS})")
        return tuple(item("value", part) for part in items)

    return parse


def _choice(*allowed: str, upper: bool = False) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = _plain(text).strip()
        value = value.upper() if upper else value
        if value not in allowed:
            raise _Refused(f"must be one of {', '.join(allowed)}")
        return value

    return parse


def _on_off(text: str) -> bool:
    value = _plain(text).strip().lower()
    if value not in ("on", "off"):
        raise _Refused("must be on or off")
    return value == "on"


_SERVICE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def _service_name(field: str, text: str) -> str:
    if not _SERVICE_NAME.fullmatch(text):
        raise _Refused("must be the name of a Service in the Ingress's namespace")
    return text


def _header_value(field: str, text: str) -> str:
    return v.header_value(field, _plain(text))


_SECONDS = _int(1, 86400)

# annotation (without prefix) -> parser. Order is irrelevant.
PARSERS: dict[str, Callable[[str], object]] = {
    "use-regex": _bool,
    "rewrite-target": _unchecked(v.rewrite_target),
    "app-root": _checked(v.path),
    "ssl-redirect": _bool,
    "force-ssl-redirect": _bool,
    "permanent-redirect": _checked(v.redirect_target),
    "permanent-redirect-code": _choice("301", "302", "303", "307", "308"),
    "temporal-redirect": _checked(v.redirect_target),
    "server-alias": _list(v.hostname),
    "backend-protocol": _choice("HTTP", "HTTPS", "GRPC", "GRPCS", upper=True),
    "proxy-connect-timeout": _SECONDS,
    "proxy-read-timeout": _SECONDS,
    "proxy-send-timeout": _SECONDS,
    "proxy-body-size": _checked(v.size),
    "proxy-buffering": _on_off,
    "canary": _bool,
    "canary-weight": _int(0, 1_000_000),
    "canary-weight-total": _int(1, 1_000_000),
    "canary-by-header": _checked(v.header_name),
    "canary-by-header-value": _unchecked(_header_value),
    "canary-by-header-pattern": _unchecked(v.header_pattern),
    "canary-by-cookie": _checked(v.cookie_name),
    "affinity": _choice("cookie"),
    "affinity-mode": _choice("balanced", "persistent"),
    "session-cookie-name": _checked(v.cookie_name),
    "session-cookie-max-age": _int(1, 2**31 - 1),
    "session-cookie-path": _checked(v.cookie_path),
    "session-cookie-samesite": _choice("None", "Lax", "Strict"),
    "load-balance": _choice("round_robin", "ewma"),
    "upstream-hash-by": _unchecked(v.upstream_hash_by),
    "whitelist-source-range": _list(v.cidr),
    "allowlist-source-range": _list(v.cidr),
    "denylist-source-range": _list(v.cidr),
    "limit-rps": _int(0, 1_000_000),
    "limit-connections": _int(0, 1_000_000),
    "enable-cors": _bool,
    "cors-allow-origin": _list(v.cors_origin),
    "cors-allow-methods": _list(v.http_method),
    "cors-allow-headers": _list(v.header_name),
    "cors-expose-headers": _list(v.header_name),
    "cors-allow-credentials": _bool,
    "cors-max-age": _int(0, 2**31 - 1),
    "default-backend": _checked(_service_name),
    "service-upstream": _bool,
    "upstream-vhost": _checked(v.upstream_vhost),
}

def _auth_value(name: str) -> Callable[[str], object]:
    """auth.py's parser. auth-cache-key, auth-url and auth-signin may hold
    request variables (their parsers allow a fixed list that Lua reads by
    name): those pass _plain but for '$' and the braces of ``${name}``;
    every other passes _plain whole."""
    parser = auth_mod.PARSERS[name]
    if name not in ("auth-cache-key", "auth-url", "auth-signin"):
        return lambda text: parser(_plain(text))

    def with_variables(text: str) -> object:
        _plain(text.replace("${", "").replace("}", "").replace("$", ""))
        return parser(text)

    return with_variables


PARSERS.update({name: _auth_value(name) for name in auth_mod.ANNOTATIONS})


# Security-bearing and not supported yet: serving the Ingress without them
# would expose what they protect, so it is not served (fail closed). Backend
# TLS settings belong here too: `backend-protocol: HTTPS` with
# `proxy-ssl-verify: "on"` was served unverified (200 where ingress-nginx
# answers 502 for a backend whose certificate the CA does not sign).
_REFUSED_UNSUPPORTED = re.compile(
    r"^(auth-.*|satisfy|enable-modsecurity|modsecurity-.*|proxy-ssl-.*|secure-verify-ca-secret)$")


def _asks_nothing(name: str, value: object) -> bool:
    """``proxy-ssl-verify: "off"`` is ingress-nginx's default: it asks for no check."""
    return name == "proxy-ssl-verify" and str(value).strip().lower() == "off"


# --- assembling groups -------------------------------------------------------


class _Reader:
    """Parsed values by short name, recording errors as it goes."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        self.raw = raw
        self.values: dict[str, object] = {}
        self.errors: list[AnnotationError] = []
        for name in sorted(raw):
            text = raw[name]
            try:
                if not isinstance(text, str):
                    raise _Refused("must be a string")
                if len(text) > MAX_VALUE_LENGTH:
                    raise _Refused(f"is {len(text)} characters long (at most {MAX_VALUE_LENGTH})")
                self.values[name] = PARSERS[name](text)
            except (ValueError, v.ValidationError) as exc:
                self.fail((name,), exc.reason if isinstance(exc, v.ValidationError) else str(exc))

    def get(self, name: str, default: object = None) -> object:
        return self.values.get(name, default)

    def has(self, *names: str) -> bool:
        return any(n in self.values for n in names)

    def fail(self, names: tuple[str, ...], reason: str) -> None:
        for name in names:
            self.values.pop(name, None)
        shown = [n for n in names if n in self.raw] or list(names[:1])
        for name in shown:
            self.errors.append(AnnotationError(PREFIX + name, str(self.raw.get(name, "")), reason))

    def build(self, names: tuple[str, ...], make: Callable[[], object]) -> object:
        """``make()``; a ValidationError from the model is blamed on ``names``."""
        try:
            return make()
        except (ValueError, v.ValidationError) as exc:
            # Blame the first of ``names`` the user set (callers list the
            # most specific first), so one bad value gives one error.
            blamed = [n for n in names if n in self.raw][:1] or list(names[:1])
            self.fail(tuple(blamed), getattr(exc, "reason", str(exc)))
            return None


def _redirect(r: _Reader) -> Redirect | None:
    if r.has("temporal-redirect"):  # ingress-nginx checks the temporal one first
        return r.build(("temporal-redirect",), lambda: Redirect(r.get("temporal-redirect"), 302))
    if r.has("permanent-redirect"):
        code = int(r.get("permanent-redirect-code", 301))
        return r.build(
            ("permanent-redirect-code", "permanent-redirect"),
            lambda: Redirect(r.get("permanent-redirect"), code),
        )
    return None


def _proxy(r: _Reader) -> ProxySettings:
    made = r.build(
        ("proxy-connect-timeout", "proxy-send-timeout", "proxy-read-timeout", "backend-protocol",
         "proxy-body-size", "proxy-buffering", "upstream-vhost"),
        lambda: ProxySettings(
            protocol=BackendProtocol(r.get("backend-protocol", "HTTP")),
            timeouts=Timeouts(
                connect=r.get("proxy-connect-timeout"),
                send=r.get("proxy-send-timeout"),
                read=r.get("proxy-read-timeout"),
            ),
            body_size=r.get("proxy-body-size"),
            buffering=r.get("proxy-buffering"),
            upstream_vhost=r.get("upstream-vhost", ""),
        ),
    )
    return made or ProxySettings()


def _access(r: _Reader) -> AccessControl:
    allow = tuple(r.get("whitelist-source-range", ())) + tuple(r.get("allowlist-source-range", ()))
    deny = tuple(r.get("denylist-source-range", ()))
    made = r.build(("allowlist-source-range", "whitelist-source-range", "denylist-source-range"),
                   lambda: AccessControl(allow=allow, deny=deny))
    return made or AccessControl()


def _cors(r: _Reader) -> Cors | None:
    if not r.get("enable-cors", False):
        return None
    base = Cors()
    return r.build(
        ("cors-allow-origin", "cors-allow-methods", "cors-allow-headers", "cors-expose-headers",
         "cors-allow-credentials", "cors-max-age", "enable-cors"),
        lambda: Cors(
            allow_origins=r.get("cors-allow-origin", base.allow_origins),
            allow_methods=r.get("cors-allow-methods", base.allow_methods),
            allow_headers=r.get("cors-allow-headers", base.allow_headers),
            expose_headers=r.get("cors-expose-headers", base.expose_headers),
            allow_credentials=r.get("cors-allow-credentials", base.allow_credentials),
            max_age=r.get("cors-max-age", base.max_age),
        ),
    )


def _affinity(r: _Reader) -> SessionAffinity | None:
    if r.get("affinity") != "cookie":
        return None
    base = SessionAffinity()
    return r.build(
        ("session-cookie-name", "affinity-mode", "session-cookie-max-age", "session-cookie-path",
         "session-cookie-samesite", "affinity"),
        lambda: SessionAffinity(
            cookie_name=r.get("session-cookie-name", base.cookie_name),
            mode=AffinityMode(r.get("affinity-mode", "balanced")),
            max_age=r.get("session-cookie-max-age"),
            path=r.get("session-cookie-path", base.path),
            samesite=r.get("session-cookie-samesite", ""),
        ),
    )


def _traffic_shaping(r: _Reader) -> TrafficShapingPolicy | None:
    if not r.get("canary", False):
        return None
    return r.build(
        ("canary-weight", "canary-weight-total", "canary-by-header", "canary-by-header-value",
         "canary-by-header-pattern", "canary-by-cookie", "canary"),
        lambda: TrafficShapingPolicy(
            weight=r.get("canary-weight", 0),
            weight_total=r.get("canary-weight-total", 100),
            header=r.get("canary-by-header", ""),
            header_value=r.get("canary-by-header-value", ""),
            header_pattern=r.get("canary-by-header-pattern", ""),
            cookie=r.get("canary-by-cookie", ""),
        ),
    )


def _auth(r: _Reader) -> auth_mod.AuthRequest | None:
    values = {name: r.get(name) for name in auth_mod.ANNOTATIONS if r.has(name)}
    errors: list[tuple[tuple[str, ...], str]] = []
    made = auth_mod.request(values, errors)
    for names, reason in errors:
        r.fail(names, reason)
    return made


def parse(annotations: Mapping[str, str] | None, *, allow_snippets: bool = False) -> Parsed:
    """Parse every ``nginx.ingress.kubernetes.io/*`` annotation of one Ingress."""
    items = tuple(sorted((k, val) for k, val in (annotations or {}).items() if k.startswith(PREFIX)))
    try:
        return _parse_cached(items, allow_snippets)
    except TypeError:  # an unhashable value (not a string): refused below, just not cached
        return _parse(items, allow_snippets)


# Most Ingresses share a few sets of annotations (none at all, above all),
# and every sync parses every Ingress again: parsing was a tenth of a
# translation at 10,000 Ingresses. ``parse`` is a pure function of the
# prefixed items and its result is frozen, so sharing it is safe.
@functools.lru_cache(maxsize=4096)
def _parse_cached(items: tuple[tuple[str, object], ...], allow_snippets: bool) -> Parsed:
    return _parse(items, allow_snippets)


def _parse(items: tuple[tuple[str, object], ...], allow_snippets: bool) -> Parsed:
    ours: dict[str, str] = {}
    refused: list[AnnotationError] = []
    unsupported: list[str] = []
    for key, value in items:
        name = key[len(PREFIX):]
        if name.endswith("-snippet"):
            why = (
                "is a snippet; snippets are not supported by this controller"
                if allow_snippets
                else "is a snippet; snippet annotations are disabled (--allow-snippet-annotations)"
            )
            refused.append(AnnotationError(key, str(value), why))
        elif name in PARSERS:
            ours[name] = value
        elif _REFUSED_UNSUPPORTED.match(name) and not _asks_nothing(name, value):
            refused.append(AnnotationError(key, str(value), "is not supported; the Ingress is not served without it"))
        else:
            unsupported.append(key)
    r = _Reader(ours)
    result = Annotations(
        use_regex=r.get("use-regex", False),
        rewrite_target=r.get("rewrite-target"),
        app_root=r.get("app-root"),
        ssl_redirect=r.get("ssl-redirect"),
        force_ssl_redirect=r.get("force-ssl-redirect", False),
        redirect=_redirect(r),
        proxy=_proxy(r),
        access=_access(r),
        rate_limit=r.build(
            ("limit-rps", "limit-connections"),
            lambda: RateLimit(rps=r.get("limit-rps", 0), connections=r.get("limit-connections", 0)),
        ) or RateLimit(),
        cors=_cors(r),
        server_aliases=tuple(r.get("server-alias", ())),
        load_balance=LoadBalance(r.get("load-balance")) if r.has("load-balance") else None,
        upstream_hash_by=r.get("upstream-hash-by", ""),
        affinity=_affinity(r),
        service_upstream=r.get("service-upstream", False),
        default_backend=r.get("default-backend"),
        canary=bool(r.get("canary", False)),
        traffic_shaping=_traffic_shaping(r),
        auth=_auth(r),
    )
    if result.canary and result.traffic_shaping is None:
        result = replace(result, canary=False)
    errors = tuple(sorted(refused + r.errors, key=lambda e: (e.annotation, e.reason)))
    return Parsed(annotations=result, errors=errors, unsupported=tuple(unsupported))
