"""Leader election against the fake API server, with the real ``kubernetes`` client."""

from __future__ import annotations

import socket
import threading
import time
from datetime import datetime, timezone

import pytest

from platformd.common import kubeclient
from platformd.common.clock import FakeClock
from platformd.common.leaderelection import LeaderElector
from tests.fakeapi import FakeApiServer
from tests.helpers.waiting import wait_for

NS, NAME = "kube-system", "platform-ingress"
# Short but realistic proportions: renew deadline well under the lease, and
# retry well under the renew deadline.
FAST = dict(lease_duration=1.0, renew_deadline=0.6, retry_period=0.15)


@pytest.fixture
def server():
    srv = FakeApiServer()
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def client_for(server, tmp_path):
    path = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(path))

    def make():
        return kubeclient.load(str(path))
    return make


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Candidate:
    def __init__(self, api, identity, **kw):
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.elector = LeaderElector(api, NS, NAME, identity,
                                     on_started_leading=self.started.set,
                                     on_stopped_leading=self.stopped.set, **kw)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.elector.run, args=(self.stop_event,),
                                       daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self, timeout=5):
        self.stop_event.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive()


class Sampler:
    """Samples ``is_leader`` of every candidate continuously; records overlaps."""

    def __init__(self, candidates):
        self.candidates = candidates
        self.overlaps = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            leaders = [c for c in self.candidates if c.elector.is_leader()]
            self.samples += 1
            if len(leaders) > 1:
                self.overlaps += 1
            time.sleep(0.001)

    def close(self):
        self._stop.set()
        self._thread.join(2)


def lease(server):
    return server.get("Lease", NS, NAME)


class FakeTime:
    """Moves a shared ``FakeClock`` on in small steps. Before each step it waits
    (real time) until every running candidate is blocked on the clock until a
    moment still ahead, so all work due at the current fake time is done:
    timing is measured in fake seconds, with no sleeps and no real-time
    margins to tune."""

    STEP = 0.05

    def __init__(self, candidates=()):
        self.clock = FakeClock()
        self.candidates = list(candidates)

    def _idle(self) -> bool:
        now = self.clock.monotonic()
        running = sum(c.thread.is_alive() for c in self.candidates)
        return sum(d > now for d in self.clock.pending_deadlines()) >= running

    def settle(self) -> None:
        wait_for(self._idle, timeout=10, message="candidates waiting on the clock")

    def run(self, seconds: float, each=None) -> None:
        """Let ``seconds`` of fake time pass (``each()`` after every step)."""
        end = self.clock.monotonic() + seconds
        while self.clock.monotonic() < end - 1e-9:
            self.settle()
            self.clock.advance(min(self.STEP, end - self.clock.monotonic()))
            if each is not None:
                each()
        self.settle()

    def until(self, condition, limit: float) -> float:
        """Fake seconds until ``condition()`` holds; fails after ``limit``."""
        start = self.clock.monotonic()
        while True:
            self.settle()
            if condition():
                return self.clock.monotonic() - start
            assert self.clock.monotonic() - start < limit, f"not within {limit} fake seconds"
            self.clock.advance(self.STEP)


def test_arguments_are_checked():
    with pytest.raises(ValueError):
        LeaderElector(None, NS, NAME, "a", lease_duration=1, renew_deadline=1, retry_period=0.1)
    with pytest.raises(ValueError):
        LeaderElector(None, NS, NAME, "a", lease_duration=2, renew_deadline=1, retry_period=1)
    with pytest.raises(ValueError):
        LeaderElector(None, NS, NAME, "", **FAST)


def test_first_candidate_creates_the_lease_and_leads(server, client_for):
    time = FakeTime()
    a = Candidate(client_for(), "a", clock=time.clock, **FAST).start()
    time.candidates.append(a)
    try:
        time.until(a.started.is_set, 1)
        assert a.elector.is_leader()
        spec = lease(server)["spec"]
        assert spec["holderIdentity"] == "a"
        assert spec["leaseDurationSeconds"] == 1
        # It keeps renewing, every retry period.
        first = spec["renewTime"]
        assert time.until(lambda: lease(server)["spec"]["renewTime"] != first, 1) <= FAST["retry_period"] + FakeTime.STEP
        assert a.elector.is_leader()
    finally:
        a.stop()
    assert a.stopped.is_set()
    assert not a.elector.is_leader()


