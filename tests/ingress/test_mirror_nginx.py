"""Request mirroring through a real nginx: the mirror backend receives a copy
(the test waits for its arrival, no sleeps), with or without the body, its
own Host header and URI, the share decided per request (0 and 100 percent),
a Backend by name (Gateway RequestMirror's Service), and reloads only when
a new mirror lane first appears (docs/architecture.md).

Fixtures: tests/ingress/conftest.py (``dataplane``); ``recording`` from
test_headers_nginx (a backend that records each request).
"""

from __future__ import annotations

import queue

import httpx
import pytest

from platformd.ingress import headers as h
from platformd.ingress.mirror import Mirror
from platformd.ingress.model import Backend, Configuration, Location, Server
from tests.ingress.test_headers_nginx import RecordingBackend, apply, recording, reloads  # noqa: F401


def site(loc: Location, *backends: tuple[str, RecordingBackend]) -> Configuration:
    return Configuration(servers=(Server("app.example", locations=(loc,)),),
                         backends=tuple(Backend(name, endpoints=(b.endpoint,)) for name, b in backends))


def post(dataplane, path: str, body: bytes) -> httpx.Response:
    return httpx.post(dataplane.http_url + path, headers={"Host": "app.example"}, content=body, timeout=10)


def test_a_mirror_gets_a_copy_with_and_without_body(dataplane, recording):
    web, shadow = recording("web"), recording("shadow")
    apply(dataplane, site(Location("/", backend="web"), ("web", web)))
    start = reloads(dataplane)

    target = Mirror(address=f"127.0.0.1:{shadow.port}", uri=("/copy", h.Var("request_uri")), host="shadow.example")
    apply(dataplane, site(Location("/", backend="web", mirror=target), ("web", web)))
    assert reloads(dataplane) == start + 1  # the mirror lane (mirror_request_body on) appears
    r = post(dataplane, "/p?q=1", b"payload")
    assert r.status_code == 200 and web.next()["body"] == b"payload"
    copy = shadow.next()
    assert (copy["method"], copy["path"], copy["body"]) == ("POST", "/copy/p?q=1", b"payload")
    assert dict(copy["headers"])["host"] == "shadow.example"

    # A second mirrored route with the same setting and another target: same lane, no reload.
    other = recording("other")
    apply(dataplane, site(Location("/", backend="web", mirror=Mirror(address=f"127.0.0.1:{other.port}")),
                          ("web", web)))
    assert reloads(dataplane) == start + 1
    dataplane.get("/x", host="app.example")
    web.next()
    copy = other.next()
    assert copy["path"] == "/x" and dict(copy["headers"])["host"] == "app.example"

    # Without the body: the copy carries none (and announces none).
    apply(dataplane, site(Location("/", backend="web", mirror=Mirror(address=f"127.0.0.1:{shadow.port}",
                                                                        request_body=False)), ("web", web)))
    assert reloads(dataplane) == start + 2  # mirror_request_body off: the second lane
    r = post(dataplane, "/nobody", b"payload")
    assert r.status_code == 200 and web.next()["body"] == b"payload"
    copy = shadow.next()
    assert copy["path"] == "/nobody" and copy["body"] == b""
    assert "content-length" not in dict(copy["headers"]) or dict(copy["headers"])["content-length"] == "0"


def test_percent_0_sends_no_copy_and_100_sends_each(dataplane, recording):
    web, shadow = recording("web"), recording("shadow")
    none = Mirror(address=f"127.0.0.1:{shadow.port}", numerator=0, denominator=100)
    apply(dataplane, site(Location("/", backend="web", mirror=none), ("web", web)))
    for _ in range(20):
        assert dataplane.get("/", host="app.example").status_code == 200
        web.next()
    # Synchronise on a marker: a route mirrored at 100% sends its copy after
    # the 20 requests above; the shadow's first arrival must be that one.
    every = Mirror(address=f"127.0.0.1:{shadow.port}")
    start = reloads(dataplane)
    apply(dataplane, site(Location("/", backend="web", mirror=every), ("web", web)))
    assert reloads(dataplane) == start  # same lane (body on): the share is data
    for i in range(5):
        dataplane.get(f"/marker{i}", host="app.example")
        assert shadow.next()["path"] == f"/marker{i}"
    with pytest.raises(queue.Empty):
        shadow.requests.get_nowait()


def test_a_mirror_to_a_backend_by_name(dataplane, recording):
    # Gateway RequestMirror: the copy goes to an endpoint of a Backend the balancer serves.
    web, shadow = recording("web"), recording("shadow")
    m = Mirror(backend="shadow-svc")
    apply(dataplane, site(Location("/", backend="web", mirror=m), ("web", web), ("shadow-svc", shadow)))
    dataplane.get("/api", host="app.example")
    assert shadow.next()["path"] == "/api" and web.next()["path"] == "/api"
    # Headers and mirror together: the copy carries the modified request headers.
    program = h.from_modifier("request", set=[("X-Env", "test")])
    apply(dataplane, site(Location("/", backend="web", mirror=m, headers=program), ("web", web), ("shadow-svc", shadow)))
    dataplane.get("/h", host="app.example")
    assert dict(web.next()["headers"])["x-env"] == "test"
    copy = shadow.next()
    assert copy["path"] == "/h" and dict(copy["headers"])["x-env"] == "test"
