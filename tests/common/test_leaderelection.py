"""Leader election against the fake API server, with the real ``kubernetes`` client."""

from __future__ import annotations

import socket
import threading
import time
from datetime import datetime, timezone

import pytest

from platformd.common import kubeclient
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


def test_arguments_are_checked():
    with pytest.raises(ValueError):
        LeaderElector(None, NS, NAME, "a", lease_duration=1, renew_deadline=1, retry_period=0.1)
    with pytest.raises(ValueError):
        LeaderElector(None, NS, NAME, "a", lease_duration=2, renew_deadline=1, retry_period=1)
    with pytest.raises(ValueError):
        LeaderElector(None, NS, NAME, "", **FAST)


def test_first_candidate_creates_the_lease_and_leads(server, client_for):
    a = Candidate(client_for(), "a", **FAST).start()
    try:
        assert a.started.wait(3)
        assert a.elector.is_leader()
        spec = lease(server)["spec"]
        assert spec["holderIdentity"] == "a"
        assert spec["leaseDurationSeconds"] == 1
        # It keeps renewing.
        first = spec["renewTime"]
        assert wait_for(lambda: lease(server)["spec"]["renewTime"] != first, 2)
        assert a.elector.is_leader()
    finally:
        a.stop()
    assert a.stopped.is_set()
    assert not a.elector.is_leader()


def test_never_two_leaders_and_takeover_after_the_leader_stops_renewing(server, client_for):
    a_api = client_for()
    a = Candidate(a_api, "a", **FAST).start()
    assert a.started.wait(3)
    b = Candidate(client_for(), "b", **FAST).start()
    sampler = Sampler([a, b])
    try:
        # While a renews, b never takes over.
        time.sleep(2.5)
        assert not b.started.is_set()
        assert lease(server)["spec"]["holderIdentity"] == "a"

        # "Crash" a: its requests fail from now on, so it stops renewing
        # without releasing (its thread keeps running and keeps trying).
        a_api.configuration.host = f"http://127.0.0.1:{closed_port()}"
        cut = time.monotonic()
        assert b.started.wait(5)
        takeover = time.monotonic() - cut
        # a must have given up on its own, within the renew deadline.
        assert a.stopped.is_set()
        assert not a.elector.is_leader()
        # b waited for the lease to expire (from when it last saw a renew),
        # and not much longer than one lease plus two jittered retries.
        # (a's last write may predate the cut by one retry period plus a request).
        assert FAST["lease_duration"] - 2 * FAST["retry_period"] <= takeover <= 3.0, takeover
        assert lease(server)["spec"]["holderIdentity"] == "b"
        assert lease(server)["spec"]["leaseTransitions"] == 1
        time.sleep(0.5)
    finally:
        sampler.close()
        a.stop()
        b.stop()
    assert sampler.samples > 500
    assert sampler.overlaps == 0


def test_graceful_release_hands_over_well_before_expiry(server, client_for):
    slow = dict(lease_duration=5.0, renew_deadline=3.0, retry_period=0.15)
    a = Candidate(client_for(), "a", **slow).start()
    assert a.started.wait(3)
    b = Candidate(client_for(), "b", **slow).start()
    sampler = Sampler([a, b])
    try:
        time.sleep(0.5)
        assert not b.started.is_set()
        a.stop()
        released = time.monotonic()
        assert a.stopped.is_set()
        assert b.started.wait(3)
        # One jittered retry of b (at most 0.15 * 2.2 s), not the 5 s lease.
        assert time.monotonic() - released < 1.0
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
    stop_renewing = threading.Event()

    def skewed_leader():
        t = 946684800.0
        while not stop_renewing.is_set():
            t += 0.1
            obj = lease(server)
            obj["spec"]["renewTime"] = _micro(t)
            server.update(obj)
            time.sleep(0.1)

    renewer = threading.Thread(target=skewed_leader, daemon=True)
    renewer.start()
    a = Candidate(client_for(), "a", **FAST).start()
    try:
        assert not a.started.wait(2.0)
        assert a.elector.leader() == "skewed"
        stop_renewing.set()
        renewer.join(2)
        stopped_at = time.monotonic()
        assert a.started.wait(3)
        assert time.monotonic() - stopped_at >= FAST["lease_duration"] - FAST["retry_period"]
    finally:
        stop_renewing.set()
        a.stop()


def test_racing_candidates_elect_exactly_one(server, client_for):
    """Racing writes to one lease: the resourceVersion (409 on a stale one) picks one winner."""
    candidates = [Candidate(client_for(), f"c{i}", **FAST) for i in range(4)]
    sampler = Sampler(candidates)
    try:
        for c in candidates:
            c.start()
        assert wait_for(lambda: any(c.started.is_set() for c in candidates), 3)
        time.sleep(1.0)
        assert sum(c.started.is_set() for c in candidates) == 1
    finally:
        sampler.close()
        for c in candidates:
            c.stop()
    assert sampler.overlaps == 0
