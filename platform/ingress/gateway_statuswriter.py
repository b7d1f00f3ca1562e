"""Writes the status of our GatewayClasses, Gateways and routes, on the leader only.

``GatewayStatusWriter.sync()`` takes the latest ``GatewayTranslation`` (the
controller hands it over whole), renders each object's status body against
what the informer store shows (``gateway_status.render_*`` keeps transition
times of unchanged conditions, so an unchanged status renders equal) and
PATCHes ``/status`` only where the body differs. Like ``status.StatusWriter``
for Ingresses it does nothing unless ``is_leader()``; API errors are logged,
counted and make ``sync`` raise, so its ``BoundedFrequencyRunner`` retries.

Work in proportion to what changed. At 10,000 routes a pass over every route
took 35-90 ms of held GIL about once a second, while route changes waited
for it (their p99 from the API write went past 100 ms). So the controller
hands over, with each translation it publishes, which routes it translated
again (``changed``; None: a full build, all of them), and a pass looks at
those routes only. GatewayClasses and Gateways are few and looked at on every
pass (a route change moves a listener's ``attachedRoutes``). A pass looks at
every route (the stores and the translation) when it cannot know better: the
first one, a periodic resync (``sync`` with nothing handed over since the last
pass: it repairs a status someone else overwrote), after a full build and on
becoming leader again (what the other leader left is read from the stores).

A long pass (the first one writes every status: about 10 s at 10,000 routes)
never holds the GIL for long: every ``CHUNK`` routes looked at or
``WRITES_PER_CHUNK`` writes it sleeps ``PAUSE`` (so a route change's sync and
apply run in between), ``HANDOVER_PAUSE`` when a translation was handed over
meanwhile (that route change's apply is under way right then), and it stops
and leaves the rest for the next pass (still ``changed``) when leadership is
lost. The runner's rate limits (a pass at most once a second, a retry after
5 s) are unchanged.

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
  after a restart: a full pass scans the stores, not a memory of past writes).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from platformd.common import errors, resources
from platformd.common.resources import Resource
from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_translate import GatewayTranslation
from platformd.ingress.status import patch_status

__all__ = ["GatewayStatusWriter"]

log = logging.getLogger(__name__)

# A chunk of 200 routes without writes renders in about 2 ms (~9 us a route);
# 20 writes (a PATCH each, ~1 ms of which much holds the GIL) about as long.
CHUNK = 200
WRITES_PER_CHUNK = 20
PAUSE = 0.002  # seconds between chunks: longer than a gateway sync (3-6 ms) would slow a big pass for nothing
HANDOVER_PAUSE = 0.05  # after a hand-over mid-pass: a route change's sync -> apply -> nginx takes ~40 ms

_ROUTES = (resources.HTTP_ROUTES, resources.GRPC_ROUTES)
_BY_KIND = {resource.kind: resource for resource in _ROUTES}


def _rfc3339(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def _generation(obj: Mapping) -> int:
    return int((obj.get("metadata") or {}).get("generation") or 0)


class _Pass:
    """One pass's counters: failures, and what it has done since its last pause."""

    __slots__ = ("failures", "looked", "written", "handovers")

    def __init__(self, handovers: int) -> None:
        self.failures = self.looked = self.written = 0
        self.handovers = handovers  # the writer's count of hand-overs at the last pause