def test_never_two_leaders_and_takeover_after_the_leader_stops_renewing(server, client_for):
    time = FakeTime()
    a_api = client_for()
    a = Candidate(a_api, "a", clock=time.clock, **FAST).start()
    time.candidates.append(a)
    time.until(a.started.is_set, 1)
    b = Candidate(client_for(), "b", clock=time.clock, **FAST).start()
    time.candidates.append(b)
    sampler = Sampler([a, b])
    try:
        # While a renews, b never takes over.
        time.run(2.5)
        assert not b.started.is_set()
        assert lease(server)["spec"]["holderIdentity"] == "a"

        # "Crash" a: its requests fail from now on, so it stops renewing
        # without releasing (its thread keeps running and keeps trying).
        a_api.configuration.host = f"http://127.0.0.1:{closed_port()}"
        takeover = time.until(b.started.is_set, 5)
        # a must have given up on its own, within the renew deadline.
        assert a.stopped.is_set()
        assert not a.elector.is_leader()
        # b waited for the lease to expire (from when it last saw a renew),
        # and not much longer than one lease plus two jittered retries.
        # (a's last write may predate the cut by one retry period plus a request).
        assert FAST["lease_duration"] - 2 * FAST["retry_period"] <= takeover <= 3.0, takeover
        assert lease(server)["spec"]["holderIdentity"] == "b"
        assert lease(server)["spec"]["leaseTransitions"] == 1
        time.run(0.5)
    finally:
        sampler.close()
        a.stop()
        b.stop()
    assert sampler.samples > 100
    assert sampler.overlaps == 0


def test_graceful_release_hands_over_well_before_expiry(server, client_for):
    slow = dict(lease_duration=5.0, renew_deadline=3.0, retry_period=0.15)
    time = FakeTime()
    a = Candidate(client_for(), "a", clock=time.clock, **slow).start()
    time.candidates.append(a)
    time.until(a.started.is_set, 1)
    b = Candidate(client_for(), "b", clock=time.clock, **slow).start()
    time.candidates.append(b)
    sampler = Sampler([a, b])
    try:
        time.run(0.5)
        assert not b.started.is_set()
        a.stop()
        assert a.stopped.is_set()
        # One jittered retry of b (at most 0.15 * 2.2 s), not the 5 s lease.
        assert time.until(b.started.is_set, 5) <= 0.15 * 2.2 + FakeTime.STEP
        spec = lease(server)["spec"]
        assert spec["holderIdentity"] == "b"
    finally:
        sampler.close()
        a.stop()
        b.stop()
    assert sampler.overlaps == 0


def test_release_clears_the_holder(server, client_for):
    a = Candidate(client_for(), "a", **FAST).start()
    assert a.started.wait(3)
    a.stop()
    spec = lease(server)["spec"]
    assert not spec.get("holderIdentity")
    assert spec["leaseDurationSeconds"] == 1


def test_no_release_when_disabled(server, client_for):
    a = Candidate(client_for(), "a", release_on_cancel=False, **FAST).start()
    assert a.started.wait(3)
    a.stop()
    assert a.stopped.is_set()
    assert lease(server)["spec"]["holderIdentity"] == "a"


def _micro(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_expiry_uses_local_observation_time_not_remote_timestamps(server, client_for):
    """A live leader whose clock is years behind must not lose its lease."""
    server.create({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {"holderIdentity": "skewed", "leaseDurationSeconds": 1,
                 "acquireTime": _micro(946684800.0), "renewTime": _micro(946684800.0),
                 "leaseTransitions": 0},
    })
    skewed_now = [946684800.0]

    def skewed_leader_renews():
        # Every fake step (0.05 s) the skewed leader renews, with its own clock.
        skewed_now[0] += FakeTime.STEP
        obj = lease(server)
        obj["spec"]["renewTime"] = _micro(skewed_now[0])
        server.update(obj)

    time = FakeTime()
    a = Candidate(client_for(), "a", clock=time.clock, **FAST).start()
    time.candidates.append(a)
    try:
        time.run(2.0, each=skewed_leader_renews)
        assert not a.started.is_set()
        assert a.elector.leader() == "skewed"
        # The skewed leader stops renewing: a takes over once a lease has passed
        # since it last saw a change (less the retry period it may observe late).
        taken = time.until(a.started.is_set, 5)
        assert taken >= FAST["lease_duration"] - FAST["retry_period"]
    finally:
        a.stop()


def test_racing_candidates_elect_exactly_one(server, client_for):
    """Racing writes to one lease: the resourceVersion (409 on a stale one) picks one winner."""
    time = FakeTime()
    candidates = [Candidate(client_for(), f"c{i}", clock=time.clock, **FAST) for i in range(4)]
    time.candidates.extend(candidates)
    sampler = Sampler(candidates)
    try:
        for c in candidates:
            c.start()
        time.until(lambda: any(c.started.is_set() for c in candidates), 1)
        time.run(1.0)
        assert sum(c.started.is_set() for c in candidates) == 1
    finally:
        sampler.close()
        for c in candidates:
            c.stop()
    assert sampler.overlaps == 0
