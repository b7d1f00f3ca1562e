"""Leader election on a ``coordination.k8s.io/v1`` Lease (after client-go's).

Several replicas run an elector with the same Lease and different identities;
at most one of them considers itself leader at any time, provided their clocks
run at roughly the same rate (their wall clocks may disagree freely).

How it works: the leader rewrites the Lease's ``renewTime`` every
``retry_period``. A candidate never trusts the remote timestamps; it notes
*when it saw* the Lease record last change (its own monotonic clock) and
considers the Lease free once ``leaseDurationSeconds`` have passed since then
without a change, or when ``holderIdentity`` is empty (a graceful release).
Every write carries the ``resourceVersion`` it was based on, so of two
candidates writing at once exactly one wins and the other gets 409 and tries
again later.

The leader stops considering itself leader ``renew_deadline`` after the start
of its last successful renewal, even while a renewal request is still
hanging. A candidate can take over no sooner than ``lease_duration`` after it
saw that renewal, which happened after it started, so the two never overlap
as long as ``renew_deadline < lease_duration`` (checked) leaves a margin for
clock rate differences.

Numbers (client-go's defaults, also ours): lease 15 s, renew deadline 10 s,
retry 2 s. Failover after a crash takes at most about 15 s + 2 s; the leader
gets about five renewal attempts before giving up, and gives up 5 s before
anyone else may take over.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from platformd.common import errors, kubeclient
from platformd.common.clock import REAL_CLOCK, Clock
from platformd.common.runner import wake_on

log = logging.getLogger(__name__)

# client-go's JitterFactor for candidates: the wait between acquire attempts is
# uniform in [retry, retry * 2.2], so candidates that start together spread out.
_ACQUIRE_JITTER = 1.2


class LeaderElector:
    """Competes for the Lease ``namespace/name`` as ``identity`` while ``run`` runs.

    Callbacks are notifications, called from ``run``'s thread; they must
    return quickly (start or signal your own worker). ``on_started_leading``
    is called after the Lease is ours; ``on_stopped_leading`` once after each
    ``on_started_leading``, when leadership is lost or ``run`` stops. Use
    ``is_leader()`` at the point of doing leader-only work: it turns False on
    time even if the callback is late (a renewal request still hanging).

    After losing the Lease the elector becomes a candidate again. When ``run``
    stops while leading, it calls ``on_stopped_leading`` first and then, with
    ``release_on_cancel``, releases the Lease (empty holder, 1 s duration) so
    a successor takes over at once instead of after ``lease_duration``.
    """

    def __init__(self, api_client: kubeclient.Client, namespace: str, name: str, identity: str,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0,
                 retry_period: float = 2.0,
                 on_started_leading: Callable[[], None] | None = None,
                 on_stopped_leading: Callable[[], None] | None = None,
                 clock: Clock = REAL_CLOCK, release_on_cancel: bool = True,
                 rng: random.Random | None = None) -> None:
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        if lease_duration <= renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if renew_deadline <= _ACQUIRE_JITTER * retry_period:
            raise ValueError("renew_deadline must be greater than retry_period * 1.2")
        if retry_period <= 0:
            raise ValueError("retry_period must be > 0")
        self.identity = identity
        self.namespace = namespace
        self.name = name
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.release_on_cancel = release_on_cancel
        self._api = api_client
        self._path = (f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock = clock
        self._rng = rng or random.Random()
        # A request may not outlive half the renew deadline, so a hung call
        # leaves room for at least one more attempt before giving up.
        self._request_timeout = renew_deadline / 2
        self._lock = threading.Lock()
        self._wake = threading.Event()
        # Under ``_lock``:
        self._leading = False
        # Monotonic time after which we no longer lead unless renewed again.
        self._leading_until = 0.0
        # The Lease spec we last saw, when we first saw it (monotonic), and the
        # resourceVersion of the object it came from.
        self._observed: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._observed_rv: str | None = None

    # -- public ----------------------------------------------------------------

    def is_leader(self) -> bool:
        """True while we hold the Lease and our last renewal is recent enough."""
        with self._lock:
            return self._leading and self._clock.monotonic() < self._leading_until

    def leader(self) -> str | None:
        """The holder we last observed (may be stale by up to ``retry_period``)."""
        with self._lock:
            return (self._observed or {}).get("holderIdentity") or None

    def run(self, stop_event: threading.Event) -> None:
        """Acquire, renew, and re-acquire after a loss, until ``stop_event`` is set."""
        wake_on(stop_event, self._wake, f"leaderelection-{self.name}")
        while not stop_event.is_set():
            if not self._acquire(stop_event):
                break
            self._call(self._on_started, "on_started_leading")
            log.info("leader election %s/%s: %s is now the leader",
                     self.namespace, self.name, self.identity)
            self._renew(stop_event)
            with self._lock:
                self._leading = False
            log.info("leader election %s/%s: %s stopped leading",
                     self.namespace, self.name, self.identity)
            self._call(self._on_stopped, "on_stopped_leading")
            if stop_event.is_set() and self.release_on_cancel:
                self._release()

    # -- loops -------------------------------------------------------------------

    def _acquire(self, stop_event: threading.Event) -> bool:
        """Try until the Lease is ours (True) or we are stopped (False)."""
        while not stop_event.is_set():
            if self._try_acquire_or_renew():
                return True
            delay = self.retry_period * (1.0 + self._rng.random() * _ACQUIRE_JITTER)
            self._sleep(stop_event, delay)
        return False

    def _renew(self, stop_event: threading.Event) -> None:
        """Renew every ``retry_period`` until we fail for ``renew_deadline`` or are stopped."""
        while not stop_event.is_set():
            self._sleep(stop_event, self.retry_period)
            if stop_event.is_set():
                return
            if self._try_acquire_or_renew():
                continue
            with self._lock:
                expired = self._clock.monotonic() >= self._leading_until
                holder = (self._observed or {}).get("holderIdentity")
            if holder and holder != self.identity:
                log.warning("leader election %s/%s: %s lost the lease to %s",
                            self.namespace, self.name, self.identity, holder)
                with self._lock:
                    self._leading = False
                return
            if expired:
                log.warning("leader election %s/%s: %s failed to renew within %.3gs",
                            self.namespace, self.name, self.identity, self.renew_deadline)
                return

    def _sleep(self, stop_event: threading.Event, seconds: float) -> None:
        self._wake.clear()
        if not stop_event.is_set():
            self._clock.wait(self._wake, seconds)

    # -- one attempt -------------------------------------------------------------

    def _try_acquire_or_renew(self) -> bool:
        started = self._clock.monotonic()
        now = _micro_time(self._clock.wall())
        try:
            lease = self._request("GET", self._path)
        except errors.NotFound:
            return self._create(started, now)
        except errors.ApiError as err:
            log.warning("leader election %s/%s: reading the lease failed: %s",
                        self.namespace, self.name, err)
            return False
        spec = dict(lease.get("spec") or {})
        # The record was written before we received it, so the time of
        # receipt is the safe (late) end for judging when it expires.
        self._observe(spec, lease, self._clock.monotonic())
        holder = spec.get("holderIdentity") or ""
        with self._lock:
            observed_at = self._observed_at
        duration = spec.get("leaseDurationSeconds") or self.lease_duration
        if holder and holder != self.identity and observed_at + duration > started:
            return False  # someone else holds an unexpired lease
        ours = holder == self.identity
        transitions = int(spec.get("leaseTransitions") or 0)
        new_spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._duration_seconds(),
            "acquireTime": spec.get("acquireTime") if ours and spec.get("acquireTime") else now,
            "renewTime": now,
            "leaseTransitions": transitions if ours else transitions + 1,
        }
        updated = dict(lease)
        updated["spec"] = new_spec
        try:
            result = self._request("PUT", self._path, updated)
        except errors.Conflict:
            return False  # someone wrote in between; look again next time
        except errors.ApiError as err:
            log.warning("leader election %s/%s: updating the lease failed: %s",
                        self.namespace, self.name, err)
            return False
        return self._won(result, started)

    def _create(self, started: float, now: str) -> bool:
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self._duration_seconds(),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            result = self._request(
                "POST", f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases", lease)
        except errors.ApiError as err:  # Conflict: another candidate created it first
            log.info("leader election %s/%s: creating the lease failed: %s",
                     self.namespace, self.name, err)
            return False
        return self._won(result, started)

    def _won(self, lease: dict, started: float) -> bool:
        self._observe(dict(lease.get("spec") or {}), lease, self._clock.monotonic())
        with self._lock:
            self._leading = True
            # Counted from *before* the request: the safe (early) end for us.
            self._leading_until = started + self.renew_deadline
        return True

    def _observe(self, spec: dict, lease: dict, now: float) -> None:
        with self._lock:
            if spec != self._observed:
                self._observed = spec
                self._observed_at = now
            self._observed_rv = (lease.get("metadata") or {}).get("resourceVersion")

    def _release(self) -> None:
        """Hand the Lease back: empty holder, 1 s duration. One attempt only."""
        try:
            lease = self._request("GET", self._path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            now = _micro_time(self._clock.wall())
            lease = dict(lease)
            lease["spec"] = {
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": int(spec.get("leaseTransitions") or 0),
            }
            self._request("PUT", self._path, lease)
            log.info("leader election %s/%s: %s released the lease",
                     self.namespace, self.name, self.identity)
        except errors.ApiError as err:
            log.warning("leader election %s/%s: releasing the lease failed: %s "
                        "(the next leader waits for it to expire)", self.namespace, self.name, err)

    def _duration_seconds(self) -> int:
        return max(1, math.ceil(self.lease_duration))

    def _call(self, callback: Callable[[], None] | None, what: str) -> None:
        if callback is None:
            return
        try:
            callback()
        except Exception:  # noqa: BLE001 - a broken callback must not stop the election
            log.exception("leader election %s/%s: %s raised", self.namespace, self.name, what)

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        return kubeclient.request_json(self._api, method, path, body=body,
                                       timeout=self._request_timeout)


def _micro_time(wall: float) -> str:
    """Kubernetes MicroTime: RFC 3339 in UTC with microseconds."""
    return datetime.fromtimestamp(wall, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
