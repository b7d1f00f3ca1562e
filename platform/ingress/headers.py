"""Header operations and the tiny programs the router runs per request.

One mechanism for every feature that touches headers: the Ingress
annotation ``custom-headers``, the ConfigMap's ``proxy-set-headers`` and
``add-headers``, Gateway API's ``RequestHeaderModifier`` /
``ResponseHeaderModifier`` filters, and the parsed subset of snippets
(``snippets.py``). Each becomes a ``Program``: a tuple of statements, shipped
in the route's policy and interpreted by lua/headers.lua. No text from a
user is ever written into nginx.conf or turned into Lua code.

Statements:

* ``HeaderOp(side, action, name, value)``: on the request to the backend
  (``side`` "request", applied in the rewrite phase with
  ngx.req.set_header / clear_header) or on the response to the client
  ("response", applied by the lanes' header_filter). ``set`` replaces every
  value of the header, ``add`` appends one more, ``remove`` deletes it.
  Names are case-insensitive, as HTTP says (Lua compares them lower-cased).
* ``SetVar(name, value)``: a snippet's ``set $name value``. The variable is
  the program's own (a Lua table per request), never an nginx variable.
* ``Return(code, value)``: answer now (a snippet's ``return``): a redirect
  for 301/302/303/307/308 with ``value`` as Location, else ``value`` as body.
* ``If(variable, negate, value, body)``: ``if ($var = value) { body }``
  (``!=`` with ``negate``), only on a plain variable comparison.

A ``Value`` is a tuple of literal strings and ``Var`` references. Gateway
filter values are literal (a ``$`` there is a ``$``); snippets and the header
ConfigMaps may read variables (``template``), as nginx expanded them there.
Variables are read only from ``READABLE`` (and the program's own ``set``
variables): nothing else of the request or of nginx can be reached.

Names are RFC 7230 tokens; values carry no CR, LF, NUL or other control
character but HTAB, and the framing and hop-by-hop headers (Content-Length,
Transfer-Encoding, Connection, ...) are not modifiable: changing them would
desynchronise the proxy from the backend (request smuggling). Nor are, on the
request, Host and the forwarding headers the proxy sets itself (X-Real-IP,
X-Forwarded-*, X-Request-ID): its own value would silently win; Host has its
own settings (``upstream-vhost``, ``URLRewrite``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Union

from platformd.ingress import validate as v

__all__ = [
    "HeaderOp", "If", "Program", "READABLE", "Return", "SetVar", "Var", "configmap_ops", "from_modifier",
    "literal", "payload", "template", "variable_name",
]

# RFC 7230 section 3.2.6 token.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,256}$")
# Visible ASCII, space, HTAB and obs-text; no CR, LF, NUL or other controls.
_VALUE = re.compile(r"^[\t\x20-\x7e\x80-\xff]*$")
MAX_VALUE = 4096
MAX_STATEMENTS = 256

_FRAMING = frozenset({
    "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade",
    "proxy-connection",
})
# The proxy sets these itself on every request (templates/nginx.conf.j2's
# proxy_set_header list), which would silently win over a program's value.
_REQUEST_ONLY = frozenset({"host", "x-real-ip", "x-forwarded-for", "x-forwarded-host", "x-forwarded-port",
                           "x-forwarded-proto", "x-forwarded-scheme", "x-request-id"})

# What a snippet may read. The nginx variables of the request line and the
# client, plus http_*/cookie_*/arg_* (request headers, cookies, arguments).
READABLE = frozenset({
    "host", "uri", "request_uri", "document_uri", "args", "query_string", "is_args", "scheme", "https",
    "request_method", "remote_addr", "remote_port", "server_name", "server_port", "server_protocol",
    "request_id", "content_type", "content_length", "hostname", "ssl_protocol", "ssl_cipher",
    "ssl_server_name", "proxy_add_x_forwarded_for", "request_length", "msec", "time_iso8601", "time_local",
})
_READABLE_FAMILY = re.compile(r"^(?:http|cookie|arg)_[a-z0-9_]{1,64}$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


@dataclass(frozen=True, slots=True)
class Var:
    name: str


Value = tuple[Union[str, Var], ...]


def literal(text: str) -> Value:
    return (text,) if text else ()


_REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def template(field: str, text: str, own: Iterable[str] = ()) -> Value:
    """``text`` with nginx's ``$name`` / ``${name}`` references as a Value:
    each variable readable (or in ``own``, set before by the program), and no
    other ``$``. (What ingress-nginx's header ConfigMaps and snippets would
    have nginx expand; here Lua reads them per request.)"""
    parts: list = []
    last = 0
    for m in _REFERENCE.finditer(text):
        if m.start() > last:
            parts.append(text[last:m.start()])
        name = m.group(1) or m.group(2)
        if not (readable(name) or name in own):
            raise v.ValidationError(field, "$" + name, "is not a variable a route may read")
        parts.append(Var(name))
        last = m.end()
    if last < len(text):
        parts.append(text[last:])
    if any(isinstance(p, str) and "$" in p for p in parts):
        raise v.ValidationError(field, text, "has a '$' that is not a variable")
    return header_value(field, tuple(parts))


def variable_name(field: str, name: str) -> str:
    if not isinstance(name, str) or not _VARIABLE.fullmatch(name):
        raise v.ValidationError(field, name, "must be a variable name (letters, digits, '_')")
    return name


def readable(name: str) -> bool:
    return name in READABLE or bool(_READABLE_FAMILY.fullmatch(name))


def header_name(field: str, name: object) -> str:
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        raise v.ValidationError(field, name, "must be a header name (an RFC 7230 token, at most 256 characters)")
    return name


def header_value(field: str, value: Value) -> Value:
    total = 0
    for part in value:
        if isinstance(part, Var):
            variable_name(field, part.name)
            continue
        if not isinstance(part, str) or not _VALUE.fullmatch(part):
            raise v.ValidationError(field, part, "must not contain CR, LF, NUL or other control characters")
        total += len(part)
    if total > MAX_VALUE:
        raise v.ValidationError(field, "".join(p for p in value if isinstance(p, str))[:60] + "...",
                                f"is longer than {MAX_VALUE} characters")
    return value


@dataclass(frozen=True, slots=True)
class HeaderOp:
    side: str  # "request" | "response"
    action: str  # "set" | "add" | "remove"
    name: str
    value: Value = ()

    def __post_init__(self) -> None:
        if self.side not in ("request", "response"):
            raise v.ValidationError("header.side", self.side, "must be request or response")
        if self.action not in ("set", "add", "remove"):
            raise v.ValidationError("header.action", self.action, "must be set, add or remove")
        field = f"{self.side}_header[{self.name}]"
        header_name(field, self.name)
        lowered = self.name.lower()
        if lowered in _FRAMING or (self.side == "request" and lowered in _REQUEST_ONLY):
            raise v.ValidationError(field, self.name, "is a framing, hop-by-hop or forwarding header the proxy "
                                    "sets itself; it may not be changed (see upstream-vhost, use-forwarded-headers)")
        if self.action == "remove" and self.value:
            raise v.ValidationError(field, self.value, "remove takes no value")
        header_value(field, tuple(self.value))
        object.__setattr__(self, "value", tuple(self.value))


@dataclass(frozen=True, slots=True)
class SetVar:
    name: str
    value: Value

    def __post_init__(self) -> None:
        variable_name("set", self.name)
        if readable(self.name):
            raise v.ValidationError("set", self.name, "is an nginx variable; set only variables of your own")
        header_value(f"set[{self.name}]", tuple(self.value))


@dataclass(frozen=True, slots=True)
class Return:
    code: int
    value: Value = ()

    def __post_init__(self) -> None:
        if not isinstance(self.code, int) or not 200 <= self.code <= 599:
            raise v.ValidationError("return", self.code, "must be a status code 200-599")
        header_value("return", tuple(self.value))
        if self.code in (301, 302, 303, 307, 308) and not self.value:
            raise v.ValidationError("return", self.code, "a redirect needs a URL")


@dataclass(frozen=True, slots=True)
class If:
    variable: str
    negate: bool
    value: Value
    body: tuple

    def __post_init__(self) -> None:
        variable_name("if", self.variable)
        header_value("if", tuple(self.value))
        for statement in self.body:
            if not isinstance(statement, (HeaderOp, SetVar, Return)):
                raise v.ValidationError("if", statement, "may hold only header operations, set and return")


Statement = Union[HeaderOp, SetVar, Return, If]
Program = tuple  # tuple[Statement, ...]


def check_program(field: str, program: Program) -> Program:
    """``program`` if every variable it reads is readable or set before, and it is not too long."""
    count = 0
    own: set[str] = set()

    def reads(value: Value) -> None:
        for part in value:
            if isinstance(part, Var) and not (readable(part.name) or part.name in own):
                raise v.ValidationError(field, "$" + part.name, "is not a variable a route may read")

    def walk(statements: Iterable[Statement]) -> None:
        nonlocal count
        for statement in statements:
            count += 1
            if isinstance(statement, If):
                if not (readable(statement.variable) or statement.variable in own):
                    raise v.ValidationError(field, "$" + statement.variable, "is not a variable a route may read")
                reads(statement.value)
                walk(statement.body)
            elif isinstance(statement, SetVar):
                reads(statement.value)
                own.add(statement.name)
            elif isinstance(statement, (HeaderOp, Return)):
                reads(statement.value)
            else:
                raise v.ValidationError(field, statement, "is not a header statement")

    walk(program)
    if count > MAX_STATEMENTS:
        raise v.ValidationError(field, count, f"has more than {MAX_STATEMENTS} statements")
    return tuple(program)


# --- builders -----------------------------------------------------------------


def from_modifier(side: str, set: Iterable[tuple[str, str]] = (), add: Iterable[tuple[str, str]] = (),
                  remove: Iterable[str] = ()) -> Program:
    """A Gateway API header modifier (values literal), in the order: set, add, remove."""
    ops = [HeaderOp(side, "set", name, literal(value)) for name, value in set]
    ops += [HeaderOp(side, "add", name, literal(value)) for name, value in add]
    ops += [HeaderOp(side, "remove", name) for name in remove]
    return tuple(ops)


def configmap_ops(side: str, configmap: Mapping | None, ref: str,
                  allowed: frozenset[str] | None = None) -> Program:
    """The ``data`` of a headers ConfigMap (ingress-nginx's ``proxy-set-headers``,
    ``add-headers``, ``custom-headers``: header name → value) as ``set``
    operations, in name order. Values may read variables (``template``), as
    nginx expanded them in ingress-nginx. Raises ValidationError
    naming ``ref`` when the ConfigMap is missing or a pair is not a header, or
    (``allowed`` given: lower-case names) a name the operator does not allow."""
    if configmap is None:
        raise v.ValidationError(ref, ref, "ConfigMap not found (the controller reads ConfigMaps only with "
                                "--configmap: of its namespace, or of all when it watches all namespaces)")
    data = configmap.get("data") or {}
    if not isinstance(data, Mapping):
        raise v.ValidationError(ref, data, "ConfigMap data must be a map of header names to values")
    ops = []
    for name in sorted(data):
        value = data[name]
        if not isinstance(value, str):
            raise v.ValidationError(f"{ref}[{name}]", value, "must be a string")
        if allowed is not None and str(name).lower() not in allowed:
            raise v.ValidationError(f"ConfigMap {ref}", name, "is not a header the ConfigMap's "
                                    "global-allowed-response-headers allows")
        try:
            ops.append(HeaderOp(side, "set", name, template(f"{ref}[{name}]", value)))
        except v.ValidationError as exc:
            raise exc.within(f"ConfigMap {ref}") from None
    return tuple(ops)


# --- payload ------------------------------------------------------------------


def _value(value: Value) -> list[Any]:
    """Literal parts as strings, variables as {"v": name}."""
    return [{"v": part.name} if isinstance(part, Var) else part for part in value]


def _statement(statement: Statement) -> dict[str, Any]:
    if isinstance(statement, HeaderOp):
        return {"op": statement.side[:3] + "_" + statement.action, "name": statement.name,
                "value": _value(statement.value)}
    if isinstance(statement, SetVar):
        return {"op": "var", "name": statement.name, "value": _value(statement.value)}
    if isinstance(statement, Return):
        return {"op": "return", "code": statement.code, "value": _value(statement.value)}
    return {"op": "if", "name": statement.variable, "negate": statement.negate, "value": _value(statement.value),
            "body": [_statement(s) for s in statement.body]}


def payload(program: Program) -> list[dict[str, Any]] | None:
    """The program as the router's policy carries it (lua/headers.lua); None when empty.

    Ops are "req_set", "req_add", "req_remove", "res_set", "res_add",
    "res_remove" (``name`` as written; Lua compares it case-insensitively), "var", "return", "if"."""
    if not program:
        return None
    return [_statement(s) for s in program]
