"""Per-route traffic settings of ingress-nginx annotations: retries,
response rewriting, bandwidth limits, logs and the X-Forwarded-Prefix /
Connection request headers.

Two kinds, by what nginx can do per request:

* ``Traffic`` (one per ``Location``, the default for most): applied per
  request by lua/traffic.lua from the policy's ``traffic`` object
  (``policy(traffic)``; null when every setting is the default, so such
  routes keep the fast path): X-Forwarded-Prefix (a request header set from
  Lua), the Connection header (``$platform_connection``), the number of
  tries (the balancer), ``$limit_rate``, the rewrite log and the custom
  error backend (``custom_errors``).
* ``ProxyDirectives``: nginx directives, as ``Location.lane_directives``
  (``lanes.py``: a generated lane per distinct set in use; a reload only when
  a set first appears). Besides the directives that take no variables
  (proxy_http_version, proxy_request_buffering, client_body_buffer_size,
  proxy_buffer_size/proxy_buffers, proxy_max_temp_file_size,
  proxy_next_upstream, proxy_next_upstream_timeout, limit_rate_after), the
  response rewrites (proxy_redirect, proxy_cookie_domain, proxy_cookie_path)
  and ``access_log off`` travel this way too although nginx would take
  variables there: every variable the configuration names costs every
  request of every route (nginx allocates and clears each request's
  variable slots) ~20 instructions (bench_dataplane: 18 more variables took
  the plain request from 49,796 to 50,159 instructions, over the 50,000
  target), while these settings are rare and their values few.

Annotation semantics follow ingress-nginx's documentation:

* ``x-forwarded-prefix``: the value of an ``X-Forwarded-Prefix`` request header.
* ``proxy-redirect-from`` / ``-to``: ``proxy_redirect <from> <to>`` (prefix
  replacement in ``Location`` and ``Refresh``); ``off`` (the default) and
  ``default`` rewrite nothing.
* ``proxy-cookie-domain`` / ``proxy-cookie-path``: ``"<from> <to>"``, as
  ``proxy_cookie_domain`` / ``proxy_cookie_path``; ``off`` is the default.
* ``connection-proxy-header``: the ``Connection`` header sent upstream
  (default: ``upgrade`` for websocket upgrades, else keep-alive).
* ``proxy-next-upstream``: nginx's conditions (default ``error timeout``);
  ``-tries``: attempts in all, default 3 (bounded by the backend's
  endpoints); ``-timeout``: seconds, 0 for none. ``off`` makes one attempt.
* ``limit-rate`` / ``limit-rate-after``: kilobytes per second of the response
  and kilobytes sent before the limit starts (0: no limit). nginx throttles
  only what it buffers, so limit-rate turns proxy buffering on.
* ``enable-access-log: "false"`` drops the route's access log lines;
  ``enable-rewrite-log: "true"`` logs each rewrite at notice level.
* ``preserve-trailing-slash``: an HTTPS redirect keeps a trailing ``/``
  (by default one is dropped, as ingress-nginx does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from platformd.ingress import custom_errors
from platformd.ingress import validate as v
from platformd.ingress.custom_errors import CustomErrors

__all__ = ["DEFAULT", "ProxyDirectives", "Traffic", "cookie_domain", "cookie_rewrite", "header_text", "policy",
           "redirect_prefix"]

# A URL or path prefix as proxy_redirect compares it, written into nginx.conf
# as one token: an http(s) origin and/or a path, no spaces, quotes, ';', '#',
# '$', braces or backslashes.
_PATH_CHARS = r"A-Za-z0-9._~/%:@!&()*+,=-"
_REDIRECT_PREFIX = re.compile(rf"(https?://[A-Za-z0-9.-]+(:[0-9]{{1,5}})?)?(/[{_PATH_CHARS}]{{0,1023}})?")
_COOKIE_PATH = re.compile(rf"/[{_PATH_CHARS}]{{0,1023}}")
_DOMAIN = re.compile(r"\.?[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
# lua/traffic.lua's SAFE: the same characters, checked again there.
_TEXT = r"A-Za-z0-9._~:/?#\[\]@!&()*+,=%\-"
_HEADER_TEXT = re.compile(f"[{_TEXT}]([{_TEXT} ]{{0,1022}}[{_TEXT}])?")


def redirect_prefix(field: str, text: str) -> str:
    """One side of ``proxy_redirect``: an http(s) origin, a path, or both."""
    text = text.strip()
    if not text or not _REDIRECT_PREFIX.fullmatch(text):
        raise v.ValidationError(field, text, "must be an http(s) URL or a path (no spaces, quotes, ';', '#' or '$')")
    return text


def header_text(field: str, text: str) -> str:
    """A request header value we send: letters, digits, URL punctuation and
    inner spaces, at most 1024 characters."""
    if not _HEADER_TEXT.fullmatch(text):
        raise v.ValidationError(field, text, "must be at most 1024 letters, digits, spaces or URL punctuation")
    return text


def _cookie_part(kind: str, field: str, text: str) -> str:
    if kind == "domain" and _DOMAIN.fullmatch(text):
        return text
    if kind == "path" and _COOKIE_PATH.fullmatch(text):
        return text
    raise v.ValidationError(field, text, f"must be '<from> <to>' cookie {kind}s, or off")


def cookie_domain(field: str, text: str) -> str:
    """A cookie Domain attribute (session-cookie-domain)."""
    return _cookie_part("domain", field, text.strip())


def cookie_rewrite(kind: str):
    """Parser of ``proxy-cookie-<kind>``: ``"<from> <to>"`` or ``off`` (None)."""

    def parse(field: str, text: str) -> tuple[str, str] | None:
        parts = text.split()
        if parts == ["off"]:
            return None
        if len(parts) != 2:
            raise v.ValidationError(field, text, f"must be '<from> <to>' cookie {kind}s, or off")
        return (_cookie_part(kind, field, parts[0]), _cookie_part(kind, field, parts[1]))

    return parse


_CONDITIONS = ("error", "timeout", "invalid_header", "http_500", "http_502", "http_503", "http_504",
               "http_403", "http_404", "http_429", "non_idempotent", "off")


def next_upstream(field: str, text: str) -> tuple[str, ...]:
    """``proxy-next-upstream``: nginx's conditions, space separated."""
    words = tuple(text.split())
    if not words or len(words) > len(_CONDITIONS) or any(w not in _CONDITIONS for w in words):
        raise v.ValidationError(field, text, "must list " + ", ".join(_CONDITIONS))
    if "off" in words and len(words) > 1:
        raise v.ValidationError(field, text, "off cannot be combined with other conditions")
    return tuple(sorted(set(words)))


