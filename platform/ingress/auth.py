"""Authentication: ingress-nginx's ``auth-*`` and ``satisfy`` annotations and
the ConfigMap's ``global-auth-*`` keys, as data for lua/auth.lua.

Three steps, each pure:

* ``request(values)``: the annotations of one Ingress (already through
  annotations._plain / their parsers) -> ``AuthRequest``, what the Ingress
  asks for (a Secret *name*, an external URL). Cached with the annotations.
* ``global_auth(data)``: the ConfigMap's ``global-auth-*`` keys ->
  ``ExternalAuth`` | None, plus issues.
* ``resolve(request, namespace, secrets, global_auth)``: the request with its
  Secret read -> ``Auth`` (the users and their hashes), or ``Refusal`` (the
  Ingress is not served: fail closed; the message names the annotation and
  the Secret, never its content).

``Auth`` travels in the route policy (routes.py, key "auth") to Lua, which
verifies per request (lua/auth_basic.lua, auth_digest.lua, auth_external.lua):
no reload for any auth change. Credentials (htpasswd hashes, digest HA1s)
live only in the routes sections held by nginx's shared dict and in the
controller's memory; ``Auth.__repr__`` and ``payload`` callers never print
them (docs/security.md, "Credentials").
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from platformd.ingress import validate as v

__all__ = ["ANNOTATIONS", "secret_key", "Auth", "AuthRequest", "ExternalAuth", "LocalAuth", "Refusal",
           "global_auth", "payload", "request", "resolve"]

# The annotations of this group (without the prefix), so annotations.py can
# route them here.
ANNOTATIONS = (
    "auth-type", "auth-secret", "auth-secret-type", "auth-realm",
    "auth-url", "auth-method", "auth-signin", "auth-signin-redirect-param", "auth-response-headers",
    "auth-request-redirect", "auth-proxy-set-headers", "auth-cache-key", "auth-cache-duration",
    "auth-keepalive", "auth-keepalive-requests", "auth-keepalive-timeout", "auth-keepalive-share-vars",
    "auth-always-set-cookie", "enable-global-auth", "satisfy",
)

PREFIX = "nginx.ingress.kubernetes.io/"

# Bounds far above honest use: an htpasswd file of a few thousand users.
MAX_USERS = 10_000
MAX_HEADERS = 64


class Invalid(ValueError):
    """A bad value; the message says why (never echoes a credential)."""


# --- value parsers (text already free of quotes, ';', braces, '$' unless said) ---

_URL = re.compile(
    r"(?P<scheme>https?)://(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?)"
    r"(?::(?P<port>[0-9]{1,5}))?(?P<path>/[!%&'()*+,\-./0-9:=?@A-Z_a-z~]*)?")


def url(text: str) -> str:
    """An http(s) URL: scheme, host, optional port and path/query; no userinfo,
    no fragment, no spaces or nginx variables."""
    text = text.strip()
    m = _URL.fullmatch(text)
    if m is None or len(text) > 2048:
        raise Invalid("must be an http:// or https:// URL with a host, an optional port and path, "
                      "without user info or '#' (at most 2048 characters)")
    if m.group("port") is not None and not 1 <= int(m.group("port")) <= 65535:
        raise Invalid("has a port outside 1-65535")
    return text


# Variables an auth-url / auth-signin may hold, as ingress-nginx users write
# them (oauth2-proxy's "https://$host/oauth2/auth", "...?rd=$escaped_request_uri"),
# expanded by lua/auth_external.lua per request, each with a stand-in that
# the URL check below sees in its place.
URL_VARIABLES = {
    "scheme": "http", "pass_access_scheme": "http",
    "host": "h.example", "http_host": "h.example", "best_http_host": "h.example", "server_name": "h.example",
    "server_port": "80", "pass_port": "80",
    "request_uri": "/p", "uri": "/p", "escaped_request_uri": "p", "args": "a", "request_method": "GET",
}
_AUTHORITY_VARIABLES = frozenset({"scheme", "pass_access_scheme", "host", "http_host", "best_http_host",
                                  "server_name", "server_port", "pass_port"})
_URL_VARIABLE = re.compile(r"\$(?:\{([a-z_]+)\}|([a-z_]+))")


def url_template(text: str) -> str:
    """``url`` that may hold URL_VARIABLES (``$host`` or ``${host}``)."""
    text = text.strip()

    def stand_in(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name not in URL_VARIABLES:
            raise Invalid(f"uses ${name[:64]}; a URL may use " + ", ".join("$" + n for n in URL_VARIABLES))
        return URL_VARIABLES[name]

    rest = _URL_VARIABLE.sub("", text)
    if "$" in rest or "{" in rest or "}" in rest:
        raise Invalid("has a '$' or brace that is not one of the variables a URL may use")
    # Where the request goes: only the scheme, host and port variables (the
    # request's own URI in the authority would let a client pick the target).
    authority = re.match(r"[^/?]*//[^/?]*", text)
    for m in _URL_VARIABLE.finditer(authority.group(0) if authority else text):
        if (m.group(1) or m.group(2)) not in _AUTHORITY_VARIABLES:
            raise Invalid("may use only $scheme, $host, $http_host, $best_http_host, $server_name and the port "
                          "variables before its path")
    url(_URL_VARIABLE.sub(stand_in, text))
    return text


def method(text: str) -> str:
    value = text.strip().upper()
    if value not in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        raise Invalid("must be GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS")
    return value


_PARAM = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def query_param(text: str) -> str:
    value = text.strip()
    if not _PARAM.fullmatch(value):
        raise Invalid("must be a query parameter name (letters, digits, '_', '.', '-')")
    return value


def header_list(text: str) -> tuple[str, ...]:
    items = tuple(part.strip() for part in text.split(",") if part.strip())
    if not items or len(items) > MAX_HEADERS:
        raise Invalid(f"must list 1-{MAX_HEADERS} header names")
    for item in items:
        v.header_name("header", item)
    return items


_VARIABLE_KEY = re.compile(r"(?:\$[a-z_][a-z0-9_]{0,63}|[A-Za-z0-9_\-.:/]{1,64}){1,16}")


# Variables a cache key may read: request data only (Lua reads them by
# name per request; none has a side effect).
_KEY_VARIABLES = re.compile(r"(http|cookie|arg)_[a-z0-9_]{1,60}|remote_user|remote_addr|host|uri|request_uri"
                            r"|args|scheme|server_name|request_method|proxy_upstream_name")


def cache_key(text: str) -> tuple[str, ...]:
    """``$remote_user$http_authorization``: nginx variables (read by Lua, by
    name) and literal text; -> parts, variables as "$name"."""
    value = text
    if len(value) > 512 or not _VARIABLE_KEY.fullmatch(value):
        raise Invalid("must be nginx variables ($name, lower case) and letters, digits, '_-.:/' only")
    parts = tuple(re.findall(r"\$[a-z_][a-z0-9_]*|[^$]+", value))
    for part in parts:
        if part.startswith("$") and not _KEY_VARIABLES.fullmatch(part[1:]):
            raise Invalid(f"reads ${part[1:65]}; a cache key may read $http_*, $cookie_*, $arg_*, $remote_user, "
                          "$remote_addr, $host, $uri, $request_uri, $args, $scheme, $server_name, $request_method")
    return parts


_DURATION = re.compile(r"([0-9]{1,6})([smhd]?)")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def cache_duration(text: str) -> tuple[tuple[int, ...], int]:
    """``200 202 401 5m`` (proxy_cache_valid's syntax) -> (codes, seconds);
    no codes means 200 301 302, as nginx's."""
    tokens = text.split()
    if not tokens or len(tokens) > 20:
        raise Invalid("must be status codes followed by a duration, e.g. \"200 202 401 5m\"")
    m = _DURATION.fullmatch(tokens[-1])
    if m is None:
        raise Invalid("must end with a duration (e.g. 5m, 30s, 1h)")
    seconds = int(m.group(1)) * _UNIT[m.group(2)]
    if not 1 <= seconds <= 7 * 86400:
        raise Invalid("duration must be 1s to 7d")
    codes = []
    for token in tokens[:-1]:
        if token == "any":
            codes.append(0)
            continue
        if not re.fullmatch(r"[1-5][0-9][0-9]", token):
            raise Invalid(f"status code {token[:8]!r} is not 100-599 or any")
        codes.append(int(token))
    return tuple(sorted(set(codes))) or (200, 301, 302), seconds


def realm(text: str) -> str:
    if len(text) > 256 or not re.fullmatch(r"[ -~]*", text):
        raise Invalid("must be printable ASCII, at most 256 characters")
    return text


_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def object_ref(text: str) -> tuple[str | None, str]:
    """``name`` or ``namespace/name`` -> (namespace or None, name)."""
    namespace, _, name = text.strip().rpartition("/")
    if (namespace and not _NAME.fullmatch(namespace)) or not _NAME.fullmatch(name) or "/" in namespace:
        raise Invalid("must be name or namespace/name of an object")
    return namespace or None, name


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "t", "1"):
        return True
    if value in ("false", "f", "0"):
        return False
    raise Invalid("must be true or false")


