"""The controller's own metrics (the reload metrics live in ``dataplane.Metrics``).

Names follow ingress-nginx where it has the metric, so its dashboards work:
``nginx_ingress_controller_leader_election_status``. Where it has none, the
same prefix and Prometheus conventions: ``..._sync_duration_seconds``
(histogram of full syncs), ``..._syncs`` (counter by result), and gauges
for what the last applied configuration holds (``..._ingresses``,
``..._backends``, ``..._endpoints``).

``..._problems{kind, reason}`` counts the objects refused right now, by
kind and reason, read from the controller at scrape time so it always
agrees with ``/status``. ingress-nginx's ``..._errors`` keeps its meaning
(failed reloads, in ``dataplane.Metrics``): a refused object is not a
reload error.
"""

from __future__ import annotations

from collections import Counter as _Tally
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

PREFIX = "nginx_ingress_controller_"

# Full syncs take milliseconds for a handful of Ingresses and seconds for
# ten thousand; the buckets span both.
_SYNC_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry, controller_class: str = "") -> None:
        self.registry = registry
        self.sync_duration = Histogram(PREFIX + "sync_duration_seconds", "Duration of full syncs (translate and apply)",
                                       buckets=_SYNC_BUCKETS, registry=registry)
        self.syncs = Counter(PREFIX + "syncs", "Full syncs by result", ["result"], registry=registry)
        self.ingresses = Gauge(PREFIX + "ingresses", "Ingresses served by this controller", registry=registry)
        self.backends = Gauge(PREFIX + "backends", "Backends in the running configuration", registry=registry)
        self.endpoints = Gauge(PREFIX + "endpoints", "Endpoints over all backends in the running configuration",
                               registry=registry)
        self.leader = Gauge(PREFIX + "leader_election_status", "Whether this controller is the leader",
                            ["name"], registry=registry)
        self._election = ""

    def observe_sync(self, duration: float, ok: bool, state) -> None:
        self.sync_duration.observe(duration)
        self.syncs.labels(result="success" if ok else "failure").inc()
        if ok:
            self.observe_counts(state)

    def observe_counts(self, state) -> None:
        self.ingresses.set(state.ingresses)
        self.backends.set(state.backends)
        self.endpoints.set(state.endpoints)

    def watch_problems(self, problems: Callable[[], Iterable]) -> None:
        """Export ``problems()`` (objects with ``kind`` and ``reason``) at every scrape."""
        self.registry.register(_ProblemsCollector(problems))

    def set_leader(self, election: str, leading: bool) -> None:
        self.leader.labels(name=election).set(1 if leading else 0)


class _ProblemsCollector:
    """``nginx_ingress_controller_problems``: current problems by kind and reason."""

    def __init__(self, problems: Callable[[], Iterable]) -> None:
        self._problems = problems

    def describe(self):
        return [GaugeMetricFamily(PREFIX + "problems", _PROBLEMS_HELP, labels=("kind", "reason"))]

    def collect(self):
        family = GaugeMetricFamily(PREFIX + "problems", _PROBLEMS_HELP, labels=("kind", "reason"))
        for (kind, reason), count in sorted(_Tally((p.kind, p.reason) for p in self._problems()).items()):
            family.add_metric((kind, reason), count)
        yield family


_PROBLEMS_HELP = "Objects refused right now (not served as written), by kind and reason"
