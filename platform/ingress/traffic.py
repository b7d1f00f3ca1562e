"""Per-route traffic settings of ingress-nginx annotations that the router
applies per request: response rewriting, upstream retries, bandwidth
limits, logging and the X-Forwarded-Prefix / Connection headers.

``Traffic`` (one per ``Location``, the default for most) is parsed from the
annotations below, validated here, and shipped to lua/traffic.lua as the
policy's ``traffic`` object (``policy(traffic)``; null when every setting is
the default, so such routes keep the fast path). Nothing here becomes nginx
configuration text: lua/traffic.lua writes the values into variables the
template's lanes read (``proxy_redirect $platform_redirect_from ...``).

Annotation semantics follow ingress-nginx's documentation:

* ``x-forwarded-prefix``: the value of an ``X-Forwarded-Prefix`` request header.
* ``proxy-redirect-from`` / ``-to``: ``proxy_redirect <from> <to>`` (prefix
  replacement in ``Location`` and ``Refresh``); ``off`` (the default) and
  ``default`` rewrite nothing.
* ``proxy-cookie-domain`` / ``proxy-cookie-path``: ``"<from> <to>"``, as
  ``proxy_cookie_domain`` / ``proxy_cookie_path``; ``off`` is the default.
* ``connection-proxy-header``: the ``Connection`` header sent upstream
  (default: ``upgrade`` for websocket upgrades, else keep-alive).
* ``proxy-next-upstream-tries``: attempts in all, default 3 (bounded by the
  backend's endpoints); ``proxy-next-upstream: off`` makes it 1.
* ``limit-rate`` / ``limit-rate-after``: kilobytes per second of the response
  and kilobytes sent before the limit starts (0: no limit).
* ``enable-access-log: "false"`` drops the route's access log lines;
  ``enable-rewrite-log: "true"`` logs each rewrite at notice level.
* ``preserve-trailing-slash``: an HTTPS redirect keeps a trailing ``/``
  (by default it is dropped, as ingress-nginx does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from platformd.ingress import validate as v
from platformd.ingress.custom_errors import CustomErrors
from platformd.ingress import custom_errors

__all__ = ["Traffic", "cookie_rewrite", "header_text", "policy", "redirect_prefix"]

# A URL or path prefix as proxy_redirect / proxy_cookie_path compare it: no
# spaces, quotes, ';', '$', braces or backslashes (never a variable).
_PREFIX = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!&()*+,=%-]{1,1024}")
_DOMAIN = re.compile(r"\.?[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
# lua/traffic.lua's SAFE: the same characters, checked again there.
_TEXT = r"A-Za-z0-9._~:/?#\[\]@!&()*+,=%\-"
_HEADER_TEXT = re.compile(f"[{_TEXT}]([{_TEXT} ]{{0,1022}}[{_TEXT}])?")


def redirect_prefix(field: str, text: str) -> str:
    """One side of ``proxy_redirect``: a URL or path prefix."""
    text = text.strip()
    if not _PREFIX.fullmatch(text):
        raise v.ValidationError(field, text, "must be a URL or path prefix (no spaces, quotes, ';', '$' or braces)")
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
    if kind == "path" and _PREFIX.fullmatch(text):
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


def next_upstream(field: str, text: str) -> tuple[str, ...]:
    """``proxy-next-upstream``: nginx's conditions, space separated."""
    words = tuple(text.split())
    allowed = ("error", "timeout", "invalid_header", "http_500", "http_502", "http_503", "http_504",
               "http_403", "http_404", "http_429", "non_idempotent", "off")
    if not words or len(words) > len(allowed) or any(w not in allowed for w in words):
        raise v.ValidationError(field, text, "must list " + ", ".join(allowed))
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
    proxy_redirect: tuple[str, str] | None = None  # (from, to)
    cookie_domain: tuple[str, str] | None = None
    cookie_path: tuple[str, str] | None = None
    connection_header: str = ""
    next_upstream: tuple[str, ...] = DEFAULT_NEXT_UPSTREAM
    next_upstream_tries: int = DEFAULT_TRIES  # 0: as many as there are endpoints
    next_upstream_timeout: int = 0  # seconds, 0: none
    limit_rate: int = 0  # bytes per second of the response, 0: none
    limit_rate_after: int = 0  # bytes
    access_log: bool = True
    rewrite_log: bool = False
    errors: CustomErrors | None = None  # custom-http-errors (its lane directives come with it)

    def __post_init__(self) -> None:
        if self.forwarded_prefix:
            header_text("traffic.forwarded_prefix", self.forwarded_prefix)
        if self.connection_header:
            header_text("traffic.connection_header", self.connection_header)
        if self.proxy_redirect is not None:
            for side in self.proxy_redirect:
                redirect_prefix("traffic.proxy_redirect", side)
        for kind in ("domain", "path"):
            pair = getattr(self, "cookie_" + kind)
            if pair is not None:
                for side in pair:
                    _cookie_part(kind, f"traffic.cookie_{kind}", side)
        next_upstream("traffic.next_upstream", " ".join(self.next_upstream))
        v.positive_int("traffic.next_upstream_tries", self.next_upstream_tries, maximum=1000, allow_zero=True)
        v.positive_int("traffic.next_upstream_timeout", self.next_upstream_timeout, maximum=86400, allow_zero=True)
        v.positive_int("traffic.limit_rate", self.limit_rate, maximum=2**40, allow_zero=True)
        v.positive_int("traffic.limit_rate_after", self.limit_rate_after, maximum=2**40, allow_zero=True)

    @property
    def retries(self) -> int | None:
        """Extra attempts after the first, None for the balancer's default."""
        if self.next_upstream == ("off",):
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
    if traffic.proxy_redirect is not None:
        out["proxy_redirect"] = list(traffic.proxy_redirect)
    if traffic.cookie_domain is not None:
        out["cookie_domain"] = list(traffic.cookie_domain)
    if traffic.cookie_path is not None:
        out["cookie_path"] = list(traffic.cookie_path)
    if traffic.connection_header:
        out["connection"] = traffic.connection_header
    if traffic.retries is not None:
        out["retries"] = traffic.retries
    if traffic.limit_rate:
        out["limit_rate"] = traffic.limit_rate
        out["limit_rate_after"] = traffic.limit_rate_after
    if not traffic.access_log:
        out["access_log"] = False
    if traffic.rewrite_log:
        out["rewrite_log"] = True
    if traffic.errors is not None:
        out["errors"] = custom_errors.policy(traffic.errors)
    return out or None


