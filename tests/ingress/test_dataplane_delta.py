"""Backends deltas: the Lua endpoint's chain (real nginx) and the data plane's choice of delta or full push (fakes)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from platformd.ingress import render
from platformd.ingress.dataplane import DataPlane
from platformd.ingress.luaclient import LuaConflict
from platformd.ingress.model import Backend, Configuration, Endpoint, Location, Server
from platformd.ingress.view import RuntimePaths
from tests.ingress.test_dataplane_reload import FakeLua, FakeNginx
from tests.ingress.test_lua_nginx import HOST, apply, config_socket, endpoints, hits, site


def backend(name: str, *ports: int) -> dict:
    return {"name": name, "endpoints": [{"address": "10.0.0.1", "port": p} for p in ports],
            "load_balance": "round_robin", "upstream_hash_by": "", "alternative_backends": []}


def post_full(lua, data: list[dict]):
    return lua.post("/configuration/backends", json={"checksum": render.backends_checksum(data), "data": data})


def post_delta(lua, base: str, target: list[dict], upsert: list[dict], remove: list[str]):
    body = {"base": base, "checksum": render.backends_checksum(target), "upsert": upsert, "remove": remove}
    return lua.post("/configuration/backends", content=json.dumps(body))


def loaded(lua) -> dict:
    return lua.get("/configuration/backends").json()


# --- the Lua endpoint, real nginx -------------------------------------------------


def test_deltas_chain_on_the_base_and_get_merges_them(dataplane, backends):
    apply(dataplane, site(Backend("app", endpoints=endpoints(*backends(1)))))
    with config_socket(dataplane) as lua:
        start = [backend("a", 1), backend("b", 2), backend("c", 3)]
        assert post_full(lua, start).status_code == 201
        base = render.backends_checksum(start)

        target = [backend("a", 1), backend("b", 20), backend("d", 4)]
        r = post_delta(lua, base, target, [backend("b", 20), backend("d", 4)], ["c"])
        assert r.status_code == 201, r.text
        assert r.json()["checksum"] == render.backends_checksum(target)
        got = loaded(lua)
        assert got["data"] == target  # merged, sorted by name, arrays stay arrays
        assert got["checksum"] == render.backends_checksum(got["data"])
        assert lua.get("/configuration").json()["backends"] == {"checksum": got["checksum"], "version": got["version"]}

        again = [backend("a"), backend("b", 20), backend("d", 4)]
        assert post_delta(lua, got["checksum"], again, [backend("a")], []).status_code == 201
        assert loaded(lua)["data"] == again

        # A full POST starts a new chain: nothing of the old one shows through.
        fresh = [backend("z", 9)]
        assert post_full(lua, fresh).status_code == 201
        assert loaded(lua)["data"] == fresh


def test_a_bad_or_stale_delta_changes_nothing(dataplane, backends):
    apply(dataplane, site(Backend("app", endpoints=endpoints(*backends(1)))))
    with config_socket(dataplane) as lua:
        start = [backend("a", 1), backend("b", 2)]
        assert post_full(lua, start).status_code == 201
        base = render.backends_checksum(start)
        before = loaded(lua)

        stale = post_delta(lua, "ab" * 32, start, [backend("a", 5)], [])
        assert stale.status_code == 409 and stale.json()["checksum"] == base
        bad_port = post_delta(lua, base, start, [{**backend("a"), "endpoints": [{"address": "10.0.0.1", "port": 0}]}], [])
        assert bad_port.status_code == 400 and "upsert[1]" in bad_port.json()["error"]
        both = post_delta(lua, base, start, [backend("a", 5)], ["a"])
        assert both.status_code == 400 and "also upserted" in both.json()["error"]
        bad_name = post_delta(lua, base, start, [], ["no/slash"])
        assert bad_name.status_code == 400 and "remove[1]" in bad_name.json()["error"]
        no_base = lua.post("/configuration/backends", content=json.dumps({"checksum": "ab", "base": 7, "upsert": [], "remove": []}))
        assert no_base.status_code == 400
        assert loaded(lua) == before


def test_a_long_chain_is_refused_so_the_client_posts_the_whole_set(dataplane, backends):
    apply(dataplane, site(Backend("app", endpoints=endpoints(*backends(1)))))
    with config_socket(dataplane) as lua:
        data = [backend("a", 1)]
        assert post_full(lua, data).status_code == 201
        for port in range(2, 1200):
            target = [backend("a", port)]
            r = post_delta(lua, render.backends_checksum(data), target, target, [])
            if r.status_code == 409:
                break
            assert r.status_code == 201, r.text
            data = target
        assert r.status_code == 409 and "too long" in r.json()["error"]
        assert 1020 <= port <= 1030  # configuration.lua's MAX_CHAIN (1,024) and change
        assert loaded(lua)["data"] == data


def test_endpoint_changes_travel_as_deltas_and_traffic_follows(dataplane, backends):
    b0, b1, b2 = backends(3)
    others = tuple(Backend(f"other-{i}", endpoints=(Endpoint("10.0.0.1", 1000 + i),)) for i in range(20))
    sent = {"delta": 0, "full": 0}
    lua = dataplane.plane.lua
    push_delta, push_section = lua.push_delta, lua.push_section
    lua.push_delta = lambda delta: sent.__setitem__("delta", sent["delta"] + 1) or push_delta(delta)
    lua.push_section = lambda section: ((section.name == "backends" and sent.__setitem__("full", sent["full"] + 1))
                                        or push_section(section))

    apply(dataplane, site(Backend("app", endpoints=endpoints(b0)), *others))
    assert sent == {"delta": 0, "full": 1}
    for target in (b1, b2, b0):
        result = dataplane.apply(site(Backend("app", endpoints=endpoints(target)), *others))
        assert result.ok and result.kind == "dynamic", result
        # Confirmed by Lua, so every worker's next request lands there.
        assert set(hits(dataplane, 6)) == {target.name}
    assert sent == {"delta": 3, "full": 1}
    with config_socket(dataplane) as socket:
        got = loaded(socket)
    assert [b["name"] for b in got["data"]] == sorted(["app", *(b.name for b in others)])
    assert got["checksum"] == render.dynamic_sections(dataplane.plane.running)[0].checksum


# --- the data plane's choice, on fakes ----------------------------------------------


class ConflictingLua(FakeLua):
    """Refuses the next ``conflicts`` deltas with 409."""

    def __init__(self, conflicts: int = 0) -> None:
        super().__init__()
        self.conflicts = conflicts
        self.kinds: list[str] = []

    def push_section(self, section):
        if section.name == "backends":
            self.kinds.append("full")
        return super().push_section(section)

    def push_delta(self, delta):
        if self.conflicts:
            self.conflicts -= 1
            raise LuaConflict("backends", 409, "base is not the checksum in force")
        self.kinds.append(f"delta {delta.size}")
        return super().push_delta(delta)


def plane_on_fakes(tmp_path: Path, lua: FakeLua, backends: int = 400) -> tuple[DataPlane, Configuration]:
    nginx = FakeNginx(tmp_path, reload_seconds=0)
    runtime = RuntimePaths(tmp_path, tmp_path / "lua", tmp_path / "c.crt", tmp_path / "c.key")
    plane = DataPlane(nginx, lua, runtime, CollectorRegistry())
    config = Configuration(servers=(Server(HOST, locations=(Location("/", backend="b0"),)),),
                           backends=tuple(Backend(f"b{i}", endpoints=(Endpoint("10.0.0.1", 80),)) for i in range(backends)))
    plane._running, plane._pushed_to_master = config, 4242
    plane._push(render.dynamic_sections(config), 4242)  # as after a start
    return plane, config


def moved(config: Configuration, index: int, port: int) -> Configuration:
    backends = list(config.backends)
    backends[index] = replace(backends[index], endpoints=(Endpoint("10.0.0.1", port),))
    return replace(config, backends=tuple(backends))


def test_a_refused_delta_falls_back_to_the_whole_section(tmp_path):
    lua = ConflictingLua(conflicts=1)
    plane, config = plane_on_fakes(tmp_path, lua)
    config = moved(config, 3, 81)
    assert plane.apply(config).ok
    config = moved(config, 4, 81)
    assert plane.apply(config).ok
    assert lua.kinds == ["full", "full", "delta 1"]


def test_the_chain_is_compacted_after_compact_after_deltas(tmp_path):
    lua = ConflictingLua()  # more than 8 * COMPACT_AFTER backends: the count, not the share, decides
    plane, config = plane_on_fakes(tmp_path, lua, backends=8 * render.COMPACT_AFTER + 100)
    for i in range(render.COMPACT_AFTER + 2):
        config = moved(config, i % 10, 100 + i)
        assert plane.apply(config).ok
    assert lua.kinds == ["full", *["delta 1"] * render.COMPACT_AFTER, "full", "delta 1"]


def test_a_new_master_gets_the_whole_section(tmp_path):
    lua = ConflictingLua()
    plane, config = plane_on_fakes(tmp_path, lua)
    plane.nginx.master_pid = lambda: 5151  # nginx restarted behind our back
    assert plane.apply(moved(config, 1, 99)).ok
    assert lua.kinds == ["full", "full"]


def test_compaction_rule():
    small = render.BackendsDelta("a", "b", (), ("x",))
    assert not render.compact_due((0, 0), small, 10_000)
    assert render.compact_due((render.COMPACT_AFTER, 1), small, 10_000)
    assert render.compact_due((3, 10_000 // 8), small, 10_000)  # an eighth of the set already named
    assert not render.compact_due((3, render.COMPACT_FLOOR - 1), small, 3)  # small sets use deltas too


# --- render: checksums and deltas -----------------------------------------------------


def test_backends_checksum_ignores_order_and_matches_the_section():
    config = Configuration(backends=(Backend("a", endpoints=(Endpoint("10.0.0.1", 1),)), Backend("b")))
    section = render.dynamic_sections(config)[0]
    payload = render.backends_payload(config)
    assert section.checksum == render.backends_checksum(payload) == render.backends_checksum(payload[::-1])
    assert section.data == payload
    assert render.backends_checksum(payload[:1]) != section.checksum
    assert render.backends_checksum([]) != render.backends_checksum([{"name": "a"}])


def test_delta_names_what_changed_whichever_way_the_set_moved():
    a, b, c = Backend("a"), Backend("b", endpoints=(Endpoint("10.0.0.1", 1),)), Backend("c")
    before = render.dynamic_sections(Configuration(backends=(a, b, c)))[0]
    same_places = render.dynamic_sections(Configuration(backends=(a, replace(b, endpoints=()), c)))[0]
    delta = render.backends_delta(before, same_places)
    assert ([e.name for e in delta.upsert], delta.remove) == (["b"], ())
    assert (delta.base, delta.checksum) == (before.checksum, same_places.checksum)
    reshaped = render.dynamic_sections(Configuration(backends=(Backend("0"), a, replace(b, endpoints=()))))[0]
    delta = render.backends_delta(before, reshaped)
    assert ([e.name for e in delta.upsert], delta.remove) == (["0", "b"], ("c",))
    body = json.loads(delta.body())
    assert body["remove"] == ["c"] and [x["name"] for x in body["upsert"]] == ["0", "b"]
    assert render.backends_delta(before, before).size == 0


@pytest.mark.parametrize("changed", [0, 1, 150])
def test_a_section_built_from_the_last_one_equals_one_built_afresh(changed):
    config = Configuration(backends=tuple(Backend(f"b{i:03}", endpoints=(Endpoint("10.0.0.1", 80),)) for i in range(200)))
    render.dynamic_sections(config)  # the hint
    for i in range(changed):
        config = moved(config, i, 81)
    incremental = render.dynamic_sections(config)[0]
    assert incremental.checksum == render.backends_checksum(render.backends_payload(config))
    assert incremental.data == render.backends_payload(config)


def test_lua_client_raises_a_conflict_at_once_and_posts_the_delta_body():
    import httpx

    from platformd.ingress.luaclient import LuaClient

    bodies = []

    def refuse(request):
        bodies.append(json.loads(request.content))
        return httpx.Response(409, json={"error": "base is not the checksum in force", "checksum": "cd"})

    client = LuaClient(Path("/nonexistent.sock"), transport=httpx.MockTransport(refuse), deadline=2.0)
    config = Configuration(backends=(Backend("a"),))
    before = render.dynamic_sections(Configuration())[0]
    delta = render.backends_delta(before, render.dynamic_sections(config)[0])
    with pytest.raises(LuaConflict) as err:
        client.push_delta(delta)
    assert err.value.status == 409 and len(bodies) == 1
    assert bodies[0] == {"base": before.checksum, "checksum": delta.checksum,
                         "upsert": render.backends_payload(config), "remove": []}
