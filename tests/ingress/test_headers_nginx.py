"""Header programs through a real nginx: request headers the backend sees,
response headers the client sees, snippet instructions (set / if / return),
all applied as data (the reload counter never moves after the start).

Fixtures: tests/ingress/conftest.py (``dataplane``); the backend here
records every request it gets (method, path, headers, body) in a queue, so a
test waits for an arrival instead of sleeping.
"""

from __future__ import annotations

import json
import queue
from http.server import BaseHTTPRequestHandler

import httpx
import pytest

from platformd.ingress import headers as h
from platformd.ingress.model import Backend, BackendProtocol, Configuration, Location, ProxySettings, Server
from tests.helpers.loopback_http import LoopbackHttp
from tests.helpers.dataplane import apply, reloads


class RecordingBackend(LoopbackHttp):
    """Answers 200 with its name, the request's headers as JSON and the
    response headers it was told to send (``extra``, a list of pairs)."""

    def __init__(self, name: str, extra: list[tuple[str, str]] | None = None) -> None:
        self.name = name
        self.extra = extra or []
        self.requests: queue.Queue = queue.Queue()
        backend = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                pairs = [(k.lower(), v) for k, v in self.headers.items()]
                backend.requests.put({"method": self.command, "path": self.path, "headers": pairs, "body": body})
                out = json.dumps(pairs).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.send_header("X-Backend", backend.name)
                for k, v in backend.extra:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PUT = _answer

            def log_message(self, *args) -> None:
                pass

        super().__init__(Handler)

    def next(self, timeout: float = 5.0) -> dict:
        return self.requests.get(timeout=timeout)


@pytest.fixture
def recording():
    started: list[RecordingBackend] = []

    def make(name: str, extra=None) -> RecordingBackend:
        b = RecordingBackend(name, extra)
        started.append(b)
        return b

    yield make
    for b in started:
        b.stop()


def site(*locations: Location, backends: dict, settings=None) -> Configuration:
    config = Configuration(
        servers=(Server("app.example", locations=locations),),
        backends=tuple(Backend(name, endpoints=(b.endpoint,)) for name, b in backends.items()),
    )
    if settings is not None:
        from dataclasses import replace
        config = replace(config, settings=settings)
    return config


def seen(r: httpx.Response) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for k, v in json.loads(r.text):
        out.setdefault(k, []).append(v)
    return out


def test_request_and_response_header_operations_without_a_reload(dataplane, recording):
    web = recording("web", extra=[("X-Drop", "secret"), ("X-Keep", "a"), ("Server-Timing", "db;dur=1")])
    apply(dataplane, site(Location("/", backend="web"), backends={"web": web}))
    start = reloads(dataplane)

    program = (
        *h.from_modifier("request", set=[("X-Set", "one")], add=[("X-Add", "two")], remove=["X-Remove"]),
        *h.from_modifier("response", set=[("X-Frame-Options", "DENY")], add=[("X-Keep", "b")], remove=["X-Drop"]),
    )
    apply(dataplane, site(Location("/", backend="web", headers=program), backends={"web": web}))
    r = dataplane.get("/", host="app.example",
                      headers={"X-Set": "client", "x-add": "client", "X-Remove": "gone", "X-Other": "kept"})
    got = seen(r)
    assert got["x-set"] == ["one"]  # set replaces
    assert got["x-add"] == ["client", "two"]  # add appends
    assert "x-remove" not in got  # remove deletes
    assert got["x-other"] == ["kept"]
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers.get_list("x-keep") == ["a", "b"]
    assert "x-drop" not in r.headers
    # Case-insensitive names: "x-set" from the client, "X-Set" in the program.
    r = dataplane.get("/", host="app.example", headers={"x-SET": "client"})
    assert seen(r)["x-set"] == ["one"]
    # A literal '$' stays a '$': Gateway values are not templates.
    apply(dataplane, site(Location("/", backend="web", headers=h.from_modifier("request", set=[("X-Lit", "$host")])),
                          backends={"web": web}))
    assert seen(dataplane.get("/", host="app.example"))["x-lit"] == ["$host"]
    # Back to none: nothing applied any more.
    apply(dataplane, site(Location("/", backend="web"), backends={"web": web}))
    r = dataplane.get("/", host="app.example")
    assert "x-drop" in r.headers and "x-frame-options" not in r.headers
    assert reloads(dataplane) == start


def test_global_headers_apply_to_every_route_before_its_own(dataplane, recording):
    web = recording("web")
    apply(dataplane, site(Location("/", backend="web"), backends={"web": web}))
    start = reloads(dataplane)
    from platformd.ingress.model import GlobalSettings
    settings = GlobalSettings(headers=(h.HeaderOp("request", "set", "X-Global", ("g",)),
                                       h.HeaderOp("response", "set", "X-Served-By", ("platform",))))
    own = (h.HeaderOp("request", "set", "X-Global", ("route",)),)
    apply(dataplane, site(Location("/", backend="web"), Location("/own", backend="web", headers=own),
                          backends={"web": web}, settings=settings))
    r = dataplane.get("/", host="app.example")
    assert seen(r)["x-global"] == ["g"] and r.headers["x-served-by"] == "platform"
    assert seen(dataplane.get("/own", host="app.example"))["x-global"] == ["route"]
    assert reloads(dataplane) == start


def test_grpc_lane_applies_response_headers(dataplane, recording):
    # The gRPC lane has the header_filter hook too: a 503 (no endpoints) still carries them.
    program = h.from_modifier("response", set=[("X-Lane", "grpc")])
    apply(dataplane, Configuration(servers=(Server("app.example", locations=(
        Location("/", backend="none", proxy=ProxySettings(protocol=BackendProtocol.GRPC), headers=program),)),),
        backends=(Backend("none"),)))
    r = dataplane.get("/", host="app.example")
    assert r.headers.get("x-lane") == "grpc"


def test_snippet_program_set_if_return_and_variables(dataplane, recording):
    web = recording("web")
    apply(dataplane, site(Location("/", backend="web"), backends={"web": web}))
    start = reloads(dataplane)
    program = (
        h.SetVar("tier", ("gold-", h.Var("http_x_user"))),
        h.HeaderOp("request", "set", "X-Tier", (h.Var("tier"),)),
        h.HeaderOp("request", "set", "X-Original-Host", (h.Var("host"),)),
        h.If("http_x_block", False, ("yes",), (h.Return(403, ("blocked",)),)),
        h.If("arg_go", False, ("away",), (h.Return(302, ("https://elsewhere.example", h.Var("request_uri"))),)),
        h.HeaderOp("response", "add", "X-Seen", ("1",)),
    )
    apply(dataplane, site(Location("/", backend="web", headers=program), backends={"web": web}))
    r = dataplane.get("/p", host="app.example", headers={"X-User": "ann"})
    got = seen(r)
    assert (got["x-tier"], got["x-original-host"]) == (["gold-ann"], ["app.example"])
    assert r.headers["x-seen"] == "1"
    r = dataplane.get("/p", host="app.example", headers={"X-Block": "yes"})
    assert (r.status_code, r.text) == (403, "blocked")
    r = dataplane.get("/p?go=away", host="app.example")
    assert (r.status_code, r.headers["location"]) == (302, "https://elsewhere.example/p?go=away")
    assert reloads(dataplane) == start
