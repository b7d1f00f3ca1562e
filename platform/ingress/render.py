"""Render nginx.conf and the Lua payloads from a Configuration (pure functions).

``render_nginx_conf`` builds the view model (validating and escaping every
user value) and lays it out with ``templates/nginx.conf.j2``. Equal inputs give
byte-identical output: the model is canonically ordered and the template has
no sources of nondeterminism.

``dynamic_sections`` gives the three payloads of the data plane protocol
(docs/architecture.md, "Data plane protocol") with their checksums.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import jinja2

from platformd import paths as share_paths
from platformd.ingress import view as view_model
from platformd.ingress.model import Backend, Configuration

__all__ = [
    "DynamicSection",
    "SECTIONS",
    "backends_payload",
    "certificates_payload",
    "certificate_uid",
    "checksum",
    "canonical_json",
    "dynamic_sections",
    "general_payload",
    "per_configuration",
    "render_nginx_conf",
]

SECTIONS = ("backends", "certificates", "general")

T = TypeVar("T")


@functools.lru_cache(maxsize=4)
def _environment(templates_dir: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        undefined=jinja2.StrictUndefined,  # a missing view field is a bug, not ""
        autoescape=False,  # values are escaped for nginx, not HTML, by the view
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render_nginx_conf(
    config: Configuration, runtime: view_model.RuntimePaths, templates_dir: Path | None = None
) -> str:
    """nginx.conf text for ``config``. Raises ``ValidationError`` for a bad value."""
    view = view_model.build(config, runtime)
    directory = str(templates_dir or share_paths.templates_dir())
    return _environment(directory).get_template("nginx.conf.j2").render(v=view)


# --- Lua payloads -----------------------------------------------------------


def canonical_json(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def checksum(data: Any) -> str:
    """sha256 of the canonical JSON of a section payload (what Lua echoes back)."""
    return hashlib.sha256(canonical_json(data)).hexdigest()


def _backend_payload(backend: Backend) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "name": backend.name,
        "endpoints": [{"address": e.address, "port": e.port} for e in backend.endpoints],
        "load_balance": backend.load_balance.value,
        "upstream_hash_by": backend.upstream_hash_by,
        "alternative_backends": list(backend.alternative_backends),
    }
    affinity = backend.session_affinity
    if affinity is not None:
        cookie: dict[str, Any] = {"name": affinity.cookie_name, "path": affinity.path, "secure": affinity.secure}
        if affinity.max_age is not None:
            cookie["max_age"] = affinity.max_age
        if affinity.samesite:
            cookie["samesite"] = affinity.samesite
        payload["session_affinity"] = {"type": "cookie", "mode": affinity.mode.value, "cookie": cookie}
    policy = backend.traffic_shaping_policy
    if policy is not None:
        payload["traffic_shaping_policy"] = {
            "weight": policy.weight,
            "weight_total": policy.weight_total,
            "header": policy.header,
            "header_value": policy.header_value,
            "header_pattern": policy.header_pattern,
            "cookie": policy.cookie,
        }
    return payload


def backends_payload(config: Configuration) -> list[dict[str, Any]]:
    return [_backend_payload(b) for b in config.backends]


def certificate_uid(cert_pem: str, key_pem: str) -> str:
    """Content address of a certificate: Lua may cache parsed certs by it."""
    return hashlib.sha256((cert_pem + "\n" + key_pem).encode()).hexdigest()[:32]


def certificates_payload(config: Configuration) -> dict[str, Any]:
    """Hostname → certificate mapping for SNI.

    A certificate serves the hostnames it lists; a server's explicit
    ``tls_certificate`` reference overrides that for its own names. A server
    pointing at an unknown certificate is left to the default certificate:
    ``default_certificate`` when it names a known certificate, else the
    template's built-in one (``"default": null``).
    """
    by_id = {c.id: c for c in config.certificates}
    uids = {c.id: certificate_uid(c.cert_pem, c.key_pem) for c in config.certificates}
    servers: dict[str, str] = {}
    for cert in config.certificates:
        for name in cert.hostnames:
            servers[name] = uids[cert.id]
    for server in config.servers:
        if server.tls_certificate in by_id:
            for name in server.names:
                servers[name] = uids[server.tls_certificate]
    default = uids.get(config.default_certificate) if config.default_certificate else None
    used = set(servers.values()) | ({default} if default else set())
    pems = {uids[c.id]: c.cert_pem.rstrip("\n") + "\n" + c.key_pem for c in config.certificates if uids[c.id] in used}
    return {"servers": dict(sorted(servers.items())), "certificates": dict(sorted(pems.items())), "default": default}


def general_payload(config: Configuration) -> dict[str, Any]:
    return {"status_codes": {"no_endpoints": 503}}


@dataclass(frozen=True)
class DynamicSection:
    name: str
    data: Any
    checksum: str


def per_configuration(fn: Callable[[Configuration], T]) -> Callable[[Configuration], T]:
    """Cache ``fn``'s result per Configuration *object* (by identity).

    A Configuration is frozen, so anything computed from it never changes,
    and decide and the data plane ask about the same objects on every apply
    (a second or more at 10,000 Ingresses). Keyed by id, not by the
    Configuration itself, whose hash and equality walk every server and
    backend. An entry goes when its Configuration is collected
    (``weakref.finalize``), before its id can be reused. Results are shared:
    callers must not modify them.
    """
    cache: dict[int, T] = {}
    lock = threading.Lock()

    @functools.wraps(fn)
    def cached(config: Configuration) -> T:
        key = id(config)
        try:
            return cache[key]
        except KeyError:
            pass
        result = fn(config)
        with lock:
            if key not in cache:
                cache[key] = result
                weakref.finalize(config, cache.pop, key, None)
        return result

    return cached


@per_configuration
def dynamic_sections(config: Configuration) -> tuple[DynamicSection, ...]:
    """The Lua sections for ``config``, in protocol order (computed once per object)."""
    return _dynamic_sections(config)


def _dynamic_sections(config: Configuration) -> tuple[DynamicSection, ...]:
    payloads = {
        "backends": backends_payload(config),
        "certificates": certificates_payload(config),
        "general": general_payload(config),
    }
    return tuple(DynamicSection(name, payloads[name], checksum(payloads[name])) for name in SECTIONS)