def _int(low: int, high: int):
    def parse(text: str) -> int:
        if not re.fullmatch(r"[0-9]{1,10}", text.strip()) or not low <= int(text) <= high:
            raise Invalid(f"must be an integer {low}-{high}")
        return int(text)
    return parse


def _choice(*allowed: str):
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in allowed:
            raise Invalid(f"must be one of {', '.join(allowed)}")
        return value
    return parse


def _request_redirect(text: str) -> str:
    """auth-request-redirect is a URL or an absolute path (ingress-nginx
    sends it as X-Auth-Request-Redirect)."""
    value = text.strip()
    if re.fullmatch(r"/[!%&'()*+,\-./0-9:=?@A-Z_a-z~]{0,2047}", value):
        return value
    return url(value)


# annotation -> parser (text -> value; Invalid = refused). Values pass
# annotations._plain first; auth-cache-key, auth-url and auth-signin may
# keep '$' (and "${}"), each variable checked against their allowlist here.
PARSERS: dict[str, Any] = {
    "auth-type": _choice("basic", "digest"),
    "auth-secret": object_ref,
    "auth-secret-type": _choice("auth-file", "auth-map"),
    "auth-realm": realm,
    "auth-url": url_template,
    "auth-method": method,
    "auth-signin": url_template,
    "auth-signin-redirect-param": query_param,
    "auth-response-headers": header_list,
    "auth-request-redirect": _request_redirect,
    "auth-proxy-set-headers": object_ref,
    "auth-cache-key": cache_key,
    "auth-cache-duration": cache_duration,
    "auth-keepalive": _int(0, 10_000),
    "auth-keepalive-requests": _int(1, 1_000_000),
    "auth-keepalive-timeout": _int(1, 86400),
    "auth-keepalive-share-vars": _bool,
    "auth-always-set-cookie": _bool,
    "enable-global-auth": _bool,
    "satisfy": _choice("any", "all"),
}


