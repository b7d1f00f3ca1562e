"""The sync loop on a manifest folder and a recording data plane (no nginx).

Covers the loop's own rules: the first sync waits for the caches; full syncs
are coalesced over ``route_interval`` and merge bursts; endpoint-only changes take the fast path
(no full translation, only backends change) and give exactly what a full
translation gives; cases the fast path cannot stand for fall back to a full sync.
"""

from __future__ import annotations

import threading
import time
import pytest
import yaml

from platformd.common.filesource import FileSource
from platformd.common.informer import InformerFactory
from platformd.ingress.caches import Caches
from platformd.ingress.controller import Controller, ControllerOptions
from platformd.ingress.dataplane import ApplyResult
from platformd.ingress.decide import needs_reload
from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for


class RecordingPlane:
    """Stands in for ``DataPlane``: records every apply with its time and kind."""

    def __init__(self) -> None:
        self.applies: list[tuple[float, str, object]] = []
        self.running = None
        self._lock = threading.Lock()

    def apply(self, config) -> ApplyResult:
        with self._lock:
            kind = "reload" if needs_reload(self.running, config) else "dynamic"
            self.applies.append((time.monotonic(), kind, config))
            self.running = config
            return ApplyResult(kind)

    def submit(self, config):
        result = self.apply(config)  # recorded in hand-over order, as the data plane sees them
        return lambda superseded=None: result

    def kinds(self) -> list[str]:
        return [kind for _, kind, _ in self.applies]


class CountingMetrics:
    """Counts full syncs (``observe_sync`` is called for those only)."""

    def __init__(self) -> None:
        self.full_syncs = 0

    def observe_sync(self, duration, ok, state) -> None:
        self.full_syncs += 1

    def observe_counts(self, state) -> None:
        pass


