"""Session affinity cookie attributes and failure handling through a real
nginx (session-cookie-secure, -domain, -expires, -change-on-failure,
-conditional-samesite-none, affinity-canary-behavior).

Fixtures: tests/ingress/conftest.py (``dataplane``, ``backends``).
"""

from __future__ import annotations

from email.utils import parsedate_to_datetime
from datetime import datetime, timezone

import httpx
import pytest

from platformd.ingress.model import (
    AffinityMode,
    Backend,
    Configuration,
    Location,
    Server,
    SessionAffinity,
    TrafficShapingPolicy,
)

from tests.helpers.scripted_backend import ScriptedBackend

HOST = "sticky.example"


def apply(dataplane, *backends: Backend, backend: str = "app", tls: bool = False) -> None:
    config = Configuration(
        servers=(Server(HOST, locations=(Location("/", backend=backend),), tls=tls),),
        backends=backends,
    )
    result = dataplane.apply(config)
    assert result.ok, f"{result.error}\n{dataplane.error_log()[-2000:]}"


class _NoJar(httpx.Client):
    """A client that keeps no cookies: each request sends only the Cookie header given."""

    def send(self, request, **kwargs):
        self.cookies.clear()
        return super().send(request, **kwargs)


def fresh(**kwargs) -> httpx.Client:
    return _NoJar(timeout=10, verify=False, **kwargs)


def attributes(set_cookie: str) -> dict[str, str]:
    out = {}
    for part in set_cookie.split(";")[1:]:
        name, _, value = part.strip().partition("=")
        out[name] = value
    return out


def test_cookie_attributes(dataplane, backends):
    (b,) = backends(1)
    affinity = SessionAffinity(cookie_name="route", domain=".sticky.example", expires=3600, samesite="None",
                               conditional_samesite_none=True)
    apply(dataplane, Backend("app", endpoints=(b.endpoint,), session_affinity=affinity))
    with fresh() as client:
        r = client.get(dataplane.http_url + "/", headers={"Host": HOST})
        attrs = attributes(r.headers["set-cookie"])
        assert attrs["Domain"] == ".sticky.example" and attrs["SameSite"] == "None"
        expires = parsedate_to_datetime(attrs["Expires"])
        assert 3500 < (expires - datetime.now(timezone.utc)).total_seconds() <= 3601
        assert "Secure" not in attrs  # plain HTTP, not asked for
        r = client.get(dataplane.https_url + "/", headers={"Host": HOST})
        assert "Secure" in attributes(r.headers["set-cookie"])  # https: always
        # Chrome 60 mishandles SameSite=None: left out for it.
        old = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/60.0.3112.113 Safari/537.36"
        r = client.get(dataplane.http_url + "/", headers={"Host": HOST, "User-Agent": old})
        assert "SameSite" not in attributes(r.headers["set-cookie"])
    apply(dataplane, Backend("app", endpoints=(b.endpoint,),
                             session_affinity=SessionAffinity(cookie_name="route", secure=True)))
    with fresh() as client:
        r = client.get(dataplane.http_url + "/", headers={"Host": HOST})
        assert "Secure" in attributes(r.headers["set-cookie"])  # session-cookie-secure: on http too


@pytest.mark.parametrize("mode", [AffinityMode.BALANCED, AffinityMode.PERSISTENT])
@pytest.mark.parametrize("change", [False, True])
def test_change_on_failure(dataplane, request, mode, change):
    """A session pinned to an endpoint that stops answering: by default it
    stays there (502, as ingress-nginx); with change-on-failure the request
    is retried on another endpoint and the cookie moves with it."""
    a, b = ScriptedBackend("a"), ScriptedBackend("b")
    request.addfinalizer(a.stop)
    request.addfinalizer(b.stop)
    affinity = SessionAffinity(cookie_name="route", mode=mode, change_on_failure=change)
    apply(dataplane, Backend("app", endpoints=(a.endpoint, b.endpoint), session_affinity=affinity))
    with fresh() as client:
        for _ in range(200):
            r = client.get(dataplane.http_url + "/", headers={"Host": HOST})
            if r.headers["x-backend"] == a.name:
                cookie = r.headers["set-cookie"].split(";")[0]
                break
        else:
            raise AssertionError("no session landed on a")
        a.kill()  # the pinned endpoint refuses connections from now on
        r = client.get(dataplane.http_url + "/", headers={"Host": HOST, "Cookie": cookie})
        if not change:
            assert r.status_code == 502
            return
        assert (r.status_code, r.headers["x-backend"]) == (200, b.name)
        moved = r.headers["set-cookie"].split(";")[0]
        assert moved.startswith("route=") and moved != cookie
        r = client.get(dataplane.http_url + "/", headers={"Host": HOST, "Cookie": moved})
        assert r.headers["x-backend"] == b.name and "set-cookie" not in r.headers


def test_affinity_canary_behavior_legacy(dataplane, backends):
    """A session of the canary keeps a request there ("sticky", the default);
    with "legacy" the canary rules decide alone (weight 0: never)."""
    main, canary = backends(2)
    for behavior, expected in (("sticky", canary.name), ("legacy", main.name)):
        affinity = SessionAffinity(cookie_name="route", canary_behavior=behavior)
        primary = Backend("app", endpoints=(main.endpoint,), session_affinity=affinity,
                          alternative_backends=("app-canary",))

        def canary_backend(weight: int) -> Backend:
            return Backend("app-canary", endpoints=(canary.endpoint,), session_affinity=affinity,
                           traffic_shaping_policy=TrafficShapingPolicy(weight=weight))

        apply(dataplane, primary, canary_backend(100))
        with fresh() as client:
            r = client.get(dataplane.http_url + "/", headers={"Host": HOST})
            assert r.text == canary.name
            cookie = r.headers["set-cookie"].split(";")[0]
            apply(dataplane, primary, canary_backend(0))
            r = client.get(dataplane.http_url + "/", headers={"Host": HOST, "Cookie": cookie})
            assert r.text == expected, behavior


def test_a_new_session_moves_off_a_failing_endpoint(dataplane, request):
    """Without a cookie there is no session to keep: a failed first attempt
    is retried on another endpoint and the cookie names that one."""
    a, b = ScriptedBackend("a"), ScriptedBackend("b")
    request.addfinalizer(a.stop)
    request.addfinalizer(b.stop)
    affinity = SessionAffinity(cookie_name="route", mode=AffinityMode.PERSISTENT)
    apply(dataplane, Backend("app", endpoints=(a.endpoint, b.endpoint), session_affinity=affinity))
    a.kill()
    with fresh() as client:
        for _ in range(4):  # round robin sends some first attempts to a
            r = client.get(dataplane.http_url + "/", headers={"Host": HOST})
            assert (r.status_code, r.headers["x-backend"]) == (200, b.name)
            cookie = r.headers["set-cookie"].split(";")[0]
            again = client.get(dataplane.http_url + "/", headers={"Host": HOST, "Cookie": cookie})
            assert again.headers["x-backend"] == b.name and "set-cookie" not in again.headers
