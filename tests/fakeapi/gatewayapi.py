"""The Gateway API kinds (v1.6 standard channel), served as their CRDs are.

A real cluster serves these kinds only once the Gateway API CRDs are
installed. `FakeApiServer(gateway_api=False)` models a cluster without them:
the group is absent from discovery and every path under it is a 404 (see
`CRD_BUNDLE` and `ResourceType.crd`).

What the CRDs' OpenAPI schemas do on the server, written from the v1.6 Go
types' kubebuilder markers (not copied from the CRD files):

* defaults (`apply_defaults`): route rules and matches (`PathPrefix` "/"),
  header/query/method match types (`Exact`), parentRef group/kind
  (`gateway.networking.k8s.io`/`Gateway`), backendRef group/kind/weight
  (""/`Service`/1), certificateRef group/kind (""/`Secret`), listener
  `allowedRoutes` (`from: Same`) and TLS mode (`Terminate`), redirect status
  code (302), mirror fraction denominator (100), Gateway address type
  (`IPAddress`), and the "Waiting for controller" status conditions a new
  GatewayClass or Gateway shows;
* validation (`validate`, `validate_update`): required fields, enums, ranges
  and the CEL rules clients trip over (filter type and its field, filters
  that cannot repeat, redirect with backendRefs, ReplacePrefixMatch needing
  one PathPrefix match, path value rules, listener name and
  port/protocol/hostname uniqueness, TLS per protocol, controllerName
  immutable, backendRequest timeout not above request). Messages are the
  CEL rules' messages, so tests can match them.
"""

from __future__ import annotations

import copy
import re

from .errors import FieldError, duplicate, invalid, not_supported, required, too_many
from .resources import GATEWAY_API, ResourceType

GROUP = "gateway.networking.k8s.io"
CRD_BUNDLE = GATEWAY_API


_PENDING = {"status": "Unknown", "reason": "Pending", "message": "Waiting for controller",
            "lastTransitionTime": "1970-01-01T00:00:00Z"}
_PATH_DEFAULT = {"type": "PathPrefix", "value": "/"}


# --- defaults ---------------------------------------------------------------------------------

def apply_defaults(rt: ResourceType, obj: dict) -> None:
    """Fill the CRD schema defaults into `obj` in place (create and update)."""
    spec = obj.get("spec")
    kind = rt.kind
    if kind == "GatewayClass" and rt.group == GROUP:
        if not (obj.get("status") or {}).get("conditions"):
            obj["status"] = {**(obj.get("status") or {}),
                             "conditions": [{"type": "Accepted", **_PENDING}]}
    elif kind == "Gateway" and rt.group == GROUP:
        if not (obj.get("status") or {}).get("conditions"):
            obj["status"] = {**(obj.get("status") or {}),
                             "conditions": [{"type": "Accepted", **_PENDING},
                                            {"type": "Programmed", **_PENDING}]}
        if isinstance(spec, dict):
            _default_gateway(spec)
    elif kind in ("HTTPRoute", "GRPCRoute") and rt.group == GROUP and isinstance(spec, dict):
        _default_route(spec, kind == "HTTPRoute")


def _default_gateway(spec: dict) -> None:
    for address in _items(spec.get("addresses")):
        address.setdefault("type", "IPAddress")
    for listener in _items(spec.get("listeners")):
        allowed = listener.setdefault("allowedRoutes", {})
        if isinstance(allowed, dict):
            namespaces = allowed.setdefault("namespaces", {})
            if isinstance(namespaces, dict):
                namespaces.setdefault("from", "Same")
            for kind in _items(allowed.get("kinds")):
                kind.setdefault("group", GROUP)
        tls = listener.get("tls")
        if isinstance(tls, dict):
            tls.setdefault("mode", "Terminate")
            for ref in _items(tls.get("certificateRefs")):
                ref.setdefault("group", "")
                ref.setdefault("kind", "Secret")


