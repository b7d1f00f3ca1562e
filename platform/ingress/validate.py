"""Validators and escapers for every value that reaches nginx.conf or Lua.

Contract: each validator takes ``(field, value)``, returns the value in its
normal form, or raises ``ValidationError`` naming the field. Nothing here
guesses or silently defaults: a value is either known-safe or rejected.

The rules are deliberately narrower than what nginx would accept. A user value
ends up inside a double-quoted nginx token (see ``quote``); the validators make
sure it cannot close that token (quotes, backslashes, control characters),
start a new directive (``;``, ``{``, ``}``), or expand an nginx variable
(``$name``), which is how Lua or other directives were smuggled into
ingress-nginx configurations (CVE-2025-1974 and friends). Regexes keep ``$`` as
an end anchor and ``{m,n}`` as a quantifier, since those are literal inside a
quoted regex token and never interpolated.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable

from platformd import paths as share_paths
from platformd.ingress import pcre

__all__ = [
    "ValidationError",
    "backend_name",
    "certificate_id",
    "cidr",
    "cookie_name",
    "cookie_path",
    "cors_origin",
    "header_name",
    "header_pattern",
    "header_value",
    "hostname",
    "http_method",
    "ip_address",
    "log_format",
    "path",
    "pem_bundle",
    "port",
    "positive_int",
    "quote",
    "redirect_target",
    "regex",
    "rewrite_target",
    "samesite",
    "size",
    "ssl_ciphers",
    "ssl_protocol",
    "upstream_hash_by",
    "upstream_vhost",
    "user_name",
]


class ValidationError(ValueError):
    """A user-derived value that may not be rendered.

    ``field`` names where it came from (as precise as the caller knows, e.g.
    ``server[example.com].location[/api].rewrite_target``), ``value`` is the
    offending value and ``reason`` says what rule it broke.
    """

    def __init__(self, field: str, value: object, reason: str) -> None:
        super().__init__(f"{field}: {reason} (got {value!r})")
        self.field = field
        self.value = value
        self.reason = reason

    def within(self, prefix: str) -> "ValidationError":
        """The same error with its field qualified by an outer field name."""
        return ValidationError(f"{prefix}.{self.field}", self.value, self.reason)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOSTNAME = re.compile(rf"^(?:\*\.)?{_LABEL}(?:\.{_LABEL})*$")
_EXACT_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
_BACKEND = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_CERT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,252}$")
# RFC 3986 path characters, minus ';' (directive separator), quotes and '$'.
_PATH = re.compile(r"^/[A-Za-z0-9._~!&()*+,=:@%/-]*$")
_URL_TAIL = r"[A-Za-z0-9._~!&()*+,=:@%/?#-]*"
_REDIRECT = re.compile(
    rf"^(?:https?://{_LABEL}(?:\.{_LABEL})*(?::[0-9]{{1,5}})?(?:/{_URL_TAIL})?|/{_URL_TAIL})$"
)
# Rewrite targets may reference capture groups ($1..$9) and nothing else.
_REWRITE = re.compile(
    rf"^(?:https?://{_LABEL}(?:\.{_LABEL})*(?::[0-9]{{1,5}})?)?/(?:[A-Za-z0-9._~!&()*+,=:@%/?#-]|\$[0-9])*$"
)
_HEADER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
_COOKIE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
# A cookie's path travels in every Set-Cookie; browsers keep cookies of about
# 4 KB in all, so a longer path is a mistake (or an attempt to bloat replies).
_COOKIE_PATH = re.compile(r"^/[A-Za-z0-9._~/-]{0,511}$")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
_HEADER_VALUE = re.compile(r"^[\x20-\x7e]{0,256}$")
_SIZE = re.compile(r"^[0-9]{1,12}[kKmMgG]?$")
_CIPHERS = re.compile(r"^[A-Za-z0-9:+!@._-]{1,2048}$")
_SSL_PROTOCOLS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
_METHOD = re.compile(r"^[A-Z]{1,20}$")
_NGINX_VAR = re.compile(r"^(?:\$[a-z_][a-z0-9_]{0,63}){1,8}$")
_LOG_VAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?")
_ORIGIN = re.compile(rf"^https?://(?:\*\.)?{_LABEL}(?:\.{_LABEL})*(?::[0-9]{{1,5}})?$")
# Inside a regex, '$' is an anchor; reject it only where nginx could read it
# as a variable in other contexts ($name, ${name}), to stay on the safe side.
_REGEX_VAR = re.compile(r"\$[A-Za-z_{]")
_QUANTIFIER = re.compile(r"\{[0-9]+(?:,[0-9]*)?\}")


def _memo_strings(fn):
    """Cache a validator's answers for string values.

    A translation checks each hostname, backend name and path several times
    (rule, server, location, view); the validators are pure, so a string
    checked once needs no regex again. The answer does not depend on the
    field name (which only names the culprit in an error), so it is cached
    per value: each hostname once, not once per place that checks it (the
    view checks each server's names under a field of its own, which filled
    the cache with 10,000 entries nobody asked for again). Errors are not
    cached: a bad value is checked again, naming its field. Other types go
    straight to ``fn`` (which rejects them). Bounded: a bigger cluster only
    misses more.
    """

    # Room for the names of 20,000 Ingresses (a host and two backends
    # each): a cache that is too small misses on every lookup of a sync.
    @functools.lru_cache(maxsize=1 << 17)
    def cached(value: str, options: tuple) -> object:
        return fn("", value, **dict(options))

    @functools.wraps(fn)
    def validator(field: str, value: object, **options: object):
        if value.__class__ is str:
            try:
                return cached(value, tuple(options.items()) if options else ())
            except ValidationError:
                pass  # raised again below, naming the field
        return fn(field, value, **options)

    return validator


def _require_str(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, value, "must be a string")
    return value


def _no_control(field: str, value: str) -> None:
    if _CONTROL.search(value):
        raise ValidationError(field, value, "contains control characters (newline, tab, NUL...)")


def _matching(name: str, pattern: re.Pattern[str], problem: str, *, max_len: int | None = None,
              no_control: bool = False, doc: str | None = None) -> Callable[[str, object], str]:
    """A validator named ``name``: a string that ``pattern`` matches in full
    (and, with ``max_len``, of at most that length), returned as is.

    ``problem`` is the error's reason. ``no_control`` first refuses control
    characters with their own message (for values whose pattern would
    otherwise give a misleading one).
    """

    def check(field: str, value: object) -> str:
        text = _require_str(field, value)
        if no_control:
            _no_control(field, text)
        if (max_len is not None and len(text) > max_len) or not pattern.fullmatch(text):
            raise ValidationError(field, value, problem)
        return text

    check.__name__ = check.__qualname__ = name
    check.__doc__ = doc
    return check


@_memo_strings
def hostname(field: str, value: object, *, wildcard: bool = True) -> str:
    """A DNS name, lower-cased; ``*.example.com`` when ``wildcard``."""
    text = _require_str(field, value)
    _no_control(field, text)
    text = text.lower()
    pattern = _HOSTNAME if wildcard else _EXACT_HOSTNAME
    if len(text) > 253 or not pattern.fullmatch(text):
        kind = "a DNS name (optionally *.suffix)" if wildcard else "a DNS name"
        raise ValidationError(field, value, f"must be {kind}")
    return text


def upstream_vhost(field: str, value: object) -> str:
    """A Host header value for the upstream: DNS name with optional port."""
    text = _require_str(field, value)
    name, sep, port_text = text.partition(":")
    hostname(field, name, wildcard=False)
    if sep:
        if not port_text.isdigit():
            raise ValidationError(field, value, "port must be numeric")
        port(field, int(port_text))
    return text.lower()


backend_name = _memo_strings(_matching(
    "backend_name", _BACKEND, "must be letters, digits, '.', '_' or '-' (max 253)"))
certificate_id = _memo_strings(_matching(
    "certificate_id", _CERT_ID, "must be letters, digits, '.', '_', '/' or '-'"))
path = _memo_strings(_matching(
    "path", _PATH, "must start with '/' and use only URL path characters (no ; $ { } quotes or spaces)",
    max_len=1024, no_control=True, doc="A literal URL path (Exact and Prefix matches, app-root)."))


def regex(field: str, value: object) -> str:
    """A PCRE pattern for a location, rewrite or ``if`` match.

    Accepts what ingress-nginx users write (``/foo(/|$)(.*)``); rejects
    anything that could leave the quoted token or name a variable, and
    anything the data plane's engines refuse: nginx (PCRE2) compiles it as a
    location and Lua (PCRE 8, ``ngx.re``) may match it, so both must accept
    it (see ``pcre``). A named group becomes an nginx variable for the whole
    configuration: a name nginx or our template already uses fails
    ``nginx -t`` (``duplicate "host" variable``) or, for a prefix variable
    (``$http_x``), would shadow it in every other tenant's locations.
    """
    text = _regex_token(field, value, 1024)
    _compiles(field, value, text, pcre.NGINX)
    _compiles(field, value, text, pcre.LUA)
    for name in pcre.group_names(pcre.NGINX, text):
        if is_nginx_variable(name):
            raise ValidationError(
                field, value, f"names a group {name!r}, which is an nginx variable; use another name or (?:...)")
    return text


def header_pattern(field: str, value: object) -> str:
    """A regex evaluated by Lua only (canary header pattern): Lua's engine decides."""
    text = _regex_token(field, value, 512)
    _compiles(field, value, text, pcre.LUA)
    return text