class SlowReloadPlane(RecordingPlane):
    """Reloads after the first apply never end on their own (as at 10,000
    Ingresses, where one takes ~25 s): their waiter returns only once told it
    is superseded, or when the test sets ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def submit(self, config):
        first = not self.applies
        result = self.apply(config)

        def waiter(superseded=None):
            if first or result.kind != "reload":
                return result
            while not self.release.wait(0.01):
                if superseded is not None and superseded():
                    return None
            return result
        return waiter


class Loop:
    def __init__(self, folder, plane: RecordingPlane | None = None, caches: Caches | None = None,
                 **options) -> None:
        self.folder = folder
        self.source = FileSource(str(folder), poll_interval=0.02)
        self.plane = plane or RecordingPlane()
        self.metrics = CountingMetrics()
        self.controller = Controller(InformerFactory(self.source), self.plane, ControllerOptions(**options),
                                     metrics=self.metrics, caches=caches)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.controller.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def write(self, name: str, docs: list[dict]) -> None:
        tmp = self.folder / f".{name}.tmp"
        tmp.write_text(yaml.safe_dump_all(docs))
        tmp.replace(self.folder / name)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.controller.factory.stop()
        self.source.close()


@pytest.fixture
def loop(tmp_path):
    made = []

    def make(docs: list[dict], plane: RecordingPlane | None = None, **options) -> Loop:
        (tmp_path / "base.yaml").write_text(yaml.safe_dump_all(docs))
        made.append(Loop(tmp_path, plane, **options))
        return made[-1]

    yield make
    for item in made:
        item.close()


def _cluster(n: int = 3) -> list[dict]:
    docs = [o.ingress_class()]
    for i in range(n):
        docs += [o.service(f"s{i}"), o.ingress(f"i{i}", f"h{i}.example", [("/", f"s{i}", 80)])]
    return docs


def _slice(i: int, address: str) -> dict:
    return o.endpoint_slice(f"s{i}", [address])


def test_first_sync_sees_everything_and_later_endpoint_changes_are_dynamic(loop):
    lp = loop(_cluster() + [_slice(i, f"10.0.0.{i + 1}") for i in range(3)],
              route_interval=0.2, endpoint_interval=0.0)
    wait_for(lambda: lp.plane.applies, 10, message="first sync")
    first = lp.plane.applies[0][2]
    assert len(first.servers) == 3 and sum(len(b.endpoints) for b in first.backends) == 3
    lp.write("moved.yaml", [])  # keep the folder layout simple: slices stay in base.yaml
    docs = _cluster() + [_slice(0, "10.0.0.9"), _slice(1, "10.0.0.2"), _slice(2, "10.0.0.3")]
    before = len(lp.plane.applies)
    lp.write("base.yaml", docs)
    wait_for(lambda: any(e.address == "10.0.0.9" for b in lp.plane.running.backends for e in b.endpoints), 5,
             message="endpoint change applied")
    new = lp.plane.applies[before:]
    assert {kind for _, kind, _ in new} == {"dynamic"}
    # The patched model equals a full translation of the same state.
    lp.controller.sync()
    assert lp.plane.running.backends == new[-1][2].backends


def test_the_controller_builds_with_the_caches_it_is_given(tmp_path):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump_all(_cluster()))
    caches = Caches()
    lp = Loop(tmp_path, caches=caches, route_interval=0.2)
    try:
        wait_for(lambda: lp.plane.applies, 10, message="first sync")
        assert lp.controller.caches is caches and len(caches.translation) > 0
        first = lp.plane.applies[0][2]
        lp.controller.sync()  # nothing changed: every server is the reused object
        assert all(a is b for a, b in zip(lp.plane.running.servers, first.servers))
    finally:
        lp.close()


def test_route_changes_are_coalesced_and_bursts_merge(loop):
    lp = loop(_cluster(1) + [_slice(0, "10.0.0.1")], route_interval=0.5, endpoint_interval=0.0)
    wait_for(lambda: lp.plane.applies, 10, message="first sync")
    start = len(lp.plane.applies)
    for i in range(10):  # ten new Ingresses, one file each, 0.1 s apart
        lp.write(f"burst-{i}.yaml", [o.ingress(f"b{i}", f"b{i}.example", [("/", "s0", 80)])])
        time.sleep(0.1)
    wait_for(lambda: len(lp.plane.running.servers) == 11, 10, message="burst applied")
    applies = lp.plane.applies[start:]
    assert len(applies) <= 4, [k for _, k, _ in applies]
    times = [t for t, _, _ in lp.plane.applies]
    assert all(b - a >= 0.45 for a, b in zip(times, times[1:])), times


def test_a_sync_waiting_for_a_reload_hands_over_to_the_next_one(loop):
    plane = SlowReloadPlane()
    lp = loop(_cluster(1) + [_slice(0, "10.0.0.1")], plane=plane, route_interval=0.1, endpoint_interval=0.0)
    wait_for(lambda: plane.applies, 10, message="first sync")
    lp.write("x.yaml", [o.ingress("x", "x.example", [("/", "s0", 80)])])
    wait_for(lambda: len(plane.running.servers) == 2, 5, message="x handed over")
    # x's reload never ends; a second new Ingress still reaches the data plane.
    lp.write("y.yaml", [o.ingress("y", "y.example", [("/", "s0", 80)])])
    wait_for(lambda: len(plane.running.servers) == 3, 5, message="y handed over while x's reload runs")
    assert not plane.release.is_set()
    plane.release.set()


def test_canary_endpoint_change_falls_back_to_a_full_sync(loop):
    docs = _cluster(1) + [_slice(0, "10.0.0.1"), o.service("canary"), o.endpoint_slice("canary", ["10.0.1.1"]),
                          o.ingress("c", "h0.example", [("/", "canary", 80)],
                                    annotations={"canary": "true", "canary-weight": "50"})]
    lp = loop(docs, route_interval=0.2, endpoint_interval=0.0)
    wait_for(lambda: lp.plane.applies, 10, message="first sync")
    time.sleep(0.5)  # let the start-up syncs settle
    full_syncs = lp.metrics.full_syncs
    lp.write("base.yaml", docs[:-2] + [o.endpoint_slice("canary", ["10.0.1.7"]), docs[-1]])
    wait_for(lambda: any(e.address == "10.0.1.7" for b in lp.plane.running.backends for e in b.endpoints), 5,
             message="canary endpoints applied")
    wait_for(lambda: lp.metrics.full_syncs > full_syncs, 5, message="a full sync after the canary's endpoint change")


def test_plain_endpoint_change_takes_no_full_sync(loop):
    lp = loop(_cluster(2) + [_slice(0, "10.0.0.1"), _slice(1, "10.0.0.2")], route_interval=0.2,
              endpoint_interval=0.0)
    wait_for(lambda: lp.plane.applies, 10, message="first sync")
    time.sleep(0.5)
    full_syncs = lp.metrics.full_syncs
    lp.write("base.yaml", _cluster(2) + [_slice(0, "10.0.0.5"), _slice(1, "10.0.0.2")])
    wait_for(lambda: any(e.address == "10.0.0.5" for b in lp.plane.running.backends for e in b.endpoints), 5,
             message="endpoint change applied")
    time.sleep(0.5)
    assert lp.metrics.full_syncs == full_syncs


class FailingPlane(RecordingPlane):
    """Applies succeed until ``failing`` is set; then every apply fails."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    def apply(self, config) -> ApplyResult:
        if self.failing:
            return ApplyResult("dynamic", RuntimeError("lua refused the section"))
        return super().apply(config)


def test_readiness_says_since_when_the_configuration_is_not_applied(loop):
    from platformd.ingress.server import InternalServer
    from prometheus_client import CollectorRegistry

    plane = FailingPlane()
    lp = loop(_cluster(1) + [_slice(0, "10.0.0.1")], plane=plane, route_interval=0.05, endpoint_interval=0.0,
              retry_interval=0.1)
    wait_for(lambda: lp.controller.ready(), 10, message="ready")
    server = InternalServer("127.0.0.1", 0, lp.controller, CollectorRegistry())
    assert server.status()["config_not_applied"] is None
    plane.failing = True
    lp.write("new.yaml", [o.ingress("n", "n.example", [("/", "s0", 80)])])
    wait_for(lambda: not lp.controller.ready(), 10, message="not ready once applies fail")
    status = server.status()
    assert status["config_not_applied"].startswith("configuration not applied since 20")
    assert "lua refused the section" in status["config_not_applied"]
    assert status["config_not_applied_since"] is not None
    plane.failing = False
    wait_for(lambda: lp.controller.ready(), 10, message="ready again once an apply succeeds")
    assert server.status()["config_not_applied"] is None
