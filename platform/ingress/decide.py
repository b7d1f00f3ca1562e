"""Decide how to get from the running configuration to the desired one.

Pure functions on model objects. The rule: a change needs an nginx reload
only when it changes the *shape* of the configuration, i.e. anything that is
rendered into nginx.conf. Backends (endpoints, algorithm, affinity, canary
traffic shaping) and certificates live in Lua only and are pushed as dynamic
sections. One exception, rendered and so shape: which Lua hooks a location needs (``view.lua_phases``): a backend gaining
  or losing canaries, cookie affinity or EWMA reloads. Plain round-robin
  locations are served by ``balancer_by_lua`` alone, which makes them
  nearly as cheap as a static upstream; the price is that these rarer,
  deliberate changes (a new canary Ingress, an affinity or load-balance
  annotation) take a reload instead of a push. Endpoint changes, canary
  weights and headers, cookie options, hash keys and round robin <->
  consistent hashing stay dynamic. ``tests/ingress/test_decide.py`` checks that every change this module
calls dynamic really leaves the rendered nginx.conf byte-identical.

Cost: an endpoint change gives a configuration that shares every server and
all but one backend *object* with the running one, so the comparisons first
go by identity and look deeper only at objects that differ; deciding then
costs a few identity scans plus work in proportion to the change, not a
comparison of 10,000 servers.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, fields, replace

from platformd.ingress.model import Backend, Configuration, Server
from platformd.ingress.render import DynamicSection, dynamic_sections, per_configuration
from platformd.ingress.view import lua_phases

__all__ = ["Decision", "decide", "shape"]


@dataclass(frozen=True)
class Decision:
    """What applying ``desired`` takes.

    ``reload``: nginx.conf changes. ``sections``: the dynamic sections whose
    payload differs from the running one (all of them when nothing runs).
    After a reload every section is pushed again regardless (see dataplane).
    """

    reload: bool
    sections: tuple[DynamicSection, ...]

    @property
    def noop(self) -> bool:
        return not self.reload and not self.sections


@per_configuration
def shape(config: Configuration) -> Configuration:
    """``config`` without the parts nginx.conf does not depend on."""
    return replace(
        config,
        backends=(),
        certificates=(),
        default_certificate=None,
        servers=tuple(replace(s, tls_certificate=None) for s in config.servers),
    )


def decide(running: Configuration | None, desired: Configuration) -> Decision:
    wanted = dynamic_sections(desired)
    if running is None:
        return Decision(reload=True, sections=wanted)
    current = {section.name: section.checksum for section in dynamic_sections(running)}
    changed = tuple(section for section in wanted if current.get(section.name) != section.checksum)
    reload = not _same_shape(running, desired) or not _same_phases(running, desired)
    return Decision(reload=reload, sections=changed)


_phases = per_configuration(lua_phases)
_DYNAMIC_FIELDS = frozenset({"backends", "certificates", "default_certificate"})


def _same_shape(running: Configuration, desired: Configuration) -> bool:
    """``shape(running) == shape(desired)``, by identity where objects are shared."""
    for f in fields(Configuration):
        if f.name in _DYNAMIC_FIELDS:
            continue
        a, b = getattr(running, f.name), getattr(desired, f.name)
        if a is b:
            continue
        if f.name != "servers":
            if a != b:
                return False
        elif len(a) != len(b) or not all(_server_shape(a[i]) == _server_shape(b[i]) for i in _differing(a, b)):
            return False
    return True


def _server_shape(server: Server) -> Server:
    return replace(server, tls_certificate=None)


def _same_phases(running: Configuration, desired: Configuration) -> bool:
    """``lua_phases(running) == lua_phases(desired)`` without computing them when
    the locations are shared and no backend changed what the phases read
    (its name, algorithm and canaries)."""
    # Element by element: a Configuration re-sorts its tuples into new ones.
    locations_shared = (_same_objects(running.servers, desired.servers)
                        and _same_objects(running.default_server_locations, desired.default_server_locations)
                        and running.default_backend == desired.default_backend)
    if locations_shared and _phase_inputs_equal(running.backends, desired.backends):
        return True
    return _phases(running) == _phases(desired)


def _differing(a: tuple, b: tuple) -> list[int]:
    """Positions where two equally long tuples hold different objects.

    map/compress run in C: scanning 20,000 backends this way costs well
    under a millisecond, a generator expression ten times more.
    """
    return list(itertools.compress(itertools.count(), map(operator.is_not, a, b)))


def _same_objects(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


def _phase_inputs_equal(a: tuple[Backend, ...], b: tuple[Backend, ...]) -> bool:
    if len(a) != len(b):
        return False
    return all(_phase_input(a[i]) == _phase_input(b[i]) for i in _differing(a, b))


def _phase_input(backend: Backend) -> tuple:
    """What of a backend ``lua_phases`` reads (its algorithm's inputs, a superset)."""
    affinity = backend.session_affinity.mode if backend.session_affinity is not None else None
    return (backend.name, backend.upstream_hash_by != "", affinity, backend.load_balance,
            backend.alternative_backends)
