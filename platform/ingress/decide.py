"""Decide how to get from the running configuration to the desired one.

Pure functions on model objects. nginx.conf is rendered from the global
settings alone (``view.py``): servers, locations, backends, certificates
and every per-route setting are data for Lua (``render.dynamic_sections``).
So a reload is needed exactly when a rendered ``GlobalSettings`` field
changes (the ConfigMap's http/events keys, ports, workers;
``view.rendered_settings``) or the routes start or stop using a generated
lane (a directive-only setting, ``lanes.py``); everything else is a push of the sections
whose checksum changed. ``tests/ingress/test_decide.py`` checks
that every change called dynamic leaves the rendered nginx.conf
byte-identical.
"""

from __future__ import annotations

from dataclasses import dataclass

from platformd.ingress import lanes
from platformd.ingress.caches import Caches
from platformd.ingress.model import Configuration
from platformd.ingress.render import DynamicSection, dynamic_sections
from platformd.ingress.view import rendered_settings

__all__ = ["Decision", "decide", "needs_reload"]


@dataclass(frozen=True)
class Decision:
    """What applying ``desired`` takes.

    ``reload``: nginx.conf changes. ``sections``: the dynamic sections whose
    payload differs from the running one (all of them when nothing runs).
    """

    reload: bool
    sections: tuple[DynamicSection, ...]

    @property
    def noop(self) -> bool:
        return not self.reload and not self.sections


def needs_reload(running: Configuration | None, desired: Configuration,
                 lane_index: lanes.LaneIndex | None = None) -> bool:
    """Whether nginx.conf differs: nothing runs yet, a rendered global setting
    changed, or the set of generated lanes the routes use (lanes.py) changed.
    ``lane_index``: the caller's (``Caches.lanes``), or None."""
    if running is None:
        return True
    lane_index = lane_index or lanes.LaneIndex()
    if lanes.used(running, lane_index) != lanes.used(desired, lane_index):
        return True
    if running.passthrough != desired.passthrough:  # a map in nginx.conf (passthrough.py)
        return True
    if running.settings is desired.settings or running.settings == desired.settings:
        return False
    return rendered_settings(running.settings) != rendered_settings(desired.settings)


def decide(running: Configuration | None, desired: Configuration, caches: Caches | None = None) -> Decision:
    """What applying ``desired`` over ``running`` takes; ``caches``: the data plane's (see caches)."""
    wanted = dynamic_sections(desired, caches)
    if running is None:
        return Decision(reload=True, sections=wanted)
    current = {section.name: section.checksum for section in dynamic_sections(running, caches)}
    changed = tuple(section for section in wanted if current.get(section.name) != section.checksum)
    return Decision(reload=needs_reload(running, desired, caches.lanes if caches else None), sections=changed)
