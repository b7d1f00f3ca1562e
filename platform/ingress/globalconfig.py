"""The ``--configmap`` ConfigMap → ``GlobalSettings`` plus translation defaults.

Keys and meanings are ingress-nginx's where a key exists there. Every value is
validated on its own: a bad value gives an ``Issue`` naming the key and value
and that one setting keeps its default; the rest of the ConfigMap still
applies. Keys we do not know are reported once (``UnsupportedConfigKey``) and
otherwise ignored, so a ConfigMap copied from ingress-nginx keeps working.

Two keys are not nginx settings but defaults of the translation itself
(``ssl-redirect``, ``load-balance``); they are returned in ``Defaults``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable

from platformd.ingress import auth as auth_mod
from platformd.ingress import validate as v
from platformd.ingress.model import GlobalSettings, LoadBalance
from platformd.ingress.snapshot import Issue

__all__ = ["Defaults", "GlobalConfig", "KEYS", "parse"]


@dataclass(frozen=True)
class Defaults:
    """Translation defaults an Ingress annotation may override."""

    ssl_redirect: bool = True
    load_balance: LoadBalance = LoadBalance.ROUND_ROBIN


@dataclass(frozen=True)
class GlobalConfig:
    settings: GlobalSettings
    defaults: Defaults
    issues: tuple[Issue, ...] = ()
    auth: auth_mod.GlobalAuth = auth_mod.GlobalAuth()  # global-auth-* (see auth.global_auth)


# --- value parsers: text -> typed value, ValueError(reason) when bad ----------


def parse_bool(text: str) -> bool:
    """``true``/``false`` in any case (plus Go's 1/0/t/f, as ingress-nginx reads them)."""
    lowered = text.strip().lower()
    if lowered in ("true", "t", "1"):
        return True
    if lowered in ("false", "f", "0"):
        return False
    raise ValueError("must be true or false")


def parse_int(text: str, low: int = 0, high: int = 2**31 - 1) -> int:
    stripped = text.strip()
    if not re.fullmatch(r"[0-9]{1,10}", stripped):
        raise ValueError(f"must be an integer {low}-{high}")
    value = int(stripped)
    if not low <= value <= high:
        raise ValueError(f"must be an integer {low}-{high}")
    return value


def parse_seconds(text: str, low: int = 1, high: int = 86400) -> int:
    """Seconds: ``60`` or ``60s`` (nginx time units other than s are refused)."""
    stripped = text.strip()
    if stripped.endswith("s"):
        stripped = stripped[:-1]
    return parse_int(stripped, low, high)


def parse_on_off(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("on", "off"):
        return lowered == "on"
    raise ValueError("must be on or off")


def _validated(fn: Callable[[str, str], object]) -> Callable[[str], object]:
    def parse(text: str) -> object:
        try:
            return fn("value", text)
        except v.ValidationError as exc:
            raise ValueError(exc.reason) from None

    return parse


# --- key table: key -> (parser, how to apply the parsed value) ----------------

def _worker_processes(text: str) -> int | None:
    return None if text.strip() == "auto" else parse_int(text, 1, 1024)


def _protocols(text: str) -> tuple[str, ...]:
    items = tuple(text.split())
    if not items:
        raise ValueError("must list at least one protocol")
    for item in items:
        if item not in ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"):
            raise ValueError(f"unknown protocol {item!r}; use TLSv1, TLSv1.1, TLSv1.2 or TLSv1.3")
    return items


def _load_balance(text: str) -> LoadBalance:
    try:
        return LoadBalance(text.strip())
    except ValueError:
        raise ValueError("must be round_robin or ewma") from None


def _redirect_code(text: str) -> int:
    code = parse_int(text, 0, 999)
    if code not in (301, 302, 307, 308):
        raise ValueError("must be 301, 302, 307 or 308")
    return code


def _error_level(text: str) -> str:
    if text not in ("debug", "info", "notice", "warn", "error", "crit"):
        raise ValueError("must be debug, info, notice, warn, error or crit")
    return text


KEYS: dict[str, tuple[Callable[[str], object], tuple[str, ...]]] = {
    # key: (parser, field path in the settings state)
    "worker-processes": (_worker_processes, ("workers", "processes")),
    "max-worker-connections": (lambda t: parse_int(t, 1, 1_000_000), ("workers", "connections")),
    "worker-shutdown-timeout": (lambda t: parse_seconds(t, 0, 86400), ("workers", "shutdown_timeout")),
    "keep-alive": (lambda t: parse_seconds(t, 0, 86400), ("keepalive_timeout",)),
    "keep-alive-requests": (lambda t: parse_int(t, 1), ("keepalive_requests",)),
    "upstream-keepalive-connections": (lambda t: parse_int(t, 1, 100_000), ("upstream_keepalive_connections",)),
    "proxy-connect-timeout": (parse_seconds, ("timeouts", "connect")),
    "proxy-read-timeout": (parse_seconds, ("timeouts", "read")),
    "proxy-send-timeout": (parse_seconds, ("timeouts", "send")),
    "proxy-body-size": (_validated(v.size), ("body_size",)),
    "proxy-buffering": (parse_on_off, ("buffering",)),
    "ssl-protocols": (_protocols, ("tls", "protocols")),
    "ssl-ciphers": (_validated(v.ssl_ciphers), ("tls", "ciphers")),
    "http-redirect-code": (_redirect_code, ("tls", "redirect_code")),
    "hsts": (parse_bool, ("tls", "hsts", "enabled")),
    "hsts-max-age": (lambda t: parse_int(t, 0), ("tls", "hsts", "max_age")),
    "hsts-include-subdomains": (parse_bool, ("tls", "hsts", "include_subdomains")),
    "hsts-preload": (parse_bool, ("tls", "hsts", "preload")),
    "use-forwarded-headers": (parse_bool, ("use_forwarded_headers",)),
    "server-tokens": (parse_bool, ("server_tokens",)),
    "log-format-upstream": (_validated(v.log_format), ("logging", "format")),
    "disable-access-log": (lambda t: not parse_bool(t), ("logging", "access_log")),
    "error-log-level": (_error_level, ("logging", "error_level")),
    "reuse-port": (parse_bool, ("listen", "reuse_port")),
    # translation defaults
    "ssl-redirect": (parse_bool, ("defaults", "ssl_redirect")),
    "load-balance": (_load_balance, ("defaults", "load_balance")),
}

def _build(values: dict[tuple[str, ...], object], http_port: int, https_port: int) -> tuple[GlobalSettings, Defaults]:
    base = GlobalSettings()
    defaults = Defaults(**{path[1]: value for path, value in values.items() if path[0] == "defaults"})
    top: dict[str, object] = {}
    nested: dict[str, dict[str, object]] = {}
    hsts: dict[str, object] = {}
    for path, value in values.items():
        if path[0] == "defaults":
            continue
        if path[:2] == ("tls", "hsts"):
            hsts[path[2]] = value
        elif len(path) == 1:
            top[path[0]] = value
        else:
            nested.setdefault(path[0], {})[path[1]] = value
    nested.setdefault("listen", {}).update(http_port=http_port, https_port=https_port)
    if hsts:
        nested.setdefault("tls", {})["hsts"] = replace(base.tls.hsts, **hsts)
    for group, fields in nested.items():
        top[group] = replace(getattr(base, group), **fields)
    return replace(base, **top), defaults


def parse(configmap: dict | None, *, http_port: int = 80, https_port: int = 443) -> GlobalConfig:
    """Settings from ``configmap.data`` (None or no data: all defaults).

    Each key is checked twice: by its parser here and, as the value lands in
    the model, by the model's own validator (a value the model refuses is
    reported the same way and its default kept).
    """
    data = (configmap or {}).get("data") or {}
    issues: list[Issue] = []
    values: dict[tuple[str, ...], object] = {}
    for key in sorted(data):
        text = data[key]
        if key in auth_mod.GLOBAL_KEYS:
            continue  # auth.global_auth below
        if key not in KEYS:
            issues.append(Issue("UnsupportedConfigKey", f"ConfigMap key {key!r} is not supported and was ignored"))
            continue
        parser, path = KEYS[key]
        try:
            parsed = parser(str(text))
            candidate = {**values, path: parsed}
            _build(candidate, http_port, https_port)  # the model's own check
        except (ValueError, v.ValidationError) as exc:
            reason = exc.reason if isinstance(exc, v.ValidationError) else str(exc)
            issues.append(Issue("InvalidConfigValue", f"ConfigMap key {key!r} value {text!r} {reason}; using the default"))
            continue
        values = candidate
    settings, defaults = _build(values, http_port, https_port)
    glob = auth_mod.global_auth(data)
    if glob.error:
        issues.append(Issue("InvalidGlobalAuth", glob.error + "; Ingresses it would cover are not served"))
    return GlobalConfig(settings=settings, defaults=defaults, issues=tuple(issues), auth=glob)