DEFAULT_NEXT_UPSTREAM = ("error", "timeout")
DEFAULT_TRIES = 3


@dataclass(frozen=True, slots=True)
class Traffic:
    """Per-request traffic settings of one location; the defaults ask for nothing."""

    forwarded_prefix: str = ""
    preserve_trailing_slash: bool = False
    connection_header: str = ""
    next_upstream_off: bool = False  # proxy-next-upstream: off
    next_upstream_tries: int = DEFAULT_TRIES  # 0: as many as there are endpoints
    limit_rate: int = 0  # bytes per second of the response, 0: none
    rewrite_log: bool = False
    errors: CustomErrors | None = None  # custom-http-errors (its lane directives come with it)

    def __post_init__(self) -> None:
        if self.forwarded_prefix:
            header_text("traffic.forwarded_prefix", self.forwarded_prefix)
        if self.connection_header:
            header_text("traffic.connection_header", self.connection_header)
        v.positive_int("traffic.next_upstream_tries", self.next_upstream_tries, maximum=1000, allow_zero=True)
        v.positive_int("traffic.limit_rate", self.limit_rate, maximum=2**40, allow_zero=True)

    @property
    def retries(self) -> int | None:
        """Extra attempts after the first, None for the balancer's default."""
        if self.next_upstream_off:
            return 0
        if self.next_upstream_tries == DEFAULT_TRIES:
            return None
        if self.next_upstream_tries == 0:
            return 1000  # nginx: unlimited; the balancer stops at the endpoint count
        return self.next_upstream_tries - 1


DEFAULT = Traffic()


def policy(traffic: Traffic) -> dict[str, Any] | None:
    """The ``traffic`` object of a route policy (lua/traffic.lua), None when
    ``traffic`` asks for nothing. Only settings that differ from the default
    are sent."""
    if traffic == DEFAULT:
        return None
    out: dict[str, Any] = {}
    if traffic.forwarded_prefix:
        out["forwarded_prefix"] = traffic.forwarded_prefix
    if traffic.preserve_trailing_slash:
        out["preserve_trailing_slash"] = True
    if traffic.connection_header:
        out["connection"] = traffic.connection_header
    if traffic.retries is not None:
        out["retries"] = traffic.retries
    if traffic.limit_rate:
        out["limit_rate"] = traffic.limit_rate
    if traffic.rewrite_log:
        out["rewrite_log"] = True
    if traffic.errors is not None:
        out["errors"] = custom_errors.policy(traffic.errors)
    return out or None


# --- settings applied by directives (platformd.ingress.lanes) ---------------------

_MAX_BUFFER = 64 * 1024 * 1024
_SIZE_UNITS = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}


def _bytes(text: str) -> int:
    return int(text[:-1]) * _SIZE_UNITS[text[-1]] if text[-1] in _SIZE_UNITS else int(text)


def buffer_size(field: str, text: str) -> str:
    """An nginx size for a buffer: from 1k to 64m."""
    text = v.size(field, text.strip())
    if not 1024 <= _bytes(text) <= _MAX_BUFFER:
        raise v.ValidationError(field, text, "must be a size from 1k to 64m")
    return text


def temp_file_size(field: str, text: str) -> str:
    return v.size(field, text.strip())


