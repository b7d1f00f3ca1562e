"""One HTTPRoute or GRPCRoute rule -> its matches and action.

The translation of a rule does not depend on where it is served, except a
``RequestRedirect``, whose scheme and port default from the listener: a
``Rule`` keeps that filter and ``Rule.action_for(bind)`` finishes it.

A rule is *dropped* (``unsupported`` says why; the route reports
``PartiallyInvalid`` or, when every rule is dropped, ``Accepted=False
UnsupportedValue``) when it needs what the data plane does not do:
ExtensionRef filters, filters on individual backendRefs, a regular
expression that does not compile, ReplacePrefixMatch without exactly one
PathPrefix match (possible only where the CRD's validation did not run,
e.g. the file source).

Each match carries its part of the precedence key (``Rule.matches``);
``gateway_translate`` adds the route's age and name and the rule and match
indexes, then sorts. HTTP keys: the path as the Lua router orders Ingress
paths (Exact; then PathPrefix and RegularExpression by length, longest
first, a PathPrefix winning a tie; then PathPrefix "/"), which keeps the
spec's Exact before longest Prefix; then a method before none; more header
matches, then more query matches first. gRPC entries come before
HTTP ones on a host (they also require ``content-type: application/grpc``,
so they never take HTTP requests); among them longer service, then longer
method, then more header matches first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from platformd.ingress import gateway_backends, pcre
from platformd.ingress import gateway_fields as fields
from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_grants import Grants
from platformd.ingress.gateway_model import (
    Bind, Cors, HeaderMatch, HeaderModifier, Match, Mirror, PathMatch, Redirect, Rewrite, RouteAction,
    WeightedBackend,
)

__all__ = ["GRPC_CONTENT_TYPE", "Rule", "RuleContext", "grpc_rule", "http_rule", "parse_duration"]

_WELL_KNOWN = {"http": 80, "https": 443}
# Every gRPC entry also matches this (and method POST): what makes a request gRPC.
GRPC_CONTENT_TYPE = HeaderMatch("content-type", "^application/grpc", True)
_ANY_PATH = PathMatch("PathPrefix", "/")


@dataclass(frozen=True, slots=True)
class Rule:
    index: int
    matches: tuple[tuple[Match, tuple], ...]  # (match, precedence key part)
    action: RouteAction  # without the redirect, see ``action_for``
    redirect: Mapping | None = None  # the RequestRedirect filter's fields
    problems: tuple[st.Condition, ...] = ()  # ResolvedRefs=False reasons, in order
    unsupported: str | None = None

    def action_for(self, bind: Bind) -> RouteAction:
        if self.redirect is None:
            return self.action
        return replace(self.action, redirect=_redirect(self.redirect, bind, self._prefix()))

    def _prefix(self) -> str | None:
        return self.matches[0][0].path.value if len(self.matches) == 1 else None


def parse_duration(value) -> float | None:
    """A Gateway API Duration ("1h30m", "500ms") in seconds; None for absent or zero."""
    if not isinstance(value, str):
        return None
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    seconds = sum(int(n) * units[u] for n, u in re.findall(r"([0-9]+)(ms|h|m|s)", value))
    return seconds or None


def _path_modifier(spec: Mapping) -> tuple[str | None, str | None]:
    """(type, value) of a redirect's or rewrite's ``path``; (None, None) when absent or malformed."""
    path = fields.mapping(spec.get("path"))
    kind = path.get("type")
    if kind not in ("ReplaceFullPath", "ReplacePrefixMatch"):
        return None, None
    value = path.get("replaceFullPath") if kind == "ReplaceFullPath" else path.get("replacePrefixMatch")
    return kind, fields.string(value)


def _redirect(spec: Mapping, bind: Bind, prefix: str | None) -> Redirect:
    asked_scheme = fields.string(spec.get("scheme"))
    scheme = asked_scheme or bind.protocol.lower()
    port = fields.integer(spec.get("port"), 0) or None
    if port is None:
        port = _WELL_KNOWN.get(scheme, bind.listener_port) if asked_scheme else bind.listener_port
    if _WELL_KNOWN.get(scheme) == port:
        port = None
    kind, value = _path_modifier(spec)
    status = fields.integer(spec.get("statusCode"), 302)
    return Redirect(status=status if status in (301, 302, 303, 307, 308) else 302, scheme=scheme,
                    hostname=fields.string(spec.get("hostname")) or None, port=port, path_kind=kind, path=value,
                    prefix=prefix if kind == "ReplacePrefixMatch" else None)


def _header_matches(entries, lower: bool) -> tuple[HeaderMatch, ...]:
    out = []
    for entry in fields.items(entries):
        name = fields.string(entry.get("name"))
        if name:
            out.append(HeaderMatch(name.lower() if lower else name, fields.string(entry.get("value")),
                                   entry.get("type") == "RegularExpression"))
    return tuple(out)


def _bad_regex(patterns) -> str | None:
    # The Lua router matches these with ngx.re, so Lua's own engine (PCRE,
    # through ``pcre``) decides what compiles, not Python's re: the two differ
    # (``(?a)x`` is valid for one only), and a refusal here beats a 500 later.
    for pattern in patterns:
        try:
            error = pcre.compile_error(pcre.LUA, pattern)
        except pcre.EngineMissing as exc:
            return f"regular expression {pattern!r} cannot be checked: {exc}"
        if error is not None:
            return f"regular expression {pattern!r} does not compile: {error}"
    return None


def _pairs(entries) -> tuple[tuple[str, str], ...]:
    return tuple((fields.string(h.get("name")), fields.string(h.get("value"))) for h in fields.items(entries)
                 if fields.string(h.get("name")))


def _modifier(spec) -> HeaderModifier | None:
    if not isinstance(spec, Mapping):
        return None
    return HeaderModifier(set=_pairs(spec.get("set")), add=_pairs(spec.get("add")),
                          remove=tuple(fields.strings(spec.get("remove"))))


def _cors(spec: Mapping) -> Cors:
    def names(field: str) -> tuple[str, ...]:
        return tuple(fields.strings(spec.get(field)))
    return Cors(allow_origins=names("allowOrigins"), allow_credentials=spec.get("allowCredentials") is True,
                allow_methods=names("allowMethods"), allow_headers=names("allowHeaders"),
                expose_headers=names("exposeHeaders"), max_age=max(0, fields.integer(spec.get("maxAge", 5), 5)))


def _mirror(spec: Mapping, kind: str, namespace: str, services, grants) -> tuple[Mirror | None, st.Condition | None]:
    ref = fields.mapping(spec.get("backendRef"))
    resolved = gateway_backends.resolve({**ref, "weight": 1}, kind, namespace, services, grants)
    if resolved.problem is not None:
        return None, resolved.problem
    numerator, denominator = 100, 100
    fraction = fields.mapping(spec.get("fraction"))
    if "percent" in spec:
        numerator = fields.integer(spec.get("percent"), 100)
    elif fraction:
        numerator = fields.integer(fraction.get("numerator"), 0)
        denominator = fields.integer(fraction.get("denominator"), 100) or 100
    numerator = min(max(numerator, 0), denominator)
    backend = resolved.backend
    return Mirror(backend.service, backend.port, numerator, denominator), None


@dataclass(frozen=True, slots=True)
class RuleContext:
    """What a rule's references resolve against: the route's kind and namespace,
    the Services and the ReferenceGrants."""

    kind: str  # "HTTPRoute" | "GRPCRoute"
    namespace: str
    services: Mapping[str, dict]
    grants: Grants


def _filters_and_backends(rule: Mapping, ctx: RuleContext, grpc: bool) -> tuple[RouteAction, Mapping | None, list, str | None]:
    """The action of a rule (without redirect), the redirect spec, ResolvedRefs
    problems, and why the rule cannot be served (or None)."""
    problems: list[st.Condition] = []
    unsupported = None
    action: dict = {"grpc": grpc}
    redirect = None
    mirrors = []
    for f in fields.items(rule.get("filters")):
        kind = f.get("type")
        if kind == "RequestHeaderModifier":
            action["request_headers"] = _modifier(f.get("requestHeaderModifier"))
        elif kind == "ResponseHeaderModifier":
            action["response_headers"] = _modifier(f.get("responseHeaderModifier"))
        elif kind == "RequestRedirect" and not grpc:
            redirect = fields.mapping(f.get("requestRedirect"))
        elif kind == "URLRewrite" and not grpc:
            spec = fields.mapping(f.get("urlRewrite"))
            path_kind, value = _path_modifier(spec)
            action["rewrite"] = Rewrite(hostname=fields.string(spec.get("hostname")) or None,
                                        path_kind=path_kind, path=value)
        elif kind == "RequestMirror":
            mirror, problem = _mirror(fields.mapping(f.get("requestMirror")), ctx.kind, ctx.namespace,
                                      ctx.services, ctx.grants)
            if mirror is not None:
                mirrors.append(mirror)
            if problem is not None:
                problems.append(problem)
        elif kind == "CORS" and not grpc:
            action["cors"] = _cors(fields.mapping(f.get("cors")))
        else:
            unsupported = unsupported or f"filter {kind} is not supported"
    action["mirrors"] = tuple(mirrors)
    timeouts = fields.mapping(rule.get("timeouts"))
    action["request_timeout"] = parse_duration(timeouts.get("request"))
    action["backend_timeout"] = parse_duration(timeouts.get("backendRequest"))
    if action["request_timeout"] and (action["backend_timeout"] or 0) > action["request_timeout"]:
        unsupported = unsupported or "timeouts.backendRequest is longer than timeouts.request"
    backends: list[WeightedBackend] = []
    for ref in fields.items(rule.get("backendRefs")):
        if ref.get("filters"):
            unsupported = unsupported or "filters on a backendRef are not supported"
        resolved = gateway_backends.resolve(ref, ctx.kind, ctx.namespace, ctx.services, ctx.grants)
        if resolved.problem is not None:
            problems.append(resolved.problem)
        if resolved.backend.weight > 0:
            backends.append(resolved.backend)
    if redirect is None and not any(b.service for b in backends):
        # No backend that can take traffic (none, all weight 0, all invalid): 500.
        return RouteAction(status=500, grpc=grpc), None, problems, unsupported
    return RouteAction(backends=tuple(backends), **action), redirect, problems, unsupported


def http_rule(index: int, rule: Mapping, ctx: RuleContext) -> Rule:
    raw_matches = fields.items(rule.get("matches")) if "matches" in rule else [{}]
    matches = []
    regexes = []
    for raw in raw_matches:
        path = fields.mapping(raw.get("path"))
        kind = path.get("type") if path.get("type") in ("Exact", "PathPrefix", "RegularExpression") else "PathPrefix"
        path_match = PathMatch(kind, fields.string(path.get("value")) or "/")
        headers = _header_matches(raw.get("headers"), lower=True)
        query = _header_matches(raw.get("queryParams"), lower=False)
        method = fields.string(raw.get("method")) or None
        regexes += [path_match.value] if path_match.kind == "RegularExpression" else []
        regexes += [h.value for h in headers + query if h.regex]
        key = (1, *_path_order(path_match), 0 if method else 1, -len(headers), -len(query))
        matches.append((Match(path_match, headers, query, method), key))
    action, redirect, problems, unsupported = _filters_and_backends(rule, ctx, grpc=False)
    unsupported = unsupported or _bad_regex(regexes)
    if _replaces_prefix(rule) and not (len(matches) == 1 and matches[0][0].path.kind == "PathPrefix"):
        unsupported = unsupported or "ReplacePrefixMatch needs exactly one PathPrefix match"
    if action.rewrite is not None and action.rewrite.path_kind == "ReplacePrefixMatch" and len(matches) == 1:
        action = replace(action, rewrite=replace(action.rewrite, prefix=matches[0][0].path.value))
    return Rule(index, tuple(matches), action, redirect, tuple(problems), unsupported)


def _path_order(path: PathMatch) -> tuple[int, int, int]:
    """The path's part of the precedence key: the Lua router's order for
    Ingress paths (lua/router.lua ``match``), so a host reads the same
    whichever API made it: Exact; then Prefix (but "/") and
    RegularExpression paths by length, longest first, a Prefix winning a
    tie; then Prefix "/"."""
    if path.kind == "Exact":
        return (0, 0, 0)
    if path.kind == "PathPrefix":
        base = path.value.rstrip("/")
        return (1, -len(base), 0) if base else (2, 0, 0)
    return (1, -len(path.value), 1)


def _replaces_prefix(rule: Mapping) -> bool:
    for f in fields.items(rule.get("filters")):
        for field in ("requestRedirect", "urlRewrite"):
            if fields.mapping(fields.mapping(f.get(field)).get("path")).get("type") == "ReplacePrefixMatch":
                return True
    return False


def _grpc_match(raw: Mapping) -> tuple[Match, tuple, list[str]]:
    method = fields.mapping(raw.get("method"))
    service, name = fields.string(method.get("service")), fields.string(method.get("method"))
    regexes = []
    if method.get("type") == "RegularExpression":
        regexes = [p for p in (service, name) if p]
        path = PathMatch("RegularExpression", f"^/{service or '[^/]+'}/{name or '[^/]+'}$")
    elif service and name:
        path = PathMatch("Exact", f"/{service}/{name}")
    elif service:
        path = PathMatch("PathPrefix", f"/{service}")
    elif name:
        path = PathMatch("RegularExpression", f"^/[^/]+/{re.escape(name)}$")
    else:
        path = _ANY_PATH
    headers = _header_matches(raw.get("headers"), lower=True)
    regexes += [h.value for h in headers if h.regex]
    key = (0, 0, -len(service), -len(name), -len(headers), 0, 0)
    return Match(path, (GRPC_CONTENT_TYPE, *headers), (), "POST"), key, regexes


def grpc_rule(index: int, rule: Mapping, ctx: RuleContext) -> Rule:
    matches, regexes = [], []
    for raw in fields.items(rule.get("matches")) or [{}]:
        match, key, patterns = _grpc_match(raw)
        matches.append((match, key))
        regexes += patterns
    action, _redirect_spec, problems, unsupported = _filters_and_backends(rule, ctx, grpc=True)
    return Rule(index, tuple(matches), action, None, tuple(problems), unsupported or _bad_regex(regexes))
