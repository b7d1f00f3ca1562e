"""Several copies of a request through a real nginx (mirror.Mirror.also,
Gateway API's repeated RequestMirror): each target gets its own copy, each
copy has its own share, Backends by name and addresses mix, and a lane per
number of copies reloads nginx once when that number first appears.

Fixtures: tests/ingress/conftest.py (``dataplane``); ``recording`` from
test_headers_nginx (a backend that records each request)."""

from __future__ import annotations

import queue

import httpx
import pytest

from platformd.ingress.mirror import Mirror
from platformd.ingress.model import Location
from tests.ingress.test_headers_nginx import apply, recording, reloads  # noqa: F401
from tests.ingress.test_mirror_nginx import site


def test_each_copy_goes_to_its_own_target(dataplane, recording):
    web, a, b, c = recording("web"), recording("a"), recording("b"), recording("c")
    three = Mirror(backend="a-svc", also=(Mirror(backend="b-svc"), Mirror(address=f"127.0.0.1:{c.port}")))
    apply(dataplane, site(Location("/", backend="web", mirror=three), ("web", web), ("a-svc", a), ("b-svc", b)))
    start = reloads(dataplane)
    r = httpx.post(dataplane.http_url + "/copy?x=1", headers={"Host": "app.example"}, content=b"body", timeout=10)
    assert r.status_code == 200 and web.next()["body"] == b"body"
    for target in (a, b, c):
        copy = target.next()
        assert (copy["method"], copy["path"], copy["body"]) == ("POST", "/copy?x=1", b"body")
        assert dict(copy["headers"])["host"] == "app.example"
    for target in (a, b, c):  # exactly one copy each
        with pytest.raises(queue.Empty):
            target.requests.get_nowait()

    # Other targets, same number of copies: data only, no reload.
    swapped = Mirror(backend="b-svc", also=(Mirror(backend="a-svc"), Mirror(backend="a-svc")))
    apply(dataplane, site(Location("/", backend="web", mirror=swapped), ("web", web), ("a-svc", a), ("b-svc", b)))
    assert reloads(dataplane) == start
    dataplane.get("/again", host="app.example")
    web.next()
    assert b.next()["path"] == "/again"
    assert [a.next()["path"], a.next()["path"]] == ["/again", "/again"]


def test_each_copy_has_its_own_share(dataplane, recording):
    web, a, b = recording("web"), recording("a"), recording("b")
    m = Mirror(backend="a-svc", numerator=0, also=(Mirror(backend="b-svc"),))
    apply(dataplane, site(Location("/", backend="web", mirror=m), ("web", web), ("a-svc", a), ("b-svc", b)))
    for i in range(10):
        dataplane.get(f"/r{i}", host="app.example")
        web.next()
        assert b.next()["path"] == f"/r{i}"  # b's copy arrives after a's would have been sent
    with pytest.raises(queue.Empty):
        a.requests.get_nowait()