# --- the model -----------------------------------------------------------------


@dataclass(frozen=True)
class ExternalAuth:
    """auth-url and its companions (or the ConfigMap's global-auth-*)."""

    url: str
    method: str = "GET"
    signin: str = ""
    redirect_param: str = "rd"
    response_headers: tuple[str, ...] = ()
    request_redirect: str = ""
    proxy_headers: tuple[tuple[str, str], ...] = ()  # resolved from auth-proxy-set-headers
    cache_key: tuple[str, ...] = ()
    cache_codes: tuple[int, ...] = (200, 202, 401)
    cache_seconds: int = 300
    always_set_cookie: bool = False


@dataclass(frozen=True)
class LocalAuth:
    """auth-type basic/digest, before its Secret is read."""

    type: str
    secret: tuple[str | None, str]
    secret_type: str = "auth-file"
    realm: str = ""


@dataclass(frozen=True)
class AuthRequest:
    """What one Ingress's annotations ask for."""

    local: LocalAuth | None = None
    external: ExternalAuth | None = None
    proxy_headers_ref: tuple[str | None, str] | None = None  # auth-proxy-set-headers ConfigMap
    global_auth: bool = True  # enable-global-auth
    satisfy: str = "all"

    @property
    def reads_objects(self) -> bool:
        return self.local is not None or self.proxy_headers_ref is not None


@dataclass(frozen=True)
class Auth:
    """Resolved: what Lua enforces for a location. ``users``: (name, hash)
    for basic, (name, HA1) for digest. Never printed (repr hides users)."""

    type: str = ""  # "", "basic", "digest"
    realm: str = ""
    users: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    external: ExternalAuth | None = None
    satisfy: str = "all"


@dataclass(frozen=True)
class Refusal:
    annotation: str  # full key
    reason: str  # e.g. "AuthSecretNotFound"
    message: str


# Companions of auth-url: set without it, they are refused (the user meant
# an external auth that is not there).
_EXTERNAL_ONLY = ("auth-method", "auth-signin", "auth-signin-redirect-param", "auth-response-headers",
                  "auth-request-redirect", "auth-proxy-set-headers", "auth-cache-key", "auth-cache-duration",
                  "auth-keepalive", "auth-keepalive-requests", "auth-keepalive-timeout",
                  "auth-keepalive-share-vars", "auth-always-set-cookie")


