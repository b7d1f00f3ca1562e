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

from platformd.ingress import gateway_backends
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


def _redirect(spec: Mapping, bind: Bind, prefix: str | None) -> Redirect:
    scheme = spec.get("scheme") or bind.protocol.lower()
    port = spec.get("port")
    if port is None:
        port = _WELL_KNOWN.get(scheme, bind.listener_port) if spec.get("scheme") else bind.listener_port
    if _WELL_KNOWN.get(scheme) == port:
        port = None
    path = spec.get("path") or {}
    kind = path.get("type")
    value = path.get("replaceFullPath") if kind == "ReplaceFullPath" else path.get("replacePrefixMatch")
    return Redirect(status=int(spec.get("statusCode") or 302), scheme=scheme,
                    hostname=spec.get("hostname") or None, port=port, path_kind=kind, path=value,
                    prefix=prefix if kind == "ReplacePrefixMatch" else None)


def _header_matches(entries, lower: bool) -> tuple[HeaderMatch, ...]:
    out = []
    for entry in entries or ():
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            name = entry["name"].lower() if lower else entry["name"]
            out.append(HeaderMatch(name, str(entry.get("value", "")), entry.get("type") == "RegularExpression"))
    return tuple(out)


def _bad_regex(patterns) -> str | None:
    # Python's re stands in for PCRE here: the few patterns one accepts and the
    # other refuses are rare, and refusing one early is better than a 500 later.
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            return f"regular expression {pattern!r} does not compile: {exc}"
    return None


def _modifier(spec) -> HeaderModifier | None:
    if not isinstance(spec, Mapping):
        return None
    pairs = lambda items: tuple((h.get("name", ""), str(h.get("value", ""))) for h in items or ()  # noqa: E731
                                if isinstance(h, Mapping))
    return HeaderModifier(set=pairs(spec.get("set")), add=pairs(spec.get("add")),
                          remove=tuple(str(n) for n in spec.get("remove") or ()))


def _cors(spec: Mapping) -> Cors:
    names = lambda field: tuple(str(v) for v in spec.get(field) or ())  # noqa: E731
    return Cors(allow_origins=names("allowOrigins"), allow_credentials=bool(spec.get("allowCredentials")),
                allow_methods=names("allowMethods"), allow_headers=names("allowHeaders"),
                expose_headers=names("exposeHeaders"), max_age=int(spec.get("maxAge", 5)))


def _mirror(spec: Mapping, kind: str, namespace: str, services, grants) -> tuple[Mirror | None, st.Condition | None]:
    ref = spec.get("backendRef") or {}
    resolved = gateway_backends.resolve({**ref, "weight": 1}, kind, namespace, services, grants)
    if resolved.problem is not None:
        return None, resolved.problem
    numerator, denominator = 100, 100
    if isinstance(spec.get("percent"), int):
        numerator = spec["percent"]
    elif isinstance(spec.get("fraction"), Mapping):
        numerator = int(spec["fraction"].get("numerator", 0))
        denominator = int(spec["fraction"].get("denominator", 100)) or 100
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
    fields: dict = {"grpc": grpc}
    redirect = None
    mirrors = []
    for f in rule.get("filters") or ():
        if not isinstance(f, Mapping):
            continue
        kind = f.get("type")
        if kind == "RequestHeaderModifier":
            fields["request_headers"] = _modifier(f.get("requestHeaderModifier"))
        elif kind == "ResponseHeaderModifier":
            fields["response_headers"] = _modifier(f.get("responseHeaderModifier"))
        elif kind == "RequestRedirect" and not grpc:
            redirect = f.get("requestRedirect") or {}
        elif kind == "URLRewrite" and not grpc:
            spec = f.get("urlRewrite") or {}
            path = spec.get("path") or {}
            value = path.get("replaceFullPath") if path.get("type") == "ReplaceFullPath" else path.get("replacePrefixMatch")
            fields["rewrite"] = Rewrite(hostname=spec.get("hostname") or None, path_kind=path.get("type"), path=value)
        elif kind == "RequestMirror":
            mirror, problem = _mirror(f.get("requestMirror") or {}, ctx.kind, ctx.namespace, ctx.services, ctx.grants)
            if mirror is not None:
                mirrors.append(mirror)
            if problem is not None:
                problems.append(problem)
        elif kind == "CORS" and not grpc:
            fields["cors"] = _cors(f.get("cors") or {})
        else:
            unsupported = unsupported or f"filter {kind} is not supported"
    fields["mirrors"] = tuple(mirrors)
    timeouts = rule.get("timeouts") or {}
    fields["request_timeout"] = parse_duration(timeouts.get("request"))
    fields["backend_timeout"] = parse_duration(timeouts.get("backendRequest"))
    backends: list[WeightedBackend] = []
    for ref in rule.get("backendRefs") or ():
        if not isinstance(ref, Mapping):
            continue
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
    return RouteAction(backends=tuple(backends), **fields), redirect, problems, unsupported


def http_rule(index: int, rule: Mapping, ctx: RuleContext) -> Rule:
    raw_matches = rule.get("matches")
    if raw_matches is None:
        raw_matches = [{}]
    matches = []
    regexes = []
    for raw in raw_matches:
        if not isinstance(raw, Mapping):
            continue
        path = raw.get("path") or {}
        path_match = PathMatch(path.get("type") or "PathPrefix", path.get("value") or "/")
        headers = _header_matches(raw.get("headers"), lower=True)
        query = _header_matches(raw.get("queryParams"), lower=False)
        method = raw.get("method") or None
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
    for f in rule.get("filters") or ():
        for field in ("requestRedirect", "urlRewrite"):
            if ((f.get(field) or {}).get("path") or {}).get("type") == "ReplacePrefixMatch":
                return True
    return False


def _grpc_match(raw: Mapping) -> tuple[Match, tuple, list[str]]:
    method = raw.get("method") or {}
    service, name = method.get("service") or "", method.get("method") or ""
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
    raw_matches = rule.get("matches") or [{}]
    matches, regexes = [], []
    for raw in raw_matches:
        if isinstance(raw, Mapping):
            match, key, patterns = _grpc_match(raw)
            matches.append((match, key))
            regexes += patterns
    action, _redirect_spec, problems, unsupported = _filters_and_backends(rule, ctx, grpc=True)
    return Rule(index, tuple(matches), action, None, tuple(problems), unsupported or _bad_regex(regexes))