@dataclass(frozen=True, slots=True)
class ProxyDirectives:
    """The settings of one location that travel as ``Location.lane_directives``
    (see the module docstring). None / the defaults: not set."""

    http_version: str | None = None
    request_buffering: bool | None = None
    client_body_buffer_size: str | None = None
    buffer_size: str | None = None
    buffers_number: int | None = None
    max_temp_file_size: str | None = None
    next_upstream: tuple[str, ...] = DEFAULT_NEXT_UPSTREAM
    next_upstream_timeout: int = 0
    proxy_redirect: tuple[str, str] | None = None  # (from, to)
    cookie_domain: tuple[str, str] | None = None
    cookie_path: tuple[str, str] | None = None
    limit_rate_after: int = 0  # bytes
    access_log: bool = True

    def __post_init__(self) -> None:
        if self.buffers_number is not None and not 3 <= self.buffers_number <= 1024:
            # nginx -t: busy buffers (at least one buffer) must be less than all buffers minus one.
            raise v.ValidationError("proxy_buffers", self.buffers_number, "must be from 3 to 1024")
        if self.max_temp_file_size is not None:
            size = _bytes(self.max_temp_file_size)
            smallest = _bytes(self.buffer_size or "4k")
            if size and size < smallest:
                raise v.ValidationError("proxy_max_temp_file_size", self.max_temp_file_size,
                                        f"must be 0 or at least the buffer size ({self.buffer_size or '4k'})")
        next_upstream("proxy_next_upstream", " ".join(self.next_upstream))
        v.positive_int("proxy_next_upstream_timeout", self.next_upstream_timeout, maximum=86400, allow_zero=True)
        v.positive_int("limit_rate_after", self.limit_rate_after, maximum=2**40, allow_zero=True)

    def pairs(self) -> tuple[tuple[str, str], ...]:
        """The (directive, value) pairs these settings need; () for none."""
        out: list[tuple[str, str]] = []
        if self.http_version is not None and self.http_version != "1.1":  # the lanes' own value
            out.append(("proxy_http_version", self.http_version))
        if self.request_buffering is False:  # nginx's default is on
            out.append(("proxy_request_buffering", "off"))
        if self.client_body_buffer_size is not None:
            out.append(("client_body_buffer_size", self.client_body_buffer_size))
        if self.buffer_size is not None or self.buffers_number is not None:
            # As ingress-nginx renders them: N buffers of the buffer size (4 x 4k
            # by default), and busy buffers of one buffer so nginx -t accepts any N >= 3.
            size = self.buffer_size or "4k"
            out += [("proxy_buffer_size", size), ("proxy_buffers", f"{self.buffers_number or 4} {size}"),
                    ("proxy_busy_buffers_size", size)]
        if self.max_temp_file_size is not None:
            out.append(("proxy_max_temp_file_size", self.max_temp_file_size))
        if self.next_upstream not in (DEFAULT_NEXT_UPSTREAM, ("off",)):  # off: one try (Traffic)
            out.append(("proxy_next_upstream", " ".join(self.next_upstream)))
        if self.next_upstream_timeout:
            out.append(("proxy_next_upstream_timeout", f"{self.next_upstream_timeout}s"))
        if self.proxy_redirect is not None:
            out.append(("proxy_redirect", " ".join(self.proxy_redirect)))
        if self.cookie_domain is not None:
            out.append(("proxy_cookie_domain", " ".join(self.cookie_domain)))
        if self.cookie_path is not None:
            out.append(("proxy_cookie_path", " ".join(self.cookie_path)))
        if self.limit_rate_after:
            out.append(("limit_rate_after", str(self.limit_rate_after)))
        if not self.access_log:
            out.append(("access_log", "off"))
        return tuple(sorted(out))


# --- lanes.DIRECTIVES validators (the text each directive gets in nginx.conf) ---------


def _next_upstream_directive(field: str, text: str) -> str:
    return " ".join(next_upstream(field, text))


def _timeout_directive(field: str, text: str) -> str:
    if not re.fullmatch(r"[0-9]{1,5}s", text) or int(text[:-1]) > 86400:
        raise v.ValidationError(field, text, "must be seconds like 10s (at most 86400s)")
    return text


def _pair(check) -> Any:
    def validate(field: str, text: str) -> str:
        parts = text.split(" ")
        if len(parts) != 2:
            raise v.ValidationError(field, text, "must be '<from> <to>'")
        return " ".join(check(field, part) for part in parts)

    return validate


def _access_log_directive(field: str, text: str) -> str:
    if text != "off":
        raise v.ValidationError(field, text, "must be off")
    return text


def _count_bytes(field: str, text: str) -> str:
    if not re.fullmatch(r"[0-9]{1,13}", text):
        raise v.ValidationError(field, text, "must be a number of bytes")
    return text


LANE_DIRECTIVES = {
    "proxy_next_upstream": _next_upstream_directive,
    "proxy_next_upstream_timeout": _timeout_directive,
    "proxy_redirect": _pair(redirect_prefix),
    "proxy_cookie_domain": _pair(lambda f, t: _cookie_part("domain", f, t)),
    "proxy_cookie_path": _pair(lambda f, t: _cookie_part("path", f, t)),
    "limit_rate_after": _count_bytes,
    "access_log": _access_log_directive,
}