def request(values: Mapping[str, object], errors: list[tuple[tuple[str, ...], str]]) -> AuthRequest | None:
    """The parsed auth annotations of one Ingress -> ``AuthRequest`` (None:
    nothing asked). Problems between annotations go to ``errors`` as
    (annotation names, reason)."""
    get = values.get
    local = external = None
    if "auth-type" in values or "auth-secret" in values:
        if "auth-type" not in values or "auth-secret" not in values:
            errors.append((("auth-type", "auth-secret"), "auth-type and auth-secret must be set together"))
            return None
        local = LocalAuth(get("auth-type"), get("auth-secret"), get("auth-secret-type", "auth-file"),
                          get("auth-realm", ""))
    elif any(n in values for n in ("auth-secret-type", "auth-realm")):
        errors.append((("auth-secret-type", "auth-realm"), "needs auth-type and auth-secret"))
        return None
    if "auth-url" in values:
        codes, seconds = get("auth-cache-duration", ((200, 202, 401), 300))
        external = ExternalAuth(
            url=get("auth-url"), method=get("auth-method", "GET"), signin=get("auth-signin", ""),
            redirect_param=get("auth-signin-redirect-param", "rd"),
            response_headers=get("auth-response-headers", ()), request_redirect=get("auth-request-redirect", ""),
            cache_key=get("auth-cache-key", ()), cache_codes=codes, cache_seconds=seconds,
            always_set_cookie=get("auth-always-set-cookie", False))
    else:
        orphans = [n for n in _EXTERNAL_ONLY if n in values]
        if orphans:
            errors.append((tuple(orphans), "needs auth-url"))
            return None
    satisfy = get("satisfy", "all")
    global_on = get("enable-global-auth", True)
    if local is None and external is None and satisfy == "all" and global_on:
        return None
    ref = get("auth-proxy-set-headers") if external is not None else None
    return AuthRequest(local, external, ref, global_on, satisfy)


# --- the ConfigMap ------------------------------------------------------------

_GLOBAL_KEYS = {
    "global-auth-url": "auth-url", "global-auth-method": "auth-method", "global-auth-signin": "auth-signin",
    "global-auth-signin-redirect-param": "auth-signin-redirect-param",
    "global-auth-response-headers": "auth-response-headers",
    "global-auth-request-redirect": "auth-request-redirect", "global-auth-cache-key": "auth-cache-key",
    "global-auth-cache-duration": "auth-cache-duration", "global-auth-always-set-cookie": "auth-always-set-cookie",
}
GLOBAL_KEYS = frozenset(_GLOBAL_KEYS) | {"global-auth-snippet"}
_WITH_VARIABLES = ("auth-cache-key", "auth-url", "auth-signin")  # their parsers check each '$'

_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f\"'`\\;{}]")


@dataclass(frozen=True)
class GlobalAuth:
    """The ConfigMap's external auth: ``auth`` None when unset; ``error``
    set when a key is bad (then every Ingress it would cover is refused)."""

    auth: ExternalAuth | None = None
    error: str = ""


def global_auth(data: Mapping[str, str]) -> GlobalAuth:
    values: dict[str, object] = {}
    for key, name in _GLOBAL_KEYS.items():
        if key not in data:
            continue
        text = data[key]
        try:
            if not isinstance(text, str) or _FORBIDDEN.search(text.replace("${", "$").replace("}", "")) or (
                    "$" in text and name not in _WITH_VARIABLES):
                raise Invalid("contains a forbidden character")
            values[name] = PARSERS[name](text)
        except (Invalid, v.ValidationError) as exc:
            return GlobalAuth(error=f"ConfigMap key {key} {getattr(exc, 'reason', str(exc))}")
    if "global-auth-snippet" in data:
        return GlobalAuth(error="ConfigMap key global-auth-snippet is a snippet; not supported")
    if "auth-url" not in values:
        if values:
            return GlobalAuth(error="ConfigMap global-auth-* keys need global-auth-url")
        return GlobalAuth()
    errors: list = []
    req = request(values, errors)
    return GlobalAuth(auth=req.external if req else None)


# --- resolving Secrets --------------------------------------------------------

