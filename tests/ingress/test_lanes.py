"""Generated lanes (platformd.ingress.lanes): validation, reload decisions,
holding routes back until nginx runs their lane, and real nginx applying
a lane's directives."""

from __future__ import annotations

import stat
from dataclasses import replace

import pytest

from platformd.ingress import lanes
from platformd.ingress.decide import needs_reload
from platformd.ingress.model import Backend, Configuration, Location, Server
from platformd.ingress.routes import RouteTable
from platformd.ingress.validate import ValidationError
from tests.helpers.certs import self_signed

HTTP10 = (("proxy_http_version", "1.0"),)


def config(*servers: Server, defaults: tuple[Location, ...] = ()) -> Configuration:
    return Configuration(servers=servers, backends=(Backend("svc"),), default_server_locations=defaults)


def server(host: str, *pairs: tuple[str, str], path: str = "/") -> Server:
    return Server(host, locations=(Location(path, backend="svc", lane_directives=tuple(pairs)),))


# --- validation -----------------------------------------------------------------


def test_directives_are_validated_and_sorted():
    assert lanes.directives([("proxy_http_version", "1.0"), ("proxy_buffer_size", "8k")]) == (
        ("proxy_buffer_size", "8k"), ("proxy_http_version", "1.0"))
    assert lanes.directives([("proxy_buffers", "4 16k")]) == (("proxy_buffers", "4 16k"),)


@pytest.mark.parametrize("pair", [
    ("proxy_pass", "http://evil"),                 # not a lane directive
    ("include", "/etc/passwd"),
    ("proxy_http_version", "2.0"),
    ("proxy_buffer_size", "8k; include /etc/passwd"),
    ("proxy_buffer_size", "$arg_x"),
    ("proxy_buffers", "4 16k; deny all"),
    ("proxy_buffers", "4"),
    ("proxy_request_buffering", "on\n"),
    ("proxy_ssl_verify_depth", "101"),
    ("proxy_ssl_trusted_certificate", "not pem"),
    ("proxy_ssl_trusted_certificate", "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n}"),
])
def test_hostile_or_unknown_directives_are_refused(pair):
    with pytest.raises(ValidationError) as err:
        lanes.directives([pair])
    assert pair[0] in str(err.value) or "lane_directives" in str(err.value)


def test_a_location_validates_its_directives_and_names_itself():
    with pytest.raises(ValidationError) as err:
        Location("/", backend="svc", lane_directives=(("proxy_buffer_size", "8k;"),))
    assert "location['/']" in str(err.value)
    loc = Location("/", backend="svc", lane_directives=(("proxy_http_version", "1.0"), ("proxy_buffer_size", "8k")))
    assert loc.lane_directives == (("proxy_buffer_size", "8k"), ("proxy_http_version", "1.0"))


def test_the_same_set_gets_the_same_lane_in_the_route_data():
    table = RouteTable().payload(config(server("a.example", *HTTP10), server("b.example", *HTTP10),
                                        server("c.example")))
    policy = {host: table["policies"][entry["prefix"]["/"]["policy"]] for host, entry in table["hosts"].items()}
    base = "@platform_proxy_" + ("on" if Configuration().settings.buffering else "off")
    assert policy["a.example"]["lane"] == policy["b.example"]["lane"] == lanes.lane_name(base, HTTP10)
    assert policy["a.example"]["fast"] is False
    assert policy["c.example"]["lane"] == base
    assert len(lanes.used(config(server("a.example", *HTTP10), server("b.example", *HTTP10)))) == 1


# --- decisions ------------------------------------------------------------------


def test_a_reload_is_needed_only_when_the_set_of_lanes_changes():
    plain = config(server("a.example"))
    one = config(server("a.example", *HTTP10))
    assert needs_reload(plain, one)
    assert not needs_reload(one, config(server("a.example", *HTTP10), server("b.example", *HTTP10)))
    assert needs_reload(one, plain)  # the last user went: the lane goes too


def test_hold_back_keeps_the_running_version_or_leaves_the_host_out():
    running = config(server("a.example"), server("keep.example"))
    desired = config(server("a.example", *HTTP10), server("new.example", *HTTP10), server("keep.example"),
                     defaults=(Location("/d", backend="svc", lane_directives=HTTP10), Location("/e", backend="svc")))
    pushed, held = lanes.hold_back(desired, running, frozenset())
    assert held == ("a.example", "new.example", "_")
    assert [s.hostname for s in pushed.servers] == ["a.example", "keep.example"]
    assert pushed.servers[0] is running.servers[0]
    assert [loc.path for loc in pushed.default_server_locations] == ["/e"]
    # once nginx runs the lane, nothing is held back
    assert lanes.hold_back(desired, running, lanes.used(desired)) == (desired, ())


def _walk(config: Configuration) -> tuple[lanes.LaneSpec, ...]:
    """The lanes ``config`` uses, by walking every location (the reference)."""
    locs = [loc for s in config.servers for loc in s.locations] + list(config.default_server_locations)
    for table in config.bound:
        locs += [loc for s in table.servers for loc in s.locations] + list(table.any_host)
    return tuple(sorted({lanes.LaneSpec(lanes.base_lane(loc, config.settings), loc.lane_directives)
                         for loc in locs if loc.lane_directives}))