class GatewayStatusWriter:
    """See the module docstring. ``get(resource, key)`` and ``keys(resource)``
    read the informer stores; ``translation()`` returns the latest
    translation (or None); ``sleep(seconds)`` is the pause between chunks."""

    def __init__(self, api_client, controller_name: str, *, is_leader: Callable[[], bool],
                 translation: Callable[[], GatewayTranslation | None],
                 get: Callable[[Resource, str], dict | None], keys: Callable[[Resource], list[str]],
                 wall_clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._api = api_client
        self._controller_name = controller_name
        self._is_leader = is_leader
        self._translation = translation
        self._get = get
        self._keys = keys
        self._wall_clock = wall_clock
        self._sleep = sleep
        self.writes = 0  # successful PATCHes, for tests and metrics
        self.rendered = 0  # route statuses rendered (compared with the store), for tests and the bench
        # (kind, route key) -> (RouteStatus, stored object) the last look found showing it
        self._shown: dict[tuple[str, str], tuple] = {}
        # Handed over by the controller's thread, taken by a pass (under _lock):
        # the routes (kind, key) to look at, None: every route; and whether
        # anything was handed over since the last pass took it.
        self._lock = threading.Lock()
        self._routes: set[tuple[str, str]] | None = None
        self._handed = False
        self._handovers = 0  # calls of changed(), ever

    def changed(self, routes: Iterable[tuple[str, str]] | None) -> None:
        """The controller published a translation in which the statuses of
        ``routes`` ((kind, "ns/name")) may differ (None: any route's may).
        Call it before waking the runner; it never blocks for long."""
        with self._lock:
            self._mark(routes)
            self._handovers += 1

    def _take(self) -> set[tuple[str, str]] | None:
        with self._lock:
            routes = self._routes if self._handed else None  # nothing handed over: a resync looks at all
            self._routes, self._handed = set(), False
        return routes

    def _give_back(self, routes: Iterable[tuple[str, str]] | None) -> None:
        """Leave ``routes`` (None: all) for the next pass, as if handed over."""
        with self._lock:
            self._mark(routes)

    def _mark(self, routes: Iterable[tuple[str, str]] | None) -> None:
        """Add ``routes`` (None: all) to what the next pass looks at; ``_lock`` held."""
        if routes is None:
            self._routes = None
        elif self._routes is not None:
            self._routes.update(routes)
        self._handed = True

    def sync(self) -> None:
        if not self._is_leader():
            self._give_back(None)  # whoever leads meanwhile writes; on our turn, read all again
            return
        routes = self._take()
        translation = self._translation()
        if translation is None:
            self._give_back(routes)
            return
        now = _rfc3339(self._wall_clock())
        done = _Pass(self._handovers)
        for key, status in sorted(translation.classes.items()):
            done.failures += not self._write(resources.GATEWAY_CLASSES, key, status.generation,
                                             lambda obj, s=status: st.render_class(s, obj, now))
        for key, status in sorted(translation.gateways.items()):
            done.failures += not self._write(resources.GATEWAYS, key, status.generation,
                                             lambda obj, s=status: st.render_gateway(s, obj, now))
        names = self._every_route(translation) if routes is None else sorted(routes)
        if routes is None:  # forget routes gone from the stores and the translation
            every = set(names)
            self._shown = {name: shown for name, shown in self._shown.items() if name in every}
        for at, (kind, key) in enumerate(names):
            if done.looked >= CHUNK or done.written >= WRITES_PER_CHUNK:
                if not self._pause(done):
                    self._give_back(names[at:])  # leadership lost: the rest waits for our next turn
                    break
            done.looked += 1
            ok = self._route(translation, kind, key, now, done)
            if not ok:
                done.failures += 1
                self._give_back([(kind, key)])  # the retry looks at it again
        if done.failures:
            raise errors.ApiError(f"{done.failures} Gateway API status update(s) failed")

    def _every_route(self, translation: GatewayTranslation) -> list[tuple[str, str]]:
        names = set()
        for resource, statuses in ((resources.HTTP_ROUTES, translation.http_routes),
                                   (resources.GRPC_ROUTES, translation.grpc_routes)):
            names.update((resource.kind, key) for key in (*statuses, *self._keys(resource)))
        return sorted(names)

    def _pause(self, done: _Pass) -> bool:
        """Let other threads run between chunks; False: no longer the leader."""
        handovers = self._handovers
        self._sleep(HANDOVER_PAUSE if handovers != done.handovers else PAUSE)
        done.looked = done.written = 0
        done.handovers = handovers
        return self._is_leader()

    def _route(self, translation: GatewayTranslation, kind: str, key: str, now: str, done: _Pass) -> bool:
        resource = _BY_KIND[kind]
        statuses = translation.http_routes if resource is resources.HTTP_ROUTES else translation.grpc_routes
        status = statuses.get(key)
        obj = self._get(resource, key)
        if obj is None:
            self._shown.pop((kind, key), None)
            return True
        if status is None:  # not ours (any more): drop our parent entries, if it shows any
            generation = None
            status = st.RouteStatus(_generation(obj), ())
        else:
            generation = status.generation
            # The very same status against the very same stored object that
            # already showed it renders equal again: skipped.
            last = self._shown.get((kind, key))
            if last is not None and last[0] is status and last[1] is obj:
                return True
        self.rendered += 1
        writes = self.writes
        ok = self._write(resource, key, generation,
                         lambda o: st.render_route(status, o, self._controller_name, now), precondition=True,
                         obj=obj)
        done.written += self.writes - writes
        if ok and generation is not None and self.writes == writes and _generation(obj) == generation:
            self._shown[(kind, key)] = (status, obj)  # it shows this status already
        else:
            self._shown.pop((kind, key), None)
        return ok

    def _write(self, resource: Resource, key: str, generation: int | None,
               render: Callable[[Mapping], dict], precondition: bool = False, obj: Mapping | None = None) -> bool:
        obj = self._get(resource, key) if obj is None else obj
        if obj is None:
            return True
        if generation is not None and _generation(obj) != generation:
            return True  # translated from an older spec: the next translation writes it
        current = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
        body = render(obj)
        if body == current:
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
