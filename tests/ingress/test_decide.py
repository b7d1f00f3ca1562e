"""Reload or dynamic update, decided on plain data: only global settings reload."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from platformd.ingress.decide import decide
from platformd.ingress.model import (
    AccessControl,
    Backend,
    Cors,
    Listen,
    RateLimit,
    Redirect,
    Certificate,
    Configuration,
    Endpoint,
    GlobalSettings,
    Hsts,
    Location,
    ProxySettings,
    Server,
    SessionAffinity,
    Timeouts,
    TrafficShapingPolicy,
)
from platformd.ingress.render import render_nginx_conf
from platformd.ingress.view import RuntimePaths

CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
RUNTIME = RuntimePaths(Path("/run/pd"), Path("/opt/lua"), Path("/run/pd/c.crt"), Path("/run/pd/c.key"))


def base() -> Configuration:
    return Configuration(
        servers=(
            Server("a.com", tls_certificate="ns/a", locations=(Location("/", backend="svc"), Location("/c", backend="canary"))),
        ),
        backends=(
            Backend("svc", endpoints=(Endpoint("10.0.0.1", 80),), alternative_backends=("canary",)),
            Backend("canary", endpoints=(Endpoint("10.0.0.9", 80),), traffic_shaping_policy=TrafficShapingPolicy(weight=10)),
        ),
        certificates=(Certificate("ns/a", CERT, KEY, hostnames=("a.com",)),),
    )


def with_backend(config: Configuration, name: str, **changes) -> Configuration:
    backends = tuple(replace(b, **changes) if b.name == name else b for b in config.backends)
    return replace(config, backends=backends)


def with_server(config: Configuration, **changes) -> Configuration:
    return replace(config, servers=(replace(config.servers[0], **changes),))


DYNAMIC_CHANGES = {
    "endpoint added": lambda c: with_backend(c, "svc", endpoints=(Endpoint("10.0.0.1", 80), Endpoint("10.0.0.2", 80))),
    "endpoints emptied": lambda c: with_backend(c, "svc", endpoints=()),
    "canary weight": lambda c: with_backend(c, "canary", traffic_shaping_policy=TrafficShapingPolicy(weight=90)),
    "canary header": lambda c: with_backend(c, "canary", traffic_shaping_policy=TrafficShapingPolicy(header="X-Canary")),
    "plain backend hashed": lambda c: with_backend(c, "canary", upstream_hash_by="$request_uri"),
    "affinity": lambda c: with_backend(c, "svc", session_affinity=SessionAffinity()),
    "hash key": lambda c: with_backend(c, "svc", upstream_hash_by="$request_uri"),
    "certificate renewed": lambda c: replace(
        c, certificates=(Certificate("ns/a", CERT.replace("MIIB", "MIIC"), KEY, hostnames=("a.com",)),)
    ),
    "certificate reference": lambda c: replace(
        with_server(c, tls_certificate="ns/b"),
        certificates=(*c.certificates, Certificate("ns/b", CERT.replace("MIIB", "MIID"), KEY)),
    ),
    "new backend": lambda c: replace(c, backends=(*c.backends, Backend("spare"))),
    "default certificate": lambda c: replace(c, default_certificate="ns/a"),
}

# Every route change kind of the issue: data for the Lua router, no reload.
ROUTE_CHANGES = {
    "location added": lambda c: with_server(c, locations=(*c.servers[0].locations, Location("/new", backend="svc"))),
    "exact path": lambda c: with_server(c, locations=(*c.servers[0].locations, Location("/e", match="exact", backend="svc"))),
    "regex path": lambda c: with_server(c, locations=(*c.servers[0].locations, Location("/r[0-9]+", match="regex", backend="svc"))),
    "rewrite-target": lambda c: with_server(c, locations=(Location("/", backend="svc", rewrite_target="/x"), Location("/c", backend="canary"))),
    "timeout": lambda c: with_server(
        c, locations=(Location("/", backend="svc", proxy=ProxySettings(timeouts=Timeouts(read=5))), Location("/c", backend="canary"))
    ),
    "proxy-body-size": lambda c: with_server(
        c, locations=(Location("/", backend="svc", proxy=ProxySettings(body_size="8m")), Location("/c", backend="canary"))
    ),
    "gRPC backend": lambda c: with_server(
        c, locations=(Location("/", backend="svc", proxy=ProxySettings(protocol="GRPC")), Location("/c", backend="canary"))
    ),
    "ssl-redirect": lambda c: with_server(c, locations=(Location("/", backend="svc", ssl_redirect=True), Location("/c", backend="canary"))),
    "allowlist and limits": lambda c: with_server(c, locations=(
        Location("/", backend="svc", access=AccessControl(allow=("10.0.0.0/8",)), rate_limit=RateLimit(rps=5, connections=2)),
        Location("/c", backend="canary"))),
    "CORS": lambda c: with_server(c, locations=(Location("/", backend="svc", cors=Cors()), Location("/c", backend="canary"))),
    "redirect": lambda c: with_server(c, locations=(Location("/", redirect=Redirect("https://x.example/")), Location("/c", backend="canary"))),
    "alias": lambda c: with_server(c, aliases=("www.a.com",)),
    "server added": lambda c: replace(c, servers=(*c.servers, Server("b.com", locations=(Location("/", backend="svc"),)))),
    "server removed": lambda c: replace(c, servers=()),
    "default backend": lambda c: replace(c, default_backend="svc"),
    "TLS host (HSTS)": lambda c: with_server(c, tls=True),
    "canary removed": lambda c: with_backend(c, "svc", alternative_backends=()),
    "EWMA": lambda c: with_backend(c, "svc", load_balance="ewma"),
    "affinity on a plain backend": lambda c: with_backend(c, "canary", session_affinity=SessionAffinity()),
    "catch-all location": lambda c: replace(c, default_server_locations=(Location("/x", backend="svc"),)),
}
ROUTE_CHANGES["global body size (route data)"] = lambda c: replace(c, settings=replace(c.settings, body_size="2m"))
ROUTE_CHANGES["HSTS settings (route data)"] = lambda c: replace(c, settings=replace(
    c.settings, tls=replace(c.settings.tls, redirect_code=301, hsts=Hsts(max_age=60))))
DYNAMIC_CHANGES.update(ROUTE_CHANGES)

SHAPE_CHANGES = {
    "keepalive": lambda c: replace(c, settings=GlobalSettings(keepalive_timeout=10)),
    "global timeouts": lambda c: replace(c, settings=GlobalSettings(timeouts=Timeouts(connect=1, send=2, read=3))),
    "ports": lambda c: replace(c, settings=replace(c.settings, listen=Listen(http_port=8080))),
}


def test_first_apply_reloads_and_pushes_everything():
    decision = decide(None, base())
    assert decision.reload
    assert [s.name for s in decision.sections] == ["backends", "certificates", "routes",
                                                   *(f"routes_{i}" for i in range(256))]


def test_nothing_changed_is_a_noop():
    assert decide(base(), base()).noop


@pytest.mark.parametrize("name", sorted(DYNAMIC_CHANGES))
def test_dynamic_changes_need_no_reload(name):
    desired = DYNAMIC_CHANGES[name](base())
    decision = decide(base(), desired)
    assert not decision.reload
    assert decision.sections


@pytest.mark.parametrize("name", sorted(DYNAMIC_CHANGES))
def test_dynamic_changes_really_leave_nginx_conf_alone(name):
    """The contract decide relies on: nothing dynamic is rendered."""
    desired = DYNAMIC_CHANGES[name](base())
    assert render_nginx_conf(desired, RUNTIME) == render_nginx_conf(base(), RUNTIME)


def test_only_changed_sections_are_pushed():
    endpoints = decide(base(), DYNAMIC_CHANGES["endpoint added"](base()))
    assert [s.name for s in endpoints.sections] == ["backends"]
    certs = decide(base(), DYNAMIC_CHANGES["certificate renewed"](base()))
    assert [s.name for s in certs.sections] == ["certificates"]


@pytest.mark.parametrize("name", sorted(SHAPE_CHANGES))
def test_shape_changes_reload(name):
    desired = SHAPE_CHANGES[name](base())
    assert decide(base(), desired).reload
    assert render_nginx_conf(desired, RUNTIME) != render_nginx_conf(base(), RUNTIME)


def test_shape_and_dynamic_change_together():
    desired = DYNAMIC_CHANGES["endpoint added"](SHAPE_CHANGES["keepalive"](base()))
    decision = decide(base(), desired)
    assert decision.reload and [s.name for s in decision.sections] == ["backends"]


def test_sections_are_computed_once_per_configuration():
    from platformd.ingress.render import dynamic_sections

    config, twin = base(), base()
    assert dynamic_sections(config) is dynamic_sections(config)
    # Equal but distinct objects give equal (not shared) results.
    assert dynamic_sections(twin) == dynamic_sections(config)
    assert dynamic_sections(twin) is not dynamic_sections(config)
    assert decide(config, twin).noop


def test_cached_results_go_with_their_configuration():
    import gc
    import weakref

    from platformd.ingress.render import dynamic_sections

    config = base()
    sections = weakref.ref(dynamic_sections(config)[0])
    del config
    gc.collect()
    assert sections() is None


def test_a_new_host_pushes_only_its_shard_of_the_route_table():
    from platformd.ingress.routes import shard_of

    running = base()
    desired = ROUTE_CHANGES["server added"](running)
    assert [s.name for s in decide(running, desired).sections] == [f"routes_{shard_of('b.com')}"]