def _regex_token(field: str, value: object, limit: int) -> str:
    """A regex that cannot leave its quoted token or name a variable."""
    text = _require_str(field, value)
    _no_control(field, text)
    if not text or len(text) > limit:
        raise ValidationError(field, value, f"must be 1-{limit} characters")
    for bad in ('"', "'", ";", "`", " "):
        if bad in text:
            raise ValidationError(field, value, f"may not contain {bad!r}")
    if _REGEX_VAR.search(text):
        raise ValidationError(field, value, "'$' may only be an end anchor, not a variable")
    if "{" in text or "}" in text:
        if "{" in _QUANTIFIER.sub("", text) or "}" in _QUANTIFIER.sub("", text):
            raise ValidationError(field, value, "braces are only allowed as {m,n} quantifiers")
    if text.endswith("\\") and not text.endswith("\\\\"):
        raise ValidationError(field, value, "may not end with a lone backslash")
    return text


def _compiles(field: str, value: object, text: str, engine: str) -> None:
    try:
        error = pcre.compile_error(engine, text)
    except pcre.EngineMissing as exc:
        raise ValidationError(field, value, f"cannot be checked: {exc}") from None
    if error is not None:
        where = "nginx (PCRE2)" if engine == pcre.NGINX else "Lua's ngx.re (PCRE)"
        raise ValidationError(field, value, f"is not a valid regular expression for {where}: {error}")