def test_a_lane_index_reused_across_derived_configurations_equals_a_fresh_walk():
    import random

    from platformd.ingress.model import BoundHosts

    rng = random.Random(7)
    sets = [(), HTTP10, (("proxy_buffer_size", "8k"),), (("proxy_http_version", "1.0"), ("proxy_buffer_size", "16k"))]

    def host(i: int) -> Server:
        return server(f"h{i}.example", *rng.choice(sets))

    servers = {i: host(i) for i in range(60)}
    index = lanes.LaneIndex()
    current = config(*servers.values())
    running = None
    for step in range(200):
        for i in rng.sample(range(80), rng.randint(0, 4)):  # replace, add or drop a few Servers
            if rng.random() < 0.3:
                servers.pop(i, None)
            else:
                servers[i] = host(i)
        settings = current.settings
        if step % 37 == 0:  # base lanes follow the buffering setting
            settings = replace(settings, buffering=not settings.buffering)
        bound = ()
        if step % 3 == 0:  # a Gateway table sharing some of the very same Servers
            bound = (BoundHosts(None, 8080, servers=tuple(list(servers.values())[:5]),
                                any_host=(Location("/any", backend="svc", lane_directives=rng.choice(sets)),)),)
        desired = replace(current, servers=tuple(servers.values()), settings=settings, bound=bound)
        assert lanes.used(desired, index) == _walk(desired)
        if running is not None:
            assert lanes.used(running, index) == _walk(running)
        have = frozenset(rng.sample(_walk(desired), k=len(_walk(desired)) // 2))
        assert lanes.hold_back(desired, running, have, index) == lanes.hold_back(desired, running, have)
        running, current = current, desired


# --- real nginx -------------------------------------------------------------------


def test_a_lane_applies_its_directive_and_reloads_only_for_a_new_set(dataplane, backends):
    (b0,) = backends(1)
    backend = (Backend("svc", endpoints=(b0.endpoint,)),)
    plain = Configuration(servers=(server("a.example"), server("b.example")), backends=backend)
    assert dataplane.apply(plain).ok
    assert dataplane.get("/", host="a.example").headers["X-Request-Version"] == "HTTP/1.1"
    reloads = dataplane.registry.get_sample_value("nginx_ingress_controller_success")

    first = dataplane.apply(replace(plain, servers=(server("a.example", *HTTP10), server("b.example"))))
    assert first.ok and first.kind == "reload", (first, dataplane.error_log())
    assert {dataplane.get("/", host="a.example").headers["X-Request-Version"] for _ in range(4)} == {"HTTP/1.0"}
    assert dataplane.get("/", host="b.example").headers["X-Request-Version"] == "HTTP/1.1"

    second = dataplane.apply(replace(plain, servers=(server("a.example", *HTTP10), server("b.example", *HTTP10))))
    assert second.ok and second.kind == "dynamic", second
    assert dataplane.get("/", host="b.example").headers["X-Request-Version"] == "HTTP/1.0"
    assert dataplane.registry.get_sample_value("nginx_ingress_controller_success") == reloads + 1


def test_a_route_waits_for_its_lane_when_the_reload_is_deferred(dataplane, backends):
    (b0,) = backends(1)
    backend = (Backend("svc", endpoints=(b0.endpoint,)),)
    plain = Configuration(servers=(server("a.example"),), backends=backend)
    assert dataplane.apply(plain).ok
    dataplane.plane.min_reload_interval = 3600.0  # the next reload is due in an hour
    desired = replace(plain, servers=(server("a.example", *HTTP10), server("new.example", *HTTP10)))
    result = dataplane.apply(desired)
    assert result.ok and result.reload_in > 0, result
    # Held back: a.example keeps its running version, new.example is not served yet.
    assert dataplane.get("/", host="a.example").headers["X-Request-Version"] == "HTTP/1.1"
    assert dataplane.get("/", host="new.example").status_code == 404
    dataplane.plane.min_reload_interval = 0.0
    again = dataplane.apply(desired)
    assert again.ok and again.kind == "reload", again
    assert dataplane.get("/", host="new.example").headers["X-Request-Version"] == "HTTP/1.0"


def test_file_directives_are_written_privately_and_loaded(dataplane, backends, tmp_path):
    (b0,) = backends(1)
    pem, _ = self_signed("ca.example", tmp_path)
    desired = Configuration(servers=(server("a.example", ("proxy_ssl_trusted_certificate", pem)),),
                            backends=(Backend("svc", endpoints=(b0.endpoint,)),))
    result = dataplane.apply(desired)
    assert result.ok, (result, dataplane.error_log())
    path = lanes.file_path(dataplane.runtime.files.lane_files, lanes.directives(
        [("proxy_ssl_trusted_certificate", pem)])[0][1])
    assert path.read_text() == lanes.directives([("proxy_ssl_trusted_certificate", pem)])[0][1]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert str(path) in dataplane.nginx.files.conf.read_text()
    assert dataplane.get("/", host="a.example").status_code == 200  # plain-HTTP backend: the CA is unused
