"""Writes the status of our GatewayClasses, Gateways and routes, on the leader only.

``GatewayStatusWriter.sync()`` takes the latest ``GatewayTranslation`` (the
controller hands it over whole), renders each object's status body against
what the informer store shows (``gateway_status.render_*`` keeps transition
times of unchanged conditions, so an unchanged status renders equal) and
PATCHes ``/status`` only where the body differs. Like ``status.StatusWriter``
for Ingresses it does nothing unless ``is_leader()``; API errors are logged,
counted and make ``sync`` raise, so its ``BoundedFrequencyRunner`` retries.

Rules:

* an object whose ``metadata.generation`` moved past the one translated is
  skipped: a newer translation is on its way and will carry the right
  ``observedGeneration``;
* a route's patch carries its ``resourceVersion``: the parents list is
  shared with other controllers and a merge patch replaces it whole, so a
  concurrent write makes ours fail (409) and retry on fresh data instead of
  erasing theirs;
* a route that is not ours (any more) but shows a parent entry with our
  controllerName gets our entries removed from ``status.parents`` (also
  after a restart: the stores are scanned, not a memory of past writes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from platformd.common import errors, resources
from platformd.common.resources import Resource
from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_translate import GatewayTranslation
from platformd.ingress.status import patch_status

__all__ = ["GatewayStatusWriter"]

log = logging.getLogger(__name__)


def _rfc3339(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def _generation(obj: Mapping) -> int:
    return int((obj.get("metadata") or {}).get("generation") or 0)


class GatewayStatusWriter:
    """See the module docstring. ``get(resource, key)`` and ``keys(resource)``
    read the informer stores; ``translation()`` returns the latest
    translation (or None)."""

    def __init__(self, api_client, controller_name: str, *, is_leader: Callable[[], bool],
                 translation: Callable[[], GatewayTranslation | None],
                 get: Callable[[Resource, str], dict | None], keys: Callable[[Resource], list[str]],
                 wall_clock: Callable[[], float] = time.time) -> None:
        self._api = api_client
        self._controller_name = controller_name
        self._is_leader = is_leader
        self._translation = translation
        self._get = get
        self._keys = keys
        self._wall_clock = wall_clock
        self.writes = 0  # successful PATCHes, for tests and metrics
        # (plural, route key) -> (RouteStatus, stored object) the last sync found showing it
        self._shown: dict[tuple[str, str], tuple] = {}

    def sync(self) -> None:
        if not self._is_leader():
            return
        translation = self._translation()
        if translation is None:
            return
        now = _rfc3339(self._wall_clock())
        failures = 0
        for key, status in sorted(translation.classes.items()):
            failures += not self._write(resources.GATEWAY_CLASSES, key, status.generation,
                                        lambda obj, s=status: st.render_class(s, obj, now))
        for key, status in sorted(translation.gateways.items()):
            failures += not self._write(resources.GATEWAYS, key, status.generation,
                                        lambda obj, s=status: st.render_gateway(s, obj, now))
        shown: dict[tuple[str, str], tuple] = {}
        for resource, statuses in ((resources.HTTP_ROUTES, translation.http_routes),
                                   (resources.GRPC_ROUTES, translation.grpc_routes)):
            for key, status in sorted(statuses.items()):
                # The very same status object against the very same stored object
                # that already showed it renders equal again: skipped (at 10,000
                # routes a sync rendered them all, ~90 ms beside the data plane push).
                last = self._shown.get((resource.plural, key))
                obj = self._get(resource, key)
                if last is not None and last[0] is status and last[1] is obj:
                    shown[(resource.plural, key)] = last
                    continue
                failures += not self._write(resource, key, status.generation,
                                            lambda obj, s=status: st.render_route(s, obj, self._controller_name, now),
                                            precondition=True, shown=(shown, (resource.plural, key), status))
            for key in sorted(set(self._keys(resource)) - set(statuses)):
                failures += not self._write(resource, key, None, lambda obj: st.render_route(
                    st.RouteStatus(_generation(obj), ()), obj, self._controller_name, now), precondition=True)
        self._shown = shown
        if failures:
            raise errors.ApiError(f"{failures} Gateway API status update(s) failed")

    def _write(self, resource: Resource, key: str, generation: int | None,
               render: Callable[[Mapping], dict], precondition: bool = False,
               shown: tuple[dict, tuple[str, str], object] | None = None) -> bool:
        obj = self._get(resource, key)
        if obj is None:
            return True
        if generation is not None and _generation(obj) != generation:
            return True  # translated from an older spec: the next translation writes it
        current = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
        body = render(obj)
        if body == current:
            if shown is not None:  # (memo, its key, the status): obj shows it
                shown[0][shown[1]] = (shown[2], obj)
            return True
        patch: dict = {"status": {**{k: None for k in current if k not in body}, **body}}
        if precondition:
            patch["metadata"] = {"resourceVersion": (obj.get("metadata") or {}).get("resourceVersion")}
        namespace, _, name = key.rpartition("/")
        path = resource.object_path(namespace or None, name) + "/status"
        if not patch_status(self._api, path, patch, f"{resource.kind} {key}"):
            return False
        self.writes += 1
        log.info("%s %s status written", resource.kind, key)
        return True
