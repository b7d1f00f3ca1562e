"""GatewayStatusWriter's incremental passes on plain data: a pass looks at the
routes the controller handed over (None: all), pauses between chunks, and
stops writing when leadership is lost. The API is a fake ``patch_status``
that applies the merge patch to the stores the writer reads."""

from __future__ import annotations

import pytest

from platformd.common import resources
from platformd.ingress import gateway_status as st
from platformd.ingress import gateway_statuswriter as writer_module
from platformd.ingress.gateway_statuswriter import GatewayStatusWriter
from tests.ingress.gateway_objects import CONTROLLER, backend, gateway, gateway_class, http_route, rule, translate

_BY_PLURAL = {r.plural: r for r in (resources.GATEWAY_CLASSES, resources.GATEWAYS, resources.HTTP_ROUTES,
                                    resources.GRPC_ROUTES)}


class Api:
    """The stores the writer reads, and the PATCHes it sends (applied to them)."""

    def __init__(self, *objects):
        self.objects = {}
        for obj in objects:
            self.put(obj)
        self.written: list[tuple[str, str]] = []  # (kind, key)
        self.on_write = None

    def put(self, obj):
        resource = next(r for r in _BY_PLURAL.values() if r.kind == obj["kind"])
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        self.objects[(resource.plural, key)] = obj

    def get(self, resource, key):
        return self.objects.get((resource.plural, key))

    def keys(self, resource):
        return [key for plural, key in self.objects if plural == resource.plural]

    def patch(self, _api, path, patch, _what):
        parts = path.split("/")
        plural, name = parts[-3], parts[-2]
        key = f"{parts[-4]}/{name}" if "namespaces" in parts else name
        obj = self.objects[(plural, key)]
        status = {k: v for k, v in patch["status"].items() if v is not None}
        self.objects[(plural, key)] = {**obj, "status": status}  # a new object, as the informer would show
        self.written.append((_BY_PLURAL[plural].kind, key))
        if self.on_write is not None:
            self.on_write()
        return True


def _objects(routes=2, **route_kw):
    return [gateway_class(), gateway(), *(http_route(f"r{i}", **route_kw) for i in range(routes))]


@pytest.fixture
def make(monkeypatch):
    def build(objects, leader=lambda: True):
        api = Api(*objects)
        monkeypatch.setattr(writer_module, "patch_status", api.patch)
        state = {"translation": translate(*objects)}
        slept = []
        writer = GatewayStatusWriter(None, CONTROLLER, is_leader=leader, translation=lambda: state["translation"],
                                     get=api.get, keys=api.keys, wall_clock=lambda: 1_800_000_000.0,
                                     sleep=slept.append)
        return api, state, writer, slept
    return build


def _route_status(api, key):
    return api.get(resources.HTTP_ROUTES, key)["status"]


def test_a_changed_route_alone_is_rendered_and_written(make):
    objects = _objects()
    api, state, writer, _ = make(objects)
    writer.sync()  # the first pass looks at everything
    assert sorted(api.written) == [("Gateway", "default/gw"), ("GatewayClass", "platform"),
                                   ("HTTPRoute", "default/r0"), ("HTTPRoute", "default/r1")]
    untouched = api.get(resources.HTTP_ROUTES, "default/r1")

    changed = http_route("r0", generation=2, rules=[rule(backend("missing"))])
    api.put({**changed, "status": _route_status(api, "default/r0")})
    state["translation"] = translate(objects[0], objects[1], changed, objects[3])  # every status object new
    api.written.clear()
    rendered = writer.rendered
    writer.changed({("HTTPRoute", "default/r0")})
    writer.sync()
    assert writer.rendered - rendered == 1  # r1 was not handed over: not rendered again
    assert api.written == [("HTTPRoute", "default/r0")]
    [parent] = _route_status(api, "default/r0")["parents"]
    assert {c["type"]: (c["reason"], c["observedGeneration"]) for c in parent["conditions"]}["ResolvedRefs"] == (
        st.R_BACKEND_NOT_FOUND, 2)
    assert api.get(resources.HTTP_ROUTES, "default/r1") is untouched