def _default_route(spec: dict, http: bool) -> None:
    for ref in _items(spec.get("parentRefs")):
        ref.setdefault("group", GROUP)
        ref.setdefault("kind", "Gateway")
    if http and "rules" not in spec:
        spec["rules"] = [{"matches": [{"path": dict(_PATH_DEFAULT)}]}]
    for rule in _items(spec.get("rules")):
        if http:
            if "matches" not in rule:
                rule["matches"] = [{"path": dict(_PATH_DEFAULT)}]
            for match in _items(rule.get("matches")):
                path = match.setdefault("path", dict(_PATH_DEFAULT))
                if isinstance(path, dict):
                    path.setdefault("type", "PathPrefix")
                    path.setdefault("value", "/")
                for query in _items(match.get("queryParams")):
                    query.setdefault("type", "Exact")
        else:
            for match in _items(rule.get("matches")):
                method = match.get("method")
                if isinstance(method, dict):
                    method.setdefault("type", "Exact")
        for match in _items(rule.get("matches")):
            for header in _items(match.get("headers")):
                header.setdefault("type", "Exact")
        _default_filters(rule.get("filters"))
        for backend in _items(rule.get("backendRefs")):
            backend.setdefault("group", "")
            backend.setdefault("kind", "Service")
            backend.setdefault("weight", 1)
            _default_filters(backend.get("filters"))


def _default_filters(filters) -> None:
    for f in _items(filters):
        redirect = f.get("requestRedirect")
        if isinstance(redirect, dict):
            redirect.setdefault("statusCode", 302)
        mirror = f.get("requestMirror")
        if isinstance(mirror, dict):
            ref = mirror.get("backendRef")
            if isinstance(ref, dict):
                ref.setdefault("group", "")
                ref.setdefault("kind", "Service")
            if isinstance(mirror.get("fraction"), dict):
                mirror["fraction"].setdefault("denominator", 100)
        cors = f.get("cors")
        if isinstance(cors, dict):
            cors.setdefault("maxAge", 5)


def _items(value) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


# --- validation -------------------------------------------------------------------------------

