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
import itertools
import json
import operator
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

import jinja2

from platformd import paths as share_paths
from platformd.ingress import routes as routes_mod
from platformd.ingress.caches import Caches, Generations
from platformd.ingress import view as view_model
from platformd.ingress.model import Backend, Configuration

__all__ = [
    "BackendsDelta",
    "COMPACT_AFTER",
    "COMPACT_FLOOR",
    "COMPACT_SHARE",
    "DynamicSection",
    "EncodedBackend",
    "SECTIONS",
    "backends_checksum",
    "backends_delta",
    "backends_payload",
    "certificates_payload",
    "certificate_uid",
    "checksum",
    "canonical_json",
    "compact_due",
    "dynamic_sections",
    "per_configuration",
    "render_nginx_conf",
    "section_checksum",
]

SECTIONS = ("backends", "certificates", "routes", *(f"routes_{i}" for i in range(routes_mod.SHARDS)))

T = TypeVar("T")


@functools.lru_cache(maxsize=4)
def _environment(templates_dir: str) -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        undefined=jinja2.StrictUndefined,  # a missing view field is a bug, not ""
        autoescape=False,  # values are escaped for nginx, not HTML, by the view
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return environment


def render_nginx_conf(
    config: Configuration, runtime: view_model.RuntimePaths, templates_dir: Path | None = None
) -> str:
    """nginx.conf text for ``config``. Raises ``ValidationError`` for a bad value."""
    view = view_model.build(config, runtime)
    environment = _environment(str(templates_dir or share_paths.templates_dir()))
    return environment.get_template("nginx.conf.j2").render(v=view)


# --- Lua payloads -----------------------------------------------------------


def canonical_json(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def checksum(data: Any) -> str:
    """sha256 of the canonical JSON of a section payload (what Lua echoes back).

    The backends section has its own, order-independent checksum
    (``backends_checksum``); ``section_checksum`` picks the right one.
    """
    return hashlib.sha256(canonical_json(data)).hexdigest()


def section_checksum(section: str, data: Any) -> str:
    """The checksum the data plane uses for ``data`` as ``section``."""
    if section == "backends":
        return backends_checksum(data)
    return checksum(data)


def _backend_payload(backend: Backend) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "name": backend.name,
        "endpoints": [{"address": e.address, "port": e.port} for e in backend.endpoints],
        "load_balance": backend.load_balance.value,
        "upstream_hash_by": backend.upstream_hash_by,
        "alternative_backends": list(backend.alternative_backends),
    }
    if backend.upstream_hash_by_subset_size:  # upstream-hash-by-subset (lua/balancer/chash_subset.lua)
        payload["upstream_hash_by_subset_size"] = backend.upstream_hash_by_subset_size
    affinity = backend.session_affinity
    if affinity is not None:
        cookie: dict[str, Any] = {"name": affinity.cookie_name, "path": affinity.path, "secure": affinity.secure}
        if affinity.max_age is not None:
            cookie["max_age"] = affinity.max_age
        if affinity.samesite:
            cookie["samesite"] = affinity.samesite
        payload["session_affinity"] = {"type": "cookie", "mode": affinity.mode.value, "cookie": cookie}
        # Only when set, so backends without them keep their payload (and checksum).
        if affinity.domain:
            cookie["domain"] = affinity.domain
        if affinity.expires is not None:
            cookie["expires"] = affinity.expires
        if affinity.conditional_samesite_none:
            cookie["conditional_samesite_none"] = True
        if affinity.change_on_failure:
            payload["session_affinity"]["change_on_failure"] = True
        if affinity.canary_behavior != "sticky":
            payload["session_affinity"]["canary_behavior"] = affinity.canary_behavior
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


# --- backends: per-backend encoding, aggregate checksum, deltas -------------
#
# At 20,000 backends, encoding and hashing the whole section costs about a
# second, and an endpoint change alters one backend. So each backend is
# encoded and hashed once per Backend object (the model reuses unchanged
# frozen Backends from one configuration to the next), and the section's
# checksum aggregates the per-backend digests order-independently: a sum
# modulo 2**256 of the sha256 of each backend's canonical JSON, hashed again
# with the count. Building the section for a new configuration then costs an
# identity lookup per backend plus the encoding of the changed ones.

_MOD = 1 << 256


@dataclass(frozen=True)
class EncodedBackend:
    """One backend's canonical JSON and the sha256 of it (as an integer)."""

    name: str
    json: bytes
    digest: int