def test_an_unchanged_status_is_neither_rendered_nor_written_again(make):
    api, state, writer, _ = make(_objects())
    writer.sync()  # writes them all
    writer.sync()  # a resync: each route shows its status now, remembered
    api.written.clear()
    rendered = writer.rendered
    writer.changed({("HTTPRoute", "default/r0"), ("HTTPRoute", "default/r1")})
    writer.sync()
    writer.changed(frozenset())  # a Gateway's Programmed changed: no route is looked at
    writer.sync()
    assert (writer.rendered - rendered, api.written) == (0, [])


def test_a_gateway_change_hands_over_all_routes_and_their_statuses_change(make):
    objects = _objects(hostnames=["a.example"])
    api, state, writer, _ = make(objects)
    writer.sync()
    moved = gateway(generation=2, listeners=[{"name": "http", "port": 80, "protocol": "HTTP",
                                              "hostname": "b.example"}])
    api.put({**moved, "status": api.get(resources.GATEWAYS, "default/gw")["status"]})
    state["translation"] = translate(objects[0], moved, *objects[2:])
    api.written.clear()
    writer.changed(None)  # what the controller hands over after a full build
    writer.sync()
    assert sorted(api.written) == [("Gateway", "default/gw"), ("HTTPRoute", "default/r0"),
                                   ("HTTPRoute", "default/r1")]
    for key in ("default/r0", "default/r1"):
        [parent] = _route_status(api, key)["parents"]
        accepted = next(c for c in parent["conditions"] if c["type"] == st.ACCEPTED)
        assert (accepted["status"], accepted["reason"]) == ("False", st.R_NO_MATCHING_LISTENER_HOSTNAME)


def test_a_resync_looks_at_every_route_and_repairs_an_overwritten_status(make):
    api, state, writer, _ = make(_objects())
    writer.sync()
    writer.changed(frozenset())
    writer.sync()
    api.put({**api.get(resources.HTTP_ROUTES, "default/r1"), "status": {}})  # someone else cleared it
    api.written.clear()
    writer.sync()  # nothing handed over since the last pass: the runner's periodic resync
    assert api.written == [("HTTPRoute", "default/r1")]


def test_a_big_pass_pauses_between_chunks_and_longer_after_a_hand_over(make):
    routes = writer_module.WRITES_PER_CHUNK * 3
    api, state, writer, slept = make(_objects(routes))
    api.on_write = lambda: len(api.written) == 10 and writer.changed({("HTTPRoute", "default/r1")})
    writer.sync()
    assert len(api.written) == 2 + routes
    assert slept == [writer_module.HANDOVER_PAUSE, writer_module.PAUSE]  # after 20 and 40 route writes
    # Looking without writing pauses every CHUNK routes.
    slept.clear()
    api.on_write = None
    writer.sync()
    assert slept == [] and len(api.written) == 2 + routes  # 60 routes looked at, none written: under CHUNK


def test_leader_loss_stops_writes_mid_pass_and_the_next_turn_reads_all_again(make):
    leader = {"now": True}
    routes = writer_module.WRITES_PER_CHUNK * 2
    api, state, writer, slept = make(_objects(routes), leader=lambda: leader["now"])
    api.on_write = lambda: len(api.written) == 2 + writer_module.WRITES_PER_CHUNK and leader.update(now=False)
    writer.sync()
    assert len(api.written) == 2 + writer_module.WRITES_PER_CHUNK  # stopped at the pause after the chunk
    writer.changed({("HTTPRoute", "default/r0")})
    writer.sync()  # a follower writes nothing
    assert len(api.written) == 2 + writer_module.WRITES_PER_CHUNK
    leader["now"] = True
    writer.changed(frozenset())
    writer.sync()  # leader again: every route is looked at, only the unwritten ones written
    assert len(api.written) == 2 + routes and len(set(api.written)) == 2 + routes
