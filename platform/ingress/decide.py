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
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from platformd.ingress.model import Configuration
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
    reload = shape(running) != shape(desired) or _phases(running) != _phases(desired)
    return Decision(reload=reload, sections=changed)


_phases = per_configuration(lua_phases)
