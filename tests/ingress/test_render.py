"""Rendering nginx.conf and the Lua payloads (pure; one test runs `nginx -t`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from platformd import paths
from platformd.ingress import render
from platformd.ingress.model import (
    AccessControl,
    Backend,
    BackendProtocol,
    Certificate,
    Configuration,
    Cors,
    Endpoint,
    GlobalSettings,
    Listen,
    Location,
    PathMatch,
    ProxySettings,
    RateLimit,
    Redirect,
    Server,
    SessionAffinity,
    Timeouts,
    TrafficShapingPolicy,
    Workers,
)
from platformd.ingress.validate import ValidationError
from platformd.ingress.view import RuntimePaths

CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"


def runtime(base: Path = Path("/var/lib/platformd")) -> RuntimePaths:
    return RuntimePaths(base, paths.lua_dir(), base / "default.crt", base / "default.key")


def rich_config(**settings) -> Configuration:
    """One of everything the annotations of the next issue need."""
    api = Location(
        "/api",
        backend="ns-api-80",
        proxy=ProxySettings(timeouts=Timeouts(connect=3, read=120), body_size="8m", buffering=True, upstream_vhost="api.internal"),
        access=AccessControl(allow=("10.0.0.0/8", "192.168.1.1"), deny=("10.9.0.0/16",)),
        rate_limit=RateLimit(rps=10, connections=5),
        cors=Cors(allow_origins=("https://app.example.com", "https://*.example.org"), expose_headers=("X-Total",)),
        ssl_redirect=True,
    )
    return Configuration(
        servers=(
            Server(
                "example.com",
                aliases=("www.example.com",),
                tls_certificate="ns/tls",
                locations=(
                    Location("/", backend="ns-web-80"),
                    api,
                    Location("/api", match=PathMatch.EXACT, backend="ns-exact-80"),
                    Location("/foo(/|$)(.*)", match=PathMatch.REGEX, backend="ns-web-80", rewrite_target="/$2"),
                    Location("/old", redirect=Redirect("https://new.example.com/", 301)),
                    Location("/grpc", backend="ns-grpc-50051", proxy=ProxySettings(protocol=BackendProtocol.GRPC)),
                    Location("/tls", backend="ns-tls-443", proxy=ProxySettings(protocol="HTTPS")),
                    Location("/open", backend="ns-web-80", cors=Cors()),
                ),
            ),
            Server("*.wild.example.com", locations=(Location("/", backend="ns-web-80"),)),
            Server("app.example.com", redirect=Redirect("/app", 302), locations=(Location("/", backend="ns-web-80"),)),
        ),
        backends=(
            Backend("ns-web-80", endpoints=(Endpoint("10.1.0.1", 8080),)),
            Backend("ns-api-80", session_affinity=SessionAffinity(cookie_name="route", max_age=60)),
            Backend("ns-grpc-50051", load_balance="ewma"),
        ),
        certificates=(Certificate("ns/tls", CERT, KEY, hostnames=("example.com",)),),
        default_backend="ns-default-80",
        settings=GlobalSettings(**settings),
    )


def test_equal_input_renders_byte_identical_output():
    config = rich_config()
    shuffled = Configuration(
        servers=tuple(reversed(config.servers)),
        backends=tuple(reversed(config.backends)),
        certificates=config.certificates,
        default_backend=config.default_backend,
    )
    assert render.render_nginx_conf(config, runtime()) == render.render_nginx_conf(shuffled, runtime())


def test_contract_hooks_are_rendered():
    text = render.render_nginx_conf(rich_config(), runtime())
    for needle in (
        "lua_shared_dict platform_configuration 64m;",
        "lua_shared_dict platform_certificates 32m;",
        "lua_shared_dict platform_balancer 16m;",
        "lua_shared_dict platform_limits 16m;",
        'init_by_lua_block { require("platform").init({ unavailable = { address = "127.0.0.2", port = 80 },'
        ' state = "/var/lib/platformd/lua-state" }) }',
        "listen 127.0.0.2:80;",
        'init_worker_by_lua_block { require("platform").init_worker() }',
        'balancer_by_lua_block { package.loaded.balancer.balance() }',
        'set_by_lua_block $proxy_upstream_name { return package.loaded.router.fast() }',
        'balancer_by_lua_block { require("balancer").balance_lane() }',
        'rewrite_by_lua_block { require("router").route() }',
        'rewrite_by_lua_block { require("router").route("@platform_proxy_on") }',
        'log_by_lua_block { require("router").log() }',
        'ssl_client_hello_by_lua_block { require("certificate").call() }',
        'content_by_lua_block { require("configuration").call() }',
        'listen "unix:/var/lib/platformd/private/nginx-config.sock";',
        "proxy_pass http://upstream_balancer;",
        "proxy_pass $platform_scheme://$platform_lane_upstream;",
        "upstream upstream_lane {",
        "upstream upstream_lane_tls {",
        "grpc_pass grpc://upstream_lane_grpc;",
        "grpc_pass grpcs://upstream_lane_grpcs;",
        "client_max_body_size 0;",
        f'lua_package_path "{paths.lua_dir()}/?.lua;',
    ):
        assert needle in text, needle


def locations_of(text: str) -> list[str]:
    return re.findall(r"^\s*location (.+?) \{$", text, flags=re.M)


def test_nginx_conf_has_a_fixed_set_of_lanes_whatever_the_routes():
    """No server, location or zone per Ingress: the file depends on the
    global settings alone, so 1 and 1,000 hosts give the same text."""
    one = rich_config()
    many = replace(one, servers=one.servers + tuple(
        Server(f"h{i}.example.com", locations=(Location("/", backend="ns-web-80"),
                                               Location(f"/p{i}", backend="ns-api-80", rate_limit=RateLimit(rps=i + 1))))
        for i in range(1000)))
    assert render.render_nginx_conf(many, runtime()) == render.render_nginx_conf(one, runtime())
    assert render.render_nginx_conf(Configuration(), runtime()) == render.render_nginx_conf(one, runtime())
    assert locations_of(render.render_nginx_conf(one, runtime())) == [
        "/", "@platform_proxy_on", "@platform_proxy_off", "@platform_grpc", "@platform_grpcs",
        "@platform_custom_error", "= /_platform_auth",
        "= /_platform_mirror", "^~ /_platform_mirror/", "= /_platform_mirror_nobody", "^~ /_platform_mirror_nobody/",
        "= /_platform_mirror_grpc", "^~ /_platform_mirror_grpc/",
        "/", "/configuration", "= /healthz", "= /memory", "= /platform-variables", "/"]


def test_global_settings_are_rendered():
    settings = dict(
        listen=Listen(8080, 8443),
        workers=Workers(processes=3, connections=1024),
        server_tokens=True,
        use_forwarded_headers=True,
        body_size="2m",
        timeouts=Timeouts(connect=5, send=60, read=30),
        buffering=True,
    )
    text = render.render_nginx_conf(rich_config(**settings), runtime())
    for needle in (
        "worker_processes 3;",
        "worker_connections 1024;",
        "listen 8080 default_server",
        "listen 8443 ssl http2 default_server",
        "server_tokens on;",
        "map $http_x_forwarded_proto $pass_access_scheme {",
        "ssl_protocols TLSv1.2 TLSv1.3;",
        "proxy_read_timeout 30s;",
        "proxy_buffering on;\n            proxy_pass http://upstream_balancer;",
    ):
        assert needle in text, needle
    assert "user " not in text.split("worker_processes")[0]


def test_socket_path_length_is_checked():
    long_dir = Path("/tmp/" + "x" * 100)
    with pytest.raises(ValidationError, match="unix socket path"):
        render.render_nginx_conf(Configuration(), runtime(long_dir))


def test_runtime_paths_must_be_plain():
    with pytest.raises(ValidationError):
        render.render_nginx_conf(Configuration(), runtime(Path('/tmp/a";b')))


def test_no_user_value_escapes_its_token():
    """Every quoted token in the output closes on the same line and no user
    value introduces a directive: each non-comment line ends with ; { or }."""
    text = render.render_nginx_conf(rich_config(), runtime())
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        code = stripped.split(" # ")[0]
        assert code.endswith((";", "{", "}")), line
        assert len(re.findall(r'(?<!\\)"', code)) % 2 == 0, line


@pytest.mark.skipif(not os.path.exists("/usr/sbin/nginx"), reason="nginx is not installed")
def test_rich_configuration_passes_nginx_t(tmp_path):
    if not (paths.lua_dir() / "platform.lua").exists():
        pytest.skip("lua/ not there yet")
    state = Path(os.environ.get("TMPDIR", "/tmp")) / f"pd-render-{os.getpid()}"
    shutil.rmtree(state, ignore_errors=True)
    (state / "logs").mkdir(parents=True)
    (state / "tmp").mkdir()
    (state / "private").mkdir(mode=0o700)  # the configuration socket's directory (layout.py)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(state / "default.key"), "-out", str(state / "default.crt"), "-days", "1", "-subj", "/CN=t"],
        check=True, capture_output=True,
    )
    try:
        text = render.render_nginx_conf(rich_config(listen=Listen(18080, 18443)), runtime(state))
        conf = state / "nginx.conf"
        conf.write_text(text)
        result = subprocess.run(
            ["/usr/sbin/nginx", "-t", "-p", str(state), "-c", str(conf), "-e", str(state / "logs/error.log")],
            capture_output=True, text=True,
        )
        assert result.returncode == 0, result.stderr
    finally:
        shutil.rmtree(state, ignore_errors=True)


# --- Lua payloads ---------------------------------------------------------------


def test_backends_payload_follows_the_protocol():
    config = Configuration(
        backends=(
            Backend(
                "ns-svc-80",
                endpoints=(Endpoint("10.0.0.2", 80), Endpoint("10.0.0.1", 80)),
                load_balance="ewma",
                upstream_hash_by="$request_uri",
                session_affinity=SessionAffinity(cookie_name="route", mode="persistent", max_age=3600, samesite="Lax"),
                alternative_backends=("ns-canary-80",),
            ),
            Backend(
                "ns-canary-80",
                traffic_shaping_policy=TrafficShapingPolicy(weight=30, header="X-Canary", cookie="canary"),
            ),
        )
    )
    payload = render.backends_payload(config)
    assert [b["name"] for b in payload] == ["ns-canary-80", "ns-svc-80"]
    svc = payload[1]
    assert svc["endpoints"] == [{"address": "10.0.0.1", "port": 80}, {"address": "10.0.0.2", "port": 80}]
    assert svc["load_balance"] == "ewma"
    assert svc["upstream_hash_by"] == "$request_uri"
    assert svc["session_affinity"] == {
        "type": "cookie",
        "mode": "persistent",
        "cookie": {"name": "route", "max_age": 3600, "path": "/", "samesite": "Lax", "secure": False},
    }
    assert svc["alternative_backends"] == ["ns-canary-80"]
    assert payload[0]["traffic_shaping_policy"] == {
        "weight": 30, "weight_total": 100, "header": "X-Canary", "header_value": "", "header_pattern": "", "cookie": "canary",
    }


def test_certificates_payload_maps_names_to_content_ids():
    other = CERT.replace("MIIB", "MIIC")
    config = Configuration(
        servers=(Server("a.com", aliases=("www.a.com",), tls_certificate="ns/a"), Server("b.com", tls_certificate="ns/missing")),
        certificates=(Certificate("ns/a", CERT, KEY), Certificate("ns/wild", other, KEY, hostnames=("*.b.com",))),
    )
    payload = render.certificates_payload(config)
    uid_a = render.certificate_uid(CERT, KEY)
    uid_w = render.certificate_uid(other, KEY)
    assert payload["servers"] == {"*.b.com": uid_w, "a.com": uid_a, "www.a.com": uid_a}
    assert set(payload["certificates"]) == {uid_a, uid_w}
    assert payload["certificates"][uid_a].startswith("-----BEGIN CERTIFICATE-----")
    assert "PRIVATE KEY" in payload["certificates"][uid_a]
    assert payload["default"] is None


def test_checksum_is_of_canonical_json():
    assert render.checksum({"b": 1, "a": [1, 2]}) == render.checksum({"a": [1, 2], "b": 1})
    sections = render.dynamic_sections(rich_config())
    assert [s.name for s in sections] == ["backends", "certificates", "routes", *(f"routes_{i}" for i in range(256))]
    assert all(len(s.checksum) == 64 for s in sections)


def test_routes_revalidate_values_that_bypassed_the_model():
    """A model object forged past its validators still never reaches Lua."""
    from platformd.ingress.routes import payload

    location = Location("/ok", backend="svc")
    object.__setattr__(location, "backend", 'svc"; } location /x { content_by_lua_block { os.exit() } #')
    config = Configuration(servers=(Server("a.com", locations=(location,)),))
    with pytest.raises(ValidationError) as err:
        payload(config)
    assert err.value.field == "server[a.com].location[/ok].backend"