_HOSTNAME_RE = re.compile(r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PRECISE_HOSTNAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SECTION_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_CONTROLLER_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$")
_HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$")
_PATH_CHARS_RE = re.compile(r"^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$")
_DURATION_RE = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")
_GRPC_SERVICE_RE = re.compile(r"^\.?[a-z_][a-z_0-9]*(\.[a-z_][a-z_0-9]*)*$", re.IGNORECASE)
_GRPC_METHOD_RE = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")
_PROTOCOL_RE = re.compile(r"^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9]+$")
_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"]
_HTTP_FILTERS = ["RequestHeaderModifier", "ResponseHeaderModifier", "RequestMirror",
                 "RequestRedirect", "URLRewrite", "ExtensionRef", "CORS"]
_GRPC_FILTERS = ["ResponseHeaderModifier", "RequestHeaderModifier", "RequestMirror", "ExtensionRef"]
_FILTER_FIELDS = {"RequestHeaderModifier": "requestHeaderModifier",
                  "ResponseHeaderModifier": "responseHeaderModifier",
                  "RequestMirror": "requestMirror", "RequestRedirect": "requestRedirect",
                  "URLRewrite": "urlRewrite", "ExtensionRef": "extensionRef", "CORS": "cors"}
_NOT_REPEATED = ("CORS", "RequestHeaderModifier", "ResponseHeaderModifier", "RequestRedirect",
                 "URLRewrite")


def validate(rt: ResourceType, obj: dict) -> list[FieldError]:
    """The schema and CEL checks of `rt`'s CRD; [] for other types."""
    check = _VALIDATORS.get(rt.kind) if rt.group == GROUP else None
    if check is None:
        return []
    # A CRD's schema defaults are applied when the body is decoded, before any
    # validation; the registry defaults after its first check, so do it here.
    obj = copy.deepcopy(obj)
    apply_defaults(rt, obj)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    return check(spec)


def validate_update(rt: ResourceType, old: dict, new: dict) -> list[FieldError]:
    if rt.group == GROUP and rt.kind == "GatewayClass":
        before = (old.get("spec") or {}).get("controllerName")
        after = (new.get("spec") or {}).get("controllerName")
        if before != after:
            return [invalid("spec.controllerName", after, "Value is immutable")]
    return []


def _name_errors(field: str, value, max_len: int = 253) -> list[FieldError]:
    if not isinstance(value, str) or not value:
        return [required(field)]
    if len(value) > max_len:
        return [invalid(field, value, f"must be no more than {max_len} characters")]
    return []


def _enum(field: str, value, allowed: list[str]) -> list[FieldError]:
    return [] if value in allowed else [not_supported(field, value, allowed)]


def _hostname_errors(field: str, value, precise: bool = False) -> list[FieldError]:
    pattern = _PRECISE_HOSTNAME_RE if precise else _HOSTNAME_RE
    if not isinstance(value, str) or not pattern.match(value) or len(value) > 253:
        return [invalid(field, value, f"should match '{pattern.pattern}'")]
    return []


def _port_errors(field: str, value, optional: bool = False) -> list[FieldError]:
    if value is None:
        return [] if optional else [required(field)]
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        return [invalid(field, value, "should be between 1 and 65535")]
    return []


def _validate_gateway_class(spec: dict) -> list[FieldError]:
    name = spec.get("controllerName")
    if not isinstance(name, str) or not name:
        return [required("spec.controllerName")]
    if not _CONTROLLER_RE.match(name) or len(name) > 253:
        return [invalid("spec.controllerName", name, f"should match '{_CONTROLLER_RE.pattern}'")]
    return []


def _validate_gateway(spec: dict) -> list[FieldError]:
    errs = _name_errors("spec.gatewayClassName", spec.get("gatewayClassName"))
    listeners = spec.get("listeners")
    if not isinstance(listeners, list) or not listeners:
        return errs + [required("spec.listeners")]
    if len(listeners) > 64:
        errs.append(too_many("spec.listeners", len(listeners), 64))
    seen_names: set = set()
    seen_combos: set = set()
    for i, listener in enumerate(listeners):
        base = f"spec.listeners[{i}]"
        if not isinstance(listener, dict):
            errs.append(invalid(base, listener, "must be an object"))
            continue
        name = listener.get("name")
        if not isinstance(name, str) or not _SECTION_NAME_RE.match(name):
            errs.append(invalid(f"{base}.name", name, f"should match '{_SECTION_NAME_RE.pattern}'"))
        protocol = listener.get("protocol")
        if not isinstance(protocol, str) or not protocol or not _PROTOCOL_RE.match(protocol):
            errs.append(invalid(f"{base}.protocol", protocol, f"should match '{_PROTOCOL_RE.pattern}'"))
        errs += _port_errors(f"{base}.port", listener.get("port"))
        hostname = listener.get("hostname")
        if hostname is not None:
            errs += _hostname_errors(f"{base}.hostname", hostname)
        tls = listener.get("tls")
        if protocol in ("HTTP", "TCP", "UDP") and tls is not None:
            errs.append(invalid("spec.listeners", "", "tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']"))
        if protocol == "HTTPS" and isinstance(tls, dict) and tls.get("mode") not in (None, "", "Terminate"):
            errs.append(invalid("spec.listeners", "", "tls mode must be Terminate for protocol HTTPS"))
        if protocol == "TLS" and not (isinstance(tls, dict) and tls.get("mode")):
            errs.append(invalid("spec.listeners", "", "tls mode must be set for protocol TLS"))
        if protocol in ("TCP", "UDP") and hostname:
            errs.append(invalid("spec.listeners", "", "hostname must not be specified for protocols ['TCP', 'UDP']"))
        if isinstance(tls, dict):
            errs += _listener_tls_errors(f"{base}.tls", tls)
        errs += _allowed_routes_errors(f"{base}.allowedRoutes", listener.get("allowedRoutes"))
        if name in seen_names:
            errs.append(invalid("spec.listeners", "", "Listener name must be unique within the Gateway"))
        seen_names.add(name)
        combo = (listener.get("port"), protocol, hostname)
        if combo in seen_combos:
            errs.append(invalid("spec.listeners", "",
                                "Combination of port, protocol and hostname must be unique for each listener"))
        seen_combos.add(combo)
    addresses = spec.get("addresses")
    if isinstance(addresses, list):
        if len(addresses) > 16:
            errs.append(too_many("spec.addresses", len(addresses), 16))
        values = [(a.get("type"), a.get("value")) for a in _items(addresses) if a.get("value")]
        if len(values) != len(set(values)):
            errs.append(invalid("spec.addresses", "", "IPAddress values must be unique"))
    return errs


def _listener_tls_errors(base: str, tls: dict) -> list[FieldError]:
    errs = _enum(f"{base}.mode", tls.get("mode"), ["Terminate", "Passthrough"])
    refs = tls.get("certificateRefs")
    if tls.get("mode") == "Terminate" and not refs and not tls.get("options"):
        errs.append(invalid(base, "", "certificateRefs or options must be specified when mode is Terminate"))
    for j, ref in enumerate(_items(refs)):
        errs += _name_errors(f"{base}.certificateRefs[{j}].name", ref.get("name"))
    return errs


def _allowed_routes_errors(base: str, allowed) -> list[FieldError]:
    if not isinstance(allowed, dict):
        return []
    errs: list[FieldError] = []
    namespaces = allowed.get("namespaces") or {}
    errs += _enum(f"{base}.namespaces.from", namespaces.get("from"), ["All", "Selector", "Same"])
    kinds = allowed.get("kinds")
    if isinstance(kinds, list) and len(kinds) > 8:
        errs.append(too_many(f"{base}.kinds", len(kinds), 8))
    for j, kind in enumerate(_items(kinds)):
        errs += _name_errors(f"{base}.kinds[{j}].kind", kind.get("kind"), 63)
    return errs


def _parent_refs_errors(spec: dict) -> list[FieldError]:
    refs = spec.get("parentRefs")
    errs: list[FieldError] = []
    if not isinstance(refs, list):
        return errs
    if len(refs) > 32:
        errs.append(too_many("spec.parentRefs", len(refs), 32))
    parents: dict[tuple, list] = {}
    for i, ref in enumerate(_items(refs)):
        errs += _name_errors(f"spec.parentRefs[{i}].name", ref.get("name"))
        errs += _port_errors(f"spec.parentRefs[{i}].port", ref.get("port"), optional=True)
        key = (ref.get("group"), ref.get("kind"), ref.get("namespace") or "", ref.get("name"))
        parents.setdefault(key, []).append(ref.get("sectionName"))
    for sections in parents.values():
        if len(sections) > 1 and any(s is None or s == "" for s in sections):
            errs.append(invalid("spec.parentRefs", "",
                                "sectionName must be specified when parentRefs includes 2 or more "
                                "references to the same parent"))
        elif len(sections) != len(set(sections)):
            errs.append(invalid("spec.parentRefs", "",
                                "sectionName must be unique when parentRefs includes 2 or more "
                                "references to the same parent"))
    return errs


def _hostnames_errors(spec: dict) -> list[FieldError]:
    hostnames = spec.get("hostnames")
    if not isinstance(hostnames, list):
        return []
    errs = [too_many("spec.hostnames", len(hostnames), 16)] if len(hostnames) > 16 else []
    for i, name in enumerate(hostnames):
        errs += _hostname_errors(f"spec.hostnames[{i}]", name)
    return errs


def _header_matches_errors(base: str, headers) -> list[FieldError]:
    errs: list[FieldError] = []
    names = []
    for k, header in enumerate(_items(headers)):
        name = header.get("name")
        if not isinstance(name, str) or not _HEADER_NAME_RE.match(name):
            errs.append(invalid(f"{base}[{k}].name", name, f"should match '{_HEADER_NAME_RE.pattern}'"))
        errs += _enum(f"{base}[{k}].type", header.get("type"), ["Exact", "RegularExpression"])
        if not isinstance(header.get("value"), str) or not header.get("value"):
            errs.append(required(f"{base}[{k}].value"))
        names.append(str(name).lower())
    for name in {n for n in names if names.count(n) > 1}:
        errs.append(duplicate(base, name))
    return errs


def _path_match_errors(base: str, path) -> list[FieldError]:
    if not isinstance(path, dict):
        return []
    kind, value = path.get("type"), path.get("value")
    errs = _enum(f"{base}.type", kind, ["Exact", "PathPrefix", "RegularExpression"])
    if not isinstance(value, str) or len(value) > 1024:
        return errs + [invalid(f"{base}.value", value, "must be a string of at most 1024 characters")]
    if kind not in ("Exact", "PathPrefix"):
        return errs
    if not value.startswith("/"):
        errs.append(invalid(base, "", "value must be an absolute path and start with '/' when type one of ['Exact', 'PathPrefix']"))
    for bad in ("//", "/./", "/../", "%2f", "%2F", "#"):
        if bad in value:
            errs.append(invalid(base, "", f"must not contain '{bad}' when type one of ['Exact', 'PathPrefix']"))
    for end in ("/..", "/."):
        if value.endswith(end):
            errs.append(invalid(base, "", f"must not end with '{end}' when type one of ['Exact', 'PathPrefix']"))
    if not _PATH_CHARS_RE.match(value):
        errs.append(invalid(base, "", "must only contain valid characters (matching "
                                      "^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$) "
                                      "for types ['Exact', 'PathPrefix']"))
    return errs


def _backend_ref_errors(base: str, ref: dict) -> list[FieldError]:
    errs = _name_errors(f"{base}.name", ref.get("name"))
    errs += _port_errors(f"{base}.port", ref.get("port"), optional=True)
    if ref.get("group", "") == "" and ref.get("kind", "Service") == "Service" and ref.get("port") is None:
        errs.append(invalid(base, "", "Must have port for Service reference"))
    weight = ref.get("weight")
    if weight is not None and (not isinstance(weight, int) or isinstance(weight, bool)
                               or not 0 <= weight <= 1000000):
        errs.append(invalid(f"{base}.weight", weight, "should be between 0 and 1000000"))
    return errs


def _header_filter_errors(base: str, modifier) -> list[FieldError]:
    errs: list[FieldError] = []
    if not isinstance(modifier, dict):
        return errs
    for op in ("set", "add"):
        names = [str(h.get("name", "")).lower() for h in _items(modifier.get(op))]
        for name in {n for n in names if names.count(n) > 1}:
            errs.append(duplicate(f"{base}.{op}", name))
    remove = modifier.get("remove") or []
    if len(remove) != len({str(r).lower() for r in remove}):
        errs.append(invalid(f"{base}.remove", remove, "must not contain duplicates"))
    return errs


def _filters_errors(base: str, filters, allowed: list[str]) -> list[FieldError]:
    errs: list[FieldError] = []
    if not isinstance(filters, list):
        return errs
    if len(filters) > 16:
        errs.append(too_many(base, len(filters), 16))
    types = [f.get("type") for f in _items(filters)]
    for k, f in enumerate(_items(filters)):
        kind = f.get("type")
        errs += _enum(f"{base}[{k}].type", kind, allowed)
        for filter_type, field in _FILTER_FIELDS.items():
            has = f.get(field) is not None
            if has and kind != filter_type:
                errs.append(invalid(f"{base}[{k}]", "", f"filter.{field} must be nil if the filter.type is not {filter_type}"))
            if not has and kind == filter_type:
                errs.append(invalid(f"{base}[{k}]", "", f"filter.{field} must be specified for {filter_type} filter.type"))
        errs += _header_filter_errors(f"{base}[{k}].requestHeaderModifier", f.get("requestHeaderModifier"))
        errs += _header_filter_errors(f"{base}[{k}].responseHeaderModifier", f.get("responseHeaderModifier"))
        redirect = f.get("requestRedirect")
        if isinstance(redirect, dict):
            errs += _enum(f"{base}[{k}].requestRedirect.statusCode", redirect.get("statusCode"),
                          [301, 302, 303, 307, 308])
            if redirect.get("scheme") is not None:
                errs += _enum(f"{base}[{k}].requestRedirect.scheme", redirect.get("scheme"), ["http", "https"])
            if redirect.get("hostname") is not None:
                errs += _hostname_errors(f"{base}[{k}].requestRedirect.hostname", redirect["hostname"], True)
            errs += _port_errors(f"{base}[{k}].requestRedirect.port", redirect.get("port"), optional=True)
            errs += _path_modifier_errors(f"{base}[{k}].requestRedirect.path", redirect.get("path"))
        rewrite = f.get("urlRewrite")
        if isinstance(rewrite, dict):
            if rewrite.get("hostname") is not None:
                errs += _hostname_errors(f"{base}[{k}].urlRewrite.hostname", rewrite["hostname"], True)
            errs += _path_modifier_errors(f"{base}[{k}].urlRewrite.path", rewrite.get("path"))
        mirror = f.get("requestMirror")
        if isinstance(mirror, dict):
            errs += _mirror_errors(f"{base}[{k}].requestMirror", mirror)
        cors = f.get("cors")
        if isinstance(cors, dict):
            errs += _cors_errors(f"{base}[{k}].cors", cors)
    for kind in _NOT_REPEATED:
        if types.count(kind) > 1:
            errs.append(invalid(base, "", f"{kind} filter cannot be repeated"))
    if "RequestRedirect" in types and "URLRewrite" in types:
        errs.append(invalid(base, "", "May specify either httpRouteFilterRequestRedirect or "
                                      "httpRouteFilterRequestRewrite, but not both"))
    return errs


def _path_modifier_errors(base: str, path) -> list[FieldError]:
    if not isinstance(path, dict):
        return []
    kind = path.get("type")
    errs = _enum(f"{base}.type", kind, ["ReplaceFullPath", "ReplacePrefixMatch"])
    for name, field in (("ReplaceFullPath", "replaceFullPath"), ("ReplacePrefixMatch", "replacePrefixMatch")):
        if kind == name and field not in path:
            errs.append(invalid(base, "", f"{field} must be specified when type is set to '{name}'"))
        if field in path and kind != name:
            errs.append(invalid(base, "", f"type must be '{name}' when {field} is set"))
    return errs


def _mirror_errors(base: str, mirror: dict) -> list[FieldError]:
    errs: list[FieldError] = []
    ref = mirror.get("backendRef")
    if not isinstance(ref, dict):
        errs.append(required(f"{base}.backendRef"))
    else:
        errs += _backend_ref_errors(f"{base}.backendRef", {**ref, "weight": None})
    if mirror.get("percent") is not None and mirror.get("fraction") is not None:
        errs.append(invalid(base, "", "Only one of percent or fraction may be specified in HTTPRequestMirrorFilter"))
    percent = mirror.get("percent")
    if percent is not None and (not isinstance(percent, int) or not 0 <= percent <= 100):
        errs.append(invalid(f"{base}.percent", percent, "should be between 0 and 100"))
    fraction = mirror.get("fraction")
    if isinstance(fraction, dict):
        numerator, denominator = fraction.get("numerator"), fraction.get("denominator", 100)
        if not isinstance(numerator, int) or numerator < 0:
            errs.append(invalid(f"{base}.fraction.numerator", numerator, "should be at least 0"))
        elif not isinstance(denominator, int) or denominator < 1:
            errs.append(invalid(f"{base}.fraction.denominator", denominator, "should be at least 1"))
        elif numerator > denominator:
            errs.append(invalid(f"{base}.fraction", "", "numerator must be less than or equal to denominator"))
    return errs


def _cors_errors(base: str, cors: dict) -> list[FieldError]:
    errs: list[FieldError] = []
    for field, limit, what in (("allowOrigins", 64, "origins"), ("allowMethods", 9, "methods"),
                               ("allowHeaders", 64, "methods")):
        values = cors.get(field) or []
        if len(values) > limit:
            errs.append(too_many(f"{base}.{field}", len(values), limit))
        if "*" in values and len(values) > 1:
            label = {"allowOrigins": "AllowOrigins", "allowMethods": "AllowMethods",
                     "allowHeaders": "AllowHeaders"}[field]
            errs.append(invalid(f"{base}.{field}", "", f"{label} cannot contain '*' alongside other {what}"))
    for j, method in enumerate(cors.get("allowMethods") or []):
        errs += _enum(f"{base}.allowMethods[{j}]", method, _METHODS + ["*"])
    return errs


def _timeouts_errors(base: str, timeouts) -> list[FieldError]:
    if not isinstance(timeouts, dict):
        return []
    errs: list[FieldError] = []
    seconds = {}
    for field in ("request", "backendRequest"):
        value = timeouts.get(field)
        if value is None:
            continue
        if not isinstance(value, str) or not _DURATION_RE.match(value):
            errs.append(invalid(f"{base}.{field}", value, f"should match '{_DURATION_RE.pattern}'"))
        else:
            seconds[field] = duration_seconds(value)
    if seconds.get("request") and seconds.get("backendRequest", 0) > seconds["request"]:
        errs.append(invalid(base, "", "backendRequest timeout cannot be longer than request timeout"))
    return errs


def duration_seconds(value: str) -> float:
    """A Gateway API Duration ("1h2m3s", "500ms") in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(int(n) * units[u] for n, u in re.findall(r"([0-9]+)(ms|h|m|s)", value))


def _rule_match_count_errors(rules: list) -> list[FieldError]:
    total = sum(len(r.get("matches") or []) for r in _items(rules))
    if total > 128:
        return [invalid("spec.rules", "", "While 16 rules and 64 matches per rule are allowed, the "
                                          "total number of matches across all rules in a route must "
                                          "be less than 128")]
    return []


def _validate_http_route(spec: dict) -> list[FieldError]:
    errs = _parent_refs_errors(spec) + _hostnames_errors(spec)
    rules = spec.get("rules") or []
    if len(rules) > 16:
        errs.append(too_many("spec.rules", len(rules), 16))
    errs += _rule_match_count_errors(rules)
    for i, rule in enumerate(_items(rules)):
        base = f"spec.rules[{i}]"
        matches = rule.get("matches") or []
        if len(matches) > 64:
            errs.append(too_many(f"{base}.matches", len(matches), 64))
        for j, match in enumerate(_items(matches)):
            errs += _path_match_errors(f"{base}.matches[{j}].path", match.get("path"))
            errs += _header_matches_errors(f"{base}.matches[{j}].headers", match.get("headers"))
            errs += _header_matches_errors(f"{base}.matches[{j}].queryParams", match.get("queryParams"))
            if match.get("method") is not None:
                errs += _enum(f"{base}.matches[{j}].method", match.get("method"), _METHODS)
        filters = rule.get("filters")
        errs += _filters_errors(f"{base}.filters", filters, _HTTP_FILTERS)
        backends = _items(rule.get("backendRefs"))
        if len(backends) > 16:
            errs.append(too_many(f"{base}.backendRefs", len(backends), 16))
        for k, backend in enumerate(backends):
            errs += _backend_ref_errors(f"{base}.backendRefs[{k}]", backend)
            errs += _filters_errors(f"{base}.backendRefs[{k}].filters", backend.get("filters"), _HTTP_FILTERS)
        if backends and any(f.get("requestRedirect") for f in _items(filters)):
            errs.append(invalid(base, "", "RequestRedirect filter must not be used together with backendRefs"))
        for kind, field in (("RequestRedirect", "requestRedirect"), ("URLRewrite", "urlRewrite")):
            if _uses_prefix_replace(_items(filters), field) and not _one_prefix_match(matches):
                errs.append(invalid(base, "", f"When using {kind} filter with path.replacePrefixMatch, "
                                              "exactly one PathPrefix match must be specified"))
        errs += _timeouts_errors(f"{base}.timeouts", rule.get("timeouts"))
    return errs


def _uses_prefix_replace(filters: list[dict], field: str) -> bool:
    return any(((f.get(field) or {}).get("path") or {}).get("type") == "ReplacePrefixMatch" for f in filters)


def _one_prefix_match(matches: list) -> bool:
    return len(matches) == 1 and ((matches[0] or {}).get("path") or {}).get("type") == "PathPrefix"


def _validate_grpc_route(spec: dict) -> list[FieldError]:
    errs = _parent_refs_errors(spec) + _hostnames_errors(spec)
    rules = spec.get("rules") or []
    if len(rules) > 16:
        errs.append(too_many("spec.rules", len(rules), 16))
    errs += _rule_match_count_errors(rules)
    for i, rule in enumerate(_items(rules)):
        base = f"spec.rules[{i}]"
        for j, match in enumerate(_items(rule.get("matches"))):
            method = match.get("method")
            if isinstance(method, dict):
                mbase = f"{base}.matches[{j}].method"
                errs += _enum(f"{mbase}.type", method.get("type"), ["Exact", "RegularExpression"])
                if method.get("service") is None and method.get("method") is None:
                    errs.append(invalid(mbase, "", "One or both of 'service' or 'method' must be specified"))
                if method.get("type") == "Exact":
                    service, name = method.get("service"), method.get("method")
                    if service is not None and not _GRPC_SERVICE_RE.match(str(service)):
                        errs.append(invalid(mbase, "", "service must only contain valid characters (matching "
                                                       "^(?i)\\.?[a-z_][a-z_0-9]*(\\.[a-z_][a-z_0-9]*)*$)"))
                    if name is not None and not _GRPC_METHOD_RE.match(str(name)):
                        errs.append(invalid(mbase, "", "method must only contain valid characters (matching "
                                                       "^[A-Za-z_][A-Za-z_0-9]*$)"))
            errs += _header_matches_errors(f"{base}.matches[{j}].headers", match.get("headers"))
        errs += _filters_errors(f"{base}.filters", rule.get("filters"), _GRPC_FILTERS)
        for k, backend in enumerate(_items(rule.get("backendRefs"))):
            errs += _backend_ref_errors(f"{base}.backendRefs[{k}]", backend)
            errs += _filters_errors(f"{base}.backendRefs[{k}].filters", backend.get("filters"), _GRPC_FILTERS)
    return errs


def _validate_reference_grant(spec: dict) -> list[FieldError]:
    errs: list[FieldError] = []
    for field, keys in (("from", ("group", "kind", "namespace")), ("to", ("group", "kind"))):
        entries = spec.get(field)
        if not isinstance(entries, list) or not entries:
            errs.append(required(f"spec.{field}"))
            continue
        if len(entries) > 16:
            errs.append(too_many(f"spec.{field}", len(entries), 16))
        for i, entry in enumerate(_items(entries)):
            for key in keys:
                if not isinstance(entry.get(key), str) or (key != "group" and not entry.get(key)):
                    errs.append(required(f"spec.{field}[{i}].{key}"))
    return errs


_VALIDATORS = {
    "GatewayClass": _validate_gateway_class,
    "Gateway": _validate_gateway,
    "HTTPRoute": _validate_http_route,
    "GRPCRoute": _validate_grpc_route,
    "ReferenceGrant": _validate_reference_grant,
}