def _encode_backend(backend: Backend) -> EncodedBackend:
    raw = canonical_json(_backend_payload(backend))
    return EncodedBackend(backend.name, raw, int.from_bytes(hashlib.sha256(raw).digest(), "big"))


def _encode_all(cache: Generations, backends: tuple[Backend, ...]) -> tuple[EncodedBackend, ...]:
    """EncodedBackend of each Backend *object*, from ``cache`` (``Caches.encodings``)."""
    cache.limit = max(cache.limit, 3 * len(backends))  # running, desired and a reload's union
    return tuple(cache.get(id(b), b, lambda b=b: _encode_backend(b)) for b in backends)


def _aggregate(digests: Iterable[int], count: int) -> str:
    return _finish(sum(digests) % _MOD, count)


def _finish(total: int, count: int) -> str:
    return hashlib.sha256(b"backends:%d:%064x" % (count, total)).hexdigest()


def _changed_positions(new: tuple, old: tuple) -> list[int] | None:
    """Positions where two equally long tuples hold different objects (None: lengths differ)."""
    if len(new) != len(old):
        return None
    # map/compress run in C: about 20 times faster than a comprehension at 20,000.
    return list(itertools.compress(itertools.count(), map(operator.is_not, new, old)))


def backends_checksum(payload: list[dict[str, Any]]) -> str:
    """Checksum of a backends payload (the order of the list does not matter)."""
    digests = [int.from_bytes(hashlib.sha256(canonical_json(item)).digest(), "big") for item in payload]
    return _aggregate(digests, len(digests))


# A full push instead of a delta once the chain since the last full push has
# this many deltas, or its deltas named more than a COMPACT_SHARE of the
# backends: a worker that starts (a reload) or falls behind replays base +
# chain, so this bounds that replay (and the chain's room in the shared
# dict) to about 1/8 of the set more than a full payload costs, while an
# endpoint change still moves one backend. A compaction is not free: at
# 20,000 backends the full POST (3 MB, validated whole by Lua) takes ~0.8 s,
# the one endpoint change that triggers it waits for it, so it must be rare
# (1 change in 512 stays out of the p99); replaying 512 one-backend deltas
# costs a fresh worker a few milliseconds. Lua refuses chains beyond
# configuration.lua's MAX_CHAIN (1,024) whatever the client does.
COMPACT_AFTER = 512
COMPACT_SHARE = 1 / 8
COMPACT_FLOOR = 16  # small sets use deltas too, so one protocol serves every size


def compact_due(chain: tuple[int, int], delta: BackendsDelta, backends: int) -> bool:
    """Whether to push the whole backends section rather than ``delta``.

    ``chain``: (deltas, backends they named) since the last full push;
    ``backends``: how many the section has.
    """
    count, named = chain
    return count >= COMPACT_AFTER or named + delta.size > max(COMPACT_SHARE * backends, COMPACT_FLOOR)


@dataclass(frozen=True)
class BackendsDelta:
    """From the backends section ``base`` to ``checksum``: upserted backends, removed names."""

    base: str
    checksum: str
    upsert: tuple[EncodedBackend, ...]
    remove: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.upsert) + len(self.remove)

    def body(self) -> bytes:
        return b"".join((
            b'{"base":"', self.base.encode(), b'","checksum":"', self.checksum.encode(),
            b'","remove":', canonical_json(list(self.remove)),
            b',"upsert":[', b",".join(e.json for e in self.upsert), b"]}",
        ))


def backends_delta(base: DynamicSection, target: DynamicSection) -> BackendsDelta:
    """What turns the backends section ``base`` into ``target`` (both from ``dynamic_sections``)."""
    old, new = base.items or (), target.items or ()
    changed = _changed_positions(new, old)
    if changed is not None and all(new[i].name == old[i].name for i in changed):
        # The usual case (endpoint changes): same names in the same places.
        upsert = tuple(new[i] for i in changed if new[i].digest != old[i].digest)
        return BackendsDelta(base.checksum, target.checksum, upsert, ())
    before = {e.name: e.digest for e in old}
    upsert = tuple(e for e in new if before.pop(e.name, None) != e.digest)
    # What ``before`` still holds is not in target: removed.
    return BackendsDelta(base.checksum, target.checksum, upsert, tuple(sorted(before)))


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


