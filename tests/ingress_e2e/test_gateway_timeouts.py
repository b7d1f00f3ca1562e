"""Gateway route timeouts end to end (HTTPRouteRequestTimeout,
HTTPRouteBackendTimeout scenarios): the real ``platformd ingress``, its
nginx, slow echo backends in network namespaces. Times are milliseconds,
and ``request`` bounds the whole request, retries included (deadline.py).

The elapsed-time checks are upper bounds with a wide margin over the
expected figure and far below what the previous whole-second, per-attempt
timeouts gave (1 s and 2 x 1 s): on a loaded machine they can only be late,
never early, so a pass is meaningful and a failure means a wrong bound."""

from __future__ import annotations

import time

from tests.ingress.gateway_objects import backend, gateway, gateway_class, http_route, rule
from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for
from tests.ingress_e2e.test_gateway_listeners import _get, client  # noqa: F401
from tests.ingress_e2e.test_gateway_routing import _plain


def _timed(client, port, host):
    start = time.monotonic()
    r = _get(client, "127.0.0.1", port, host, headers={"X-Echo-Delay": "3"})
    return r.status_code, time.monotonic() - start


def test_timeouts_are_milliseconds_and_request_bounds_the_retries(fake_api, ingress_controller, netns_backends,
                                                                   client):
    backends = netns_backends(["a", "b"])
    fake_api.create(o.service("slow", port=80))
    fake_api.create(o.endpoint_slice("slow", [backends["a"].ip, backends["b"].ip]))
    fake_api.create(_plain(gateway_class()))
    fake_api.create(_plain(gateway()))
    fake_api.create(_plain(http_route("req", hostnames=["req.example"], rules=[
        rule(backend("slow"), timeouts={"request": "300ms"})])))
    # Two endpoints, both slow: the first attempt gets 450 ms, the retry only the 150 ms left of 600 ms.
    fake_api.create(_plain(http_route("both", hostnames=["both.example"], rules=[
        rule(backend("slow"), timeouts={"request": "600ms", "backendRequest": "450ms"})])))
    running = ingress_controller("--publish-status-address", "192.0.2.1")
    running.wait_ready()
    port = running.http_port
    for host in ("req.example", "both.example"):
        wait_for(lambda: _get(client, "127.0.0.1", port, host).status_code == 200, 30, message=f"{host} served")

    status, elapsed = _timed(client, port, "req.example")
    assert status == 504 and 0.29 <= elapsed < 0.8, elapsed  # was 1 s (whole seconds, rounded up)
    status, elapsed = _timed(client, port, "both.example")
    assert status == 504 and 0.59 <= elapsed < 0.85, elapsed  # per attempt alone: 0.9 s (was 2 s)
    # Within the limits the answer is the backend's.
    r = _get(client, "127.0.0.1", port, "both.example", headers={"X-Echo-Delay": "0.1"})
    assert r.status_code == 200 and r.text in ("a", "b")