# Hash formats lua/auth_basic.lua verifies (nginx's auth_basic reads these).
_HASH = re.compile(
    r"\$2[aby]\$[0-9]{2}\$[./A-Za-z0-9]{53}"  # bcrypt
    r"|\$apr1\$[./A-Za-z0-9]{1,8}\$[./A-Za-z0-9]{22}"  # Apache MD5
    r"|\$1\$[./A-Za-z0-9]{1,8}\$[./A-Za-z0-9]{22}"  # md5crypt
    r"|\$[56]\$(rounds=[0-9]{1,9}\$)?[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{43,86}"  # sha256/512-crypt
    r"|\{SHA\}[A-Za-z0-9+/]{27}="  # base64 SHA-1
    r"|\{PLAIN\}[ -~]{0,256}"
)
_USER = re.compile(r"[^:\x00-\x1f\x7f]{1,255}")
_HA1 = re.compile(r"[0-9a-f]{32}")


def _decode(secret: dict, key: str) -> str | None:
    raw = ((secret.get("data") or {}).get(key))
    if raw is None:
        string_data = (secret.get("stringData") or {}).get(key)
        return string_data if isinstance(string_data, str) else None
    try:
        return base64.b64decode(raw, validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


def _entries(local: LocalAuth, secret: dict) -> tuple[list[tuple[str, str]], str] | str:
    """((user, credential) pairs, realm), or why not (never quoting the
    content). Digest files hold a realm per line: the annotation's realm
    picks its lines; without one, the first line's realm is the realm."""
    chosen = local.realm
    if local.secret_type == "auth-map":
        data = secret.get("data") or {}
        pairs = []
        for user in sorted(data):
            value = _decode(secret, user)
            if value is None:
                return f"key {user[:64]!r} is not valid base64 UTF-8"
            pairs.append((user, value.strip()))
        return pairs, chosen
    text = _decode(secret, "auth")
    if text is None:
        return "has no key 'auth' (base64 UTF-8 htpasswd content)"
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, rest = line.partition(":")
        if not sep:
            return f"line {number} is not user:credential"
        if local.type == "digest":
            line_realm, sep, rest = rest.partition(":")
            if not sep:
                return f"line {number} is not user:realm:HA1 (htdigest)"
            chosen = chosen or line_realm
            if line_realm != chosen:
                continue  # another realm's entry, as htdigest files hold several
        pairs.append((user, rest))
    return pairs, chosen


def _check(local: LocalAuth, pairs: list[tuple[str, str]]) -> tuple[tuple[str, str], ...] | str:
    if not pairs:
        return "has no users"
    if len(pairs) > MAX_USERS:
        return f"has {len(pairs)} users (at most {MAX_USERS})"
    users: dict[str, str] = {}
    for number, (user, credential) in enumerate(pairs, 1):
        if not _USER.fullmatch(user):
            return f"entry {number}: the user name must be 1-255 characters without ':' or control characters"
        if local.type == "digest":
            ok = _HA1.fullmatch(credential.lower()) is not None
            credential = credential.lower()
        else:
            ok = _HASH.fullmatch(credential) is not None
        if not ok:
            kinds = ("an MD5 HA1 (32 hex digits)" if local.type == "digest"
                     else "bcrypt ($2y$/$2b$/$2a$), $apr1$, $1$, $5$, $6$, {SHA} or {PLAIN}")
            return f"entry {number} (user {user[:64]!r}): the credential is not {kinds}"
        users.setdefault(user, credential)  # the first wins, as nginx reads the file
    return tuple(sorted(users.items()))


def secret_key(ref: tuple[str | None, str], namespace: str) -> str:
    return f"{ref[0] or namespace}/{ref[1]}"


def resolve(req: AuthRequest, namespace: str, secrets: Mapping[str, dict], configmaps: Mapping[str, dict],
            glob: GlobalAuth) -> Auth | Refusal | None:
    """The auth a location of an Ingress in ``namespace`` enforces (None: none)."""
    local_type = realm_text = ""
    users: tuple = ()
    if req.local is not None:
        key = secret_key(req.local.secret, namespace)
        annotation = PREFIX + "auth-secret"
        secret = secrets.get(key)
        if secret is None:
            return Refusal(annotation, "AuthSecretNotFound",
                           f"annotation {annotation}: Secret {key!r} not found (an Opaque Secret); the Ingress is not served")
        checked = _entries(req.local, secret)
        if not isinstance(checked, str):
            pairs, realm_text = checked
            checked = _check(req.local, pairs)
        if isinstance(checked, str):
            return Refusal(annotation, "AuthSecretInvalid",
                           f"annotation {annotation}: Secret {key!r} ({req.local.secret_type}) {checked}; "
                           "the Ingress is not served")
        if len(realm_text) > 256 or not re.fullmatch(r"[ !#-\[\]-~]*", realm_text):
            return Refusal(annotation, "AuthSecretInvalid",
                           f"annotation {annotation}: Secret {key!r}: the realm of its entries must be printable "
                           "ASCII without quotes or backslashes; the Ingress is not served")
        local_type, users = req.local.type, checked
    external = req.external
    if external is None and req.global_auth:
        if glob.error:
            annotation = PREFIX + "enable-global-auth"
            return Refusal(annotation, "GlobalAuthInvalid",
                           f"{glob.error}; the Ingress is not served (set {annotation}: \"false\" to opt out)")
        external = glob.auth
    if external is not None and req.proxy_headers_ref is not None:
        key = secret_key(req.proxy_headers_ref, namespace)
        annotation = PREFIX + "auth-proxy-set-headers"
        cm = configmaps.get(key)
        if cm is None:
            return Refusal(annotation, "AuthProxyHeadersNotFound",
                           f"annotation {annotation}: ConfigMap {key!r} not found; the Ingress is not served")
        headers = []
        for name, value in sorted((cm.get("data") or {}).items()):
            try:
                v.header_name("header", name)
                if not isinstance(value, str) or _FORBIDDEN.search(value) or "$" in value or len(value) > 4096:
                    raise Invalid("bad value")
            except (Invalid, v.ValidationError):
                return Refusal(annotation, "AuthProxyHeadersInvalid",
                               f"annotation {annotation}: ConfigMap {key!r} entry {name[:64]!r} is not a header "
                               "name with a plain value (no quotes, ';', braces, '$' or control characters); "
                               "the Ingress is not served")
            headers.append((name, value))
        external = replace(external, proxy_headers=tuple(headers[:MAX_HEADERS]))
    if not local_type and external is None:
        return None  # satisfy alone, without auth: the allow list decides
    return Auth(local_type, realm_text, users, external, req.satisfy)


def payload(auth: Auth) -> dict[str, Any]:
    """The policy's "auth" entry for lua/auth.lua. Contains credentials: it
    goes into the routes sections only (never a log line or /status)."""
    out: dict[str, Any] = {"satisfy": auth.satisfy, "type": auth.type or None, "realm": auth.realm,
                           "users": dict(auth.users) if auth.users else None, "external": None}
    ext = auth.external
    if ext is not None:
        out["external"] = {
            "url": ext.url, "method": ext.method, "signin": ext.signin or None,
            "redirect_param": ext.redirect_param, "response_headers": list(ext.response_headers),
            "request_redirect": ext.request_redirect or None,
            "proxy_headers": [[n, val] for n, val in ext.proxy_headers],
            "cache_key": list(ext.cache_key), "cache_codes": list(ext.cache_codes),
            "cache_seconds": ext.cache_seconds, "always_set_cookie": ext.always_set_cookie,
        }
    return out


def resolvers(path: str = "/etc/resolv.conf") -> str:
    """The nameservers of ``path`` for nginx's ``resolver`` (auth-url hosts
    are names like oauth2-proxy.auth.svc.cluster.local, resolved per
    request by nginx): validated addresses, IPv6 bracketed; "" if none."""
    found = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read(65536).splitlines()
    except OSError:
        return ""
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            address = parts[1].split("%")[0]
            try:
                address = v.ip_address("nameserver", address)
            except v.ValidationError:
                continue
            found.append(f"[{address}]" if ":" in address else address)
    return " ".join(found[:3])


# --- informer indexes (controller.py): which Ingresses a Secret or ConfigMap change concerns ---


def _referenced(obj: Mapping, annotation: str) -> list[str]:
    meta = obj.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(PREFIX + annotation)
    if not isinstance(text, str):
        return []
    try:
        return [secret_key(object_ref(text), meta.get("namespace", ""))]
    except Invalid:
        return []


def index_ingress_by_auth_secret(obj: Mapping) -> list[str]:
    """``ns/name`` of the Secret an Ingress's auth-secret names."""
    return _referenced(obj, "auth-secret")


def index_ingress_by_auth_configmap(obj: Mapping) -> list[str]:
    """``ns/name`` of the ConfigMap an Ingress's auth-proxy-set-headers names."""
    return _referenced(obj, "auth-proxy-set-headers")
