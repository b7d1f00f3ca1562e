"""nginx's memory report (lua/memory.lua) and padded sections (lua/util/slab.lua), through real nginx.

``GET /memory`` on the configuration socket is what bench/bench_dataplane.py
reads beside /proc: each process's Lua heap and the shared dicts' use. Large
sections are stored padded to a size class; what a GET returns and what the
router serves must not change.
"""

from __future__ import annotations

import json

import httpx

from platformd.ingress.model import Backend, Configuration, Location, Server
from platformd.ingress.routes import shard_of
from tests.helpers.waiting import wait_for


def config_socket(dataplane) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(dataplane.runtime.socket)),
                        base_url="http://nginx-config", timeout=10)


def test_memory_report_names_every_process_and_dict(dataplane, backends):
    (b0,) = backends(1)
    config = Configuration(servers=(Server("app.example.com", locations=(Location("/", backend="app"),)),),
                           backends=(Backend("app", endpoints=(b0.endpoint,)),))
    assert dataplane.apply(config).ok
    workers = set(dataplane.nginx.worker_pids())
    with config_socket(dataplane) as lua:
        def every_worker_recorded():
            report = lua.get("/memory").json()
            return report if {w["pid"] for w in report["workers"]} == workers else None
        report = wait_for(every_worker_recorded, message="both workers record their heap from the warm-up timer")
    assert report["master"]["pid"] == dataplane.nginx.master_pid()
    assert report["master"]["lua_kb"] > 0
    assert sorted(w["id"] for w in report["workers"]) == [0, 1]
    assert all(w["lua_kb"] > 0 for w in report["workers"])
    # the largest heap a worker recorded, and its JIT traces and flushes (jit.attach) as counts
    assert all(w["peak_kb"] >= w["lua_kb"] for w in report["workers"])
    assert all(isinstance(w["traces"], int) and w["traces"] >= 0 and w["flushes"] == 0 for w in report["workers"])
    config_dict = report["dicts"]["platform_configuration"]
    assert config_dict["capacity"] == 64 * 2**20
    assert 0 < config_dict["free"] < config_dict["capacity"]
    assert set(report["dicts"]) == {"platform_configuration", "platform_certificates", "platform_balancer",
                                    "platform_limits", "platform_auth"}


def test_large_shard_is_served_and_read_back_as_posted(dataplane, backends):
    """A shard of many hosts (over a page: stored padded) answers GET with the
    data posted and routes every host; replacing it keeps doing so."""
    (b0,) = backends(1)
    shard = 0
    same = [n for n in (f"h{i}.padded.example" for i in range(20000)) if shard_of(n) == shard][:40]
    for round_ in range(3):  # each version a little longer than the last
        hosts = tuple(Server(n, locations=(Location("/", backend="app"), Location(f"/r{round_}" * (round_ + 1),
                                                                                   backend="app")))
                      for n in same)
        config = Configuration(servers=hosts, backends=(Backend("app", endpoints=(b0.endpoint,)),))
        assert dataplane.apply(config).ok
        with config_socket(dataplane) as lua:
            raw = lua.get(f"/configuration/routes_{shard}").text
        assert len(raw) > 4096  # over a page: stored padded to its class (util/slab.lua) ...
        assert raw.endswith(" ")  # ... with spaces, which any JSON reader skips
        loaded = json.loads(raw)
        assert set(loaded["data"]["hosts"]) == set(same)
        assert all(f"/r{round_}" * (round_ + 1) in loaded["data"]["hosts"][n]["prefix"] for n in same)
        for name in same[:3]:
            assert dataplane.get("/", host=name).text == b0.name


def test_a_new_version_of_a_shard_is_checked_where_it_changed(dataplane, backends):
    """A worker does not check again the hosts a shard's new version left as
    they were (util/schema validate_routes_shard), so what changed must be:
    a bad regex (PCRE's own verdict) or backend in one host of the shard is
    refused with the host named, and the version in force keeps serving."""
    (b0,) = backends(1)
    shard = 0
    names = [n for n in (f"h{i}.checked.example" for i in range(5000)) if shard_of(n) == shard][:6]
    config = Configuration(
        servers=tuple(Server(n, locations=(Location("/", backend="app"), Location("/r[0-9]+", match="regex", backend="app")))
                      for n in names),
        backends=(Backend("app", endpoints=(b0.endpoint,)),))
    assert dataplane.apply(config).ok
    with config_socket(dataplane) as lua:
        posted = json.loads(lua.get(f"/configuration/routes_{shard}").text)
        version = posted["version"]

        def post(data):
            return lua.post(f"/configuration/routes_{shard}", json={"checksum": "ab12", "data": data})

        changed = json.loads(json.dumps(posted["data"]))
        changed["hosts"][names[2]]["regex"][0]["pattern"] = "^/r(["
        r = post(changed)
        assert r.status_code == 400, r.text
        assert f"hosts[{names[2]}].regex[1].pattern: invalid regex" in r.json()["error"]
        assert "missing" in r.json()["error"]  # PCRE's message ("missing terminating ]")
        changed = json.loads(json.dumps(posted["data"]))
        changed["hosts"][names[4]]["prefix"]["/"]["backend"] = "not a name"
        r = post(changed)
        assert r.status_code == 400, r.text
        assert f"hosts[{names[4]}].prefix[/].backend" in r.json()["error"]
        assert json.loads(lua.get(f"/configuration/routes_{shard}").text)["version"] == version
        r = post(json.loads(json.dumps(posted["data"])))  # the same hosts again: taken
        assert r.status_code == 201, r.text
    for name in names:
        assert dataplane.get("/r42", host=name).text == b0.name