redirect_target = _matching(
    "redirect_target", _REDIRECT, "must be an http(s) URL or a path starting with '/' (no spaces, quotes, ; $ { })",
    max_len=2048, no_control=True, doc="An absolute http(s) URL or an absolute path; no variables.")
rewrite_target = _matching(
    "rewrite_target", _REWRITE, "must be a path or http(s) URL; '$' only as a capture group $0-$9",
    max_len=2048, no_control=True, doc="Like a redirect target, but may use capture groups ``$1``..``$9``.")


def cidr(field: str, value: object) -> str:
    """An IPv4/IPv6 address or network, returned in canonical form."""
    text = _require_str(field, value).strip()
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError:
        raise ValidationError(field, value, "must be an IP address or CIDR") from None


def ip_address(field: str, value: object) -> str:
    canonical = canonical_ip(_require_str(field, value))
    if canonical is None:
        raise ValidationError(field, value, "must be an IP address")
    return canonical


@functools.lru_cache(maxsize=1 << 16)
def canonical_ip(text: str) -> str | None:
    """``text`` as a canonical IP address, or None if it is not one.

    Cached: every sync re-validates every endpoint address, and parsing them
    was a fifth of a translation at 5,000 Ingresses; the set of addresses in a
    cluster is bounded, so the cache keeps them all.
    """
    if _IPV4.fullmatch(text):
        return text  # dotted quad without leading zeros: already canonical (and cheap)
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def port(field: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        raise ValidationError(field, value, "must be a port number 1-65535")
    return value


def positive_int(field: str, value: object, *, maximum: int = 2**31 - 1, allow_zero: bool = False) -> int:
    low = 0 if allow_zero else 1
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= maximum:
        raise ValidationError(field, value, f"must be an integer {low}-{maximum}")
    return value


def size(field: str, value: object) -> str:
    """An nginx size: digits with an optional k/m/g suffix (``0`` = unlimited)."""
    text = _require_str(field, value)
    if not _SIZE.fullmatch(text):
        raise ValidationError(field, value, "must be a size like 1m, 512k or 1048576")
    return text.lower()


header_name = _matching("header_name", _HEADER, "must be a header name (letters, digits, '-', '_')")
header_value = _matching("header_value", _HEADER_VALUE, "must be printable ASCII, at most 256 characters",
                         doc="A header value compared by Lua; printable ASCII only.")
cookie_name = _matching("cookie_name", _COOKIE, "must be a cookie name (letters, digits, '.', '_', '-')")
cookie_path = _matching("cookie_path", _COOKIE_PATH, "must be a path of letters, digits and . _ ~ / -")
user_name = _matching("user_name", _USER, "must be a user name (lower-case letters, digits, '_', '-')",
                      doc="A POSIX user name (the nginx ``user`` directive).")


def samesite(field: str, value: object) -> str:
    if value not in ("", "None", "Lax", "Strict"):
        raise ValidationError(field, value, "must be one of None, Lax, Strict or empty")
    return str(value)


def upstream_hash_by(field: str, value: object) -> str:
    """nginx variables only (``$request_uri``, ``$host$request_uri``), read by Lua."""
    text = _require_str(field, value)
    if text and not _NGINX_VAR.fullmatch(text):
        raise ValidationError(field, value, "must be one or more nginx variables like $request_uri")
    return text


def cors_origin(field: str, value: object) -> str:
    text = _require_str(field, value)
    if text != "*" and not _ORIGIN.fullmatch(text.lower()):
        raise ValidationError(field, value, "must be '*' or an origin like https://example.com[:port]")
    return text if text == "*" else text.lower()


def http_method(field: str, value: object) -> str:
    text = _require_str(field, value).upper()
    if not _METHOD.fullmatch(text):
        raise ValidationError(field, value, "must be an HTTP method name")
    return text


def ssl_protocol(field: str, value: object) -> str:
    if value not in _SSL_PROTOCOLS:
        raise ValidationError(field, value, f"must be one of {', '.join(_SSL_PROTOCOLS)}")
    return str(value)


ssl_ciphers = _matching("ssl_ciphers", _CIPHERS, "must be an OpenSSL cipher list (letters, digits, : + ! @ . _ -)")


def log_format(field: str, value: object) -> str:
    """An access log format: text plus ``$variable`` references.

    Quotes are allowed (they are escaped by ``quote``); ``${...}``, bare
    ``$``, backslashes and control characters are not, and every variable
    must be one nginx knows (``$hostX`` would fail ``nginx -t`` and stop
    every later reload, for every tenant).
    """
    text = _require_str(field, value)
    _no_control(field, text)
    if not text or len(text) > 4096:
        raise ValidationError(field, value, "must be 1-4096 characters")
    if "\\" in text or "{" in text or "}" in text:
        raise ValidationError(field, value, "may not contain backslashes or braces")
    for match in _LOG_VAR.finditer(text):
        if match.group(1) is None:
            raise ValidationError(field, value, "'$' must start a variable name")
        if not is_nginx_variable(match.group(1)):
            raise ValidationError(field, value, f"uses ${match.group(1)}, which is not an nginx variable")
    return text


def pem_bundle(field: str, cert_pem: object, key_pem: object) -> tuple[str, str]:
    """A PEM certificate chain and its private key (content checked by Lua/OpenSSL)."""
    cert = _require_str(f"{field}.cert_pem", cert_pem)
    key = _require_str(f"{field}.key_pem", key_pem)
    if "-----BEGIN CERTIFICATE-----" not in cert or "-----END CERTIFICATE-----" not in cert:
        raise ValidationError(f"{field}.cert_pem", "<pem>", "must contain a PEM CERTIFICATE block")
    if not re.search(r"-----BEGIN [A-Z ]*PRIVATE KEY-----", key):
        raise ValidationError(f"{field}.key_pem", "<redacted>", "must contain a PEM PRIVATE KEY block")
    return cert, key


# --- nginx's variable names ----------------------------------------------------

# Built-in variables of the nginx we ship (Debian's 1.22 with its modules and
# the Lua module): named captures may not take these names, log formats may
# only use these, the prefixed ones below and those our template defines.
NGINX_VARIABLES = frozenset("""
    ancient_browser args binary_remote_addr body_bytes_sent bytes_received bytes_sent connection
    connection_requests connection_time connections_active connections_reading connections_waiting
    connections_writing content_length content_type date_gmt date_local document_root document_uri
    fastcgi_path_info fastcgi_script_name gzip_ratio host hostname http2 https invalid_referer is_args
    limit_conn_status limit_rate limit_req_status memcached_key modern_browser msec msie nginx_version
    pid pipe proxy_add_x_forwarded_for proxy_host proxy_port proxy_protocol_addr proxy_protocol_port
    proxy_protocol_server_addr proxy_protocol_server_port query_string realip_remote_addr
    realip_remote_port realpath_root remote_addr remote_port remote_user request request_body
    request_body_file request_completion request_filename request_id request_length request_method
    request_time request_uri scheme secure_link secure_link_expires server_addr server_name server_port
    server_protocol session_time slice_range ssl_alpn_protocol ssl_cipher ssl_ciphers ssl_client_cert
    ssl_client_escaped_cert ssl_client_fingerprint ssl_client_i_dn ssl_client_i_dn_legacy
    ssl_client_raw_cert ssl_client_s_dn ssl_client_s_dn_legacy ssl_client_serial ssl_client_v_end
    ssl_client_v_remain ssl_client_v_start ssl_client_verify ssl_curves ssl_early_data ssl_preread_alpn_protocols
    ssl_preread_protocol ssl_preread_server_name ssl_protocol ssl_server_name ssl_session_id
    ssl_session_reused status tcpinfo_rcv_space tcpinfo_rtt tcpinfo_rttvar tcpinfo_snd_cwnd
    time_iso8601 time_local uid_got uid_reset uid_set upstream_addr upstream_bytes_received
    upstream_bytes_sent upstream_cache_status upstream_connect_time upstream_first_byte_time
    upstream_header_time upstream_queue_time upstream_response_length upstream_response_time
    upstream_session_time upstream_status uri
""".split())
# Families nginx resolves by prefix ($http_<header>, $arg_<name>...).
NGINX_VARIABLE_PREFIXES = ("arg_", "cookie_", "http_", "sent_http_", "sent_trailer_", "upstream_cookie_",
                           "upstream_http_", "upstream_trailer_")
_TEMPLATE_VARIABLE = re.compile(r"^\s*(?:map\s+\S+|set)\s+\$([A-Za-z_][A-Za-z0-9_]*)", re.M)


@functools.lru_cache(maxsize=1)
def template_variables() -> frozenset[str]:
    """Variables our nginx.conf template defines (``map``/``set``), read from
    the template itself so the list cannot drift from it."""
    text = (share_paths.templates_dir() / "nginx.conf.j2").read_text()
    return frozenset(_TEMPLATE_VARIABLE.findall(text))


def is_nginx_variable(name: str) -> bool:
    """Whether ``$name`` means something to our nginx (built in, prefixed or ours)."""
    return (name in NGINX_VARIABLES or name.startswith(NGINX_VARIABLE_PREFIXES)
            or name in template_variables())


# Characters that must never appear in a quoted token, whatever its validator
# allowed: they would end the token or the directive.
_NEVER_IN_TOKEN = re.compile(r"[\x00-\x1f\x7f]")


def quote(value: str, *, allow_variables: bool = False) -> str:
    """Render an already-validated value as one double-quoted nginx token.

    Backslashes and double quotes are escaped so the token round-trips through
    nginx's parser exactly. ``allow_variables`` is only for values built by us
    from nginx variables or validated regexes; for anything else a ``$``
    followed by a name is refused here as a second line of defence.
    """
    if _NEVER_IN_TOKEN.search(value):
        raise ValidationError("quote", value, "control characters may not be rendered")
    if not allow_variables and _REGEX_VAR.search(value):
        raise ValidationError("quote", value, "nginx variables may not be rendered from user values")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