# --- settings only a directive applies (platformd.ingress.lanes) -----------------

_MAX_BUFFER = 64 * 1024 * 1024
_SIZE_UNITS = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}


def _bytes(text: str) -> int:
    return int(text[:-1]) * _SIZE_UNITS[text[-1]] if text[-1] in _SIZE_UNITS else int(text)


def buffer_size(field: str, text: str) -> str:
    """An nginx size for a buffer: at least 1k... at most 64m."""
    text = v.size(field, text.strip())
    if not 1024 <= _bytes(text) <= _MAX_BUFFER:
        raise v.ValidationError(field, text, "must be a size from 1k to 64m")
    return text


def temp_file_size(field: str, text: str) -> str:
    return v.size(field, text.strip())


def _seconds(field: str, value: int) -> str:
    return f"{value}s"


@dataclass(frozen=True, slots=True)
class ProxyDirectives:
    """proxy-http-version, proxy-request-buffering, client-body-buffer-size,
    proxy-buffer-size, proxy-buffers-number, proxy-max-temp-file-size and
    proxy-next-upstream's conditions and timeout: nginx directives that take
    no variables, so they travel as ``Location.lane_directives``. None: not set."""

    http_version: str | None = None
    request_buffering: bool | None = None
    client_body_buffer_size: str | None = None
    buffer_size: str | None = None
    buffers_number: int | None = None
    max_temp_file_size: str | None = None
    next_upstream: tuple[str, ...] = DEFAULT_NEXT_UPSTREAM
    next_upstream_timeout: int = 0

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
        if self.next_upstream != DEFAULT_NEXT_UPSTREAM and self.next_upstream != ("off",):
            out.append(("proxy_next_upstream", " ".join(self.next_upstream)))
        if self.next_upstream_timeout:
            out.append(("proxy_next_upstream_timeout", _seconds("proxy_next_upstream_timeout",
                                                                self.next_upstream_timeout)))
        return tuple(sorted(out))


def _next_upstream_directive(field: str, text: str) -> str:
    return " ".join(next_upstream(field, text))


def _timeout_directive(field: str, text: str) -> str:
    if not re.fullmatch(r"[0-9]{1,5}s", text) or int(text[:-1]) > 86400:
        raise v.ValidationError(field, text, "must be seconds like 10s (at most 86400s)")
    return text


# For lanes.DIRECTIVES (each a directive these settings need).
LANE_DIRECTIVES = {
    "proxy_next_upstream": _next_upstream_directive,
    "proxy_next_upstream_timeout": _timeout_directive,
}