@dataclass(frozen=True)
class DynamicSection:
    """A section as posted: ``body`` is the canonical JSON of its payload.

    ``items`` (backends only): the encoded backends, in the payload's order,
    from which ``backends_delta`` works.
    """

    name: str
    checksum: str
    items: tuple[EncodedBackend, ...] | None = field(default=None, repr=False, compare=False)
    plain: bytes = field(default=b"", repr=False, compare=False)  # body of other sections
    backends: tuple[Backend, ...] = field(default=(), repr=False, compare=False)  # items' sources
    total: int = field(default=0, repr=False, compare=False)  # sum of the digests mod 2**256

    @property
    def body(self) -> bytes:
        """Built on each use, not kept: a delta push never needs the whole
        body, and keeping it after a full push held the encoded backends
        twice (4.4 MB at 10,000 Ingresses)."""
        if self.items is None:
            return self.plain
        return b"[" + b",".join(e.json for e in self.items) + b"]"

    @property
    def data(self) -> Any:
        """The payload, decoded again (diagnostics and tests)."""
        return json.loads(self.body)


def per_configuration(fn: Callable[..., T]) -> Callable[..., T]:
    """Cache ``fn(config, *rest)``'s result per Configuration *object* (by identity).

    A Configuration is frozen, so anything computed from it never changes,
    and decide and the data plane ask about the same objects on every apply
    (a second or more at 10,000 Ingresses). ``rest`` (a ``Caches``) only
    makes the computation cheaper, never changes its result, so it is not
    part of the key. Keyed by id, not by the Configuration itself, whose
    hash and equality walk every server and backend. An entry goes when its
    Configuration is collected (``weakref.finalize``), before its id can be
    reused. Results are shared: callers must not modify them.
    """
    cache: dict[int, T] = {}
    lock = threading.Lock()

    @functools.wraps(fn)
    def cached(config: Configuration, *rest: Any) -> T:
        key = id(config)
        try:
            return cache[key]
        except KeyError:
            pass
        result = fn(config, *rest)
        with lock:
            if key not in cache:
                cache[key] = result
                weakref.finalize(config, cache.pop, key, None)
        return result

    return cached


@per_configuration
def dynamic_sections(config: Configuration, caches: Caches | None = None) -> tuple[DynamicSection, ...]:
    """The Lua sections for ``config``, in protocol order (computed once per object).

    ``caches``: the data plane's ``caches.Caches`` (encoded backends, the
    route table, the last sections), reused across configurations; None
    computes afresh (the result is equal either way)."""
    return _dynamic_sections(config, caches or Caches())


def _backends_section(config: Configuration, caches: Caches) -> DynamicSection:
    backends, hint = config.backends, caches.last_backends()
    changed = _changed_positions(backends, hint.backends) if hint is not None else None
    if changed is not None and len(changed) * 4 < len(backends):
        # Mostly the Backend objects of the last section, in the same places:
        # an identity scan plus the changed ones.
        items = list(hint.items)
        total = hint.total
        for i, encoded in zip(changed, _encode_all(caches.encodings, tuple(backends[i] for i in changed))):
            total += encoded.digest - items[i].digest
            items[i] = encoded
        total %= _MOD
        section = DynamicSection("backends", _finish(total, len(items)), tuple(items),
                                 backends=backends, total=total)
    else:
        encoded = _encode_all(caches.encodings, backends)
        total = sum(e.digest for e in encoded) % _MOD
        section = DynamicSection("backends", _finish(total, len(encoded)), encoded,
                                 backends=backends, total=total)
    caches.remember_backends(section)
    return section


def _plain_section(name: str, payload: Any) -> DynamicSection:
    body = canonical_json(payload)
    return DynamicSection(name, hashlib.sha256(body).hexdigest(), plain=body)


def _routes_sections(config: Configuration, caches: Caches) -> tuple[DynamicSection, ...]:
    payloads = caches.routes.sections(config)
    names = ("routes", *(f"routes_{i}" for i in range(routes_mod.SHARDS)))
    # Encoded route sections by payload object (the shards of the last
    # render): a shard no change touched is the same object, not encoded again.
    last, encoded = caches.route_sections, {}
    sections = []
    for name, payload in zip(names, payloads):
        hit = last.get(id(payload))
        if hit is None or hit[0] is not payload or hit[1].name != name:
            hit = (payload, _plain_section(name, payload))
        encoded[id(payload)] = hit
        sections.append(hit[1])
    caches.route_sections = encoded
    return tuple(sections)


def _dynamic_sections(config: Configuration, caches: Caches) -> tuple[DynamicSection, ...]:
    return (_backends_section(config, caches), _plain_section("certificates", certificates_payload(config)),
            *_routes_sections(config, caches))
