"""Rendering nginx.conf and the Lua payloads (pure; one test runs `nginx -t`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
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
        'init_by_lua_block { require("platform").init({ unavailable = { address = "127.0.0.2", port = 80 } }) }',
        "listen 127.0.0.2:80;",
        'init_worker_by_lua_block { require("platform").init_worker() }',
        'balancer_by_lua_block { require("balancer").balance() }',
        'access_by_lua_block { require("balancer").access() }',
        'log_by_lua_block { require("balancer").log() }',
        'ssl_client_hello_by_lua_block { require("certificate").call() }',
        'content_by_lua_block { require("configuration").call() }',
        'listen "unix:/var/lib/platformd/private/nginx-config.sock";',
        "proxy_pass http://upstream_balancer;",
        "grpc_pass grpc://upstream_balancer;",
        "proxy_pass https://upstream_balancer;",
        'set $proxy_upstream_name "ns-api-80";',
        f'lua_package_path "{paths.lua_dir()}/?.lua;',
    ):
        assert needle in text, needle


def locations_of(text: str) -> list[str]:
    return re.findall(r"^\s*location (.+?) \{$", text, flags=re.M)


def test_path_semantics():
    text = render.render_nginx_conf(rich_config(), runtime())
    server = text.split('server_name "example.com" "www.example.com";')[1].split("\n    }\n")[0]
    found = locations_of(server)
    # A server with a Regex path: Prefix paths become element-wise regexes,
    # tried longest first, a Prefix before a Regex of equal length.
    assert found == [
        '= "/api"',  # Exact /api wins over Prefix /api
        '"/"',
        '~* "^/foo(/|$)(.*)"',
        '~ "^/grpc(?:/|$)"',
        '~ "^/open(?:/|$)"',
        '~ "^/api(?:/|$)"',
        '~ "^/old(?:/|$)"',
        '~ "^/tls(?:/|$)"',
    ]
    assert 'rewrite "(?i)^/foo(/|$)(.*)" "/$2" break;' in server


def test_prefix_paths_without_regex_neighbours_stay_plain_prefixes():
    config = Configuration(servers=(Server("example.com", locations=(
        Location("/api", backend="b"), Location("/api", match=PathMatch.EXACT, backend="b"), Location("/old", backend="b"),
    )),))
    server = render.render_nginx_conf(config, runtime()).split('server_name "example.com";')[1]
    found = locations_of(server.split("\n    }\n")[0])
    # Exact /api wins over Prefix /api, whose exact half is left out;
    # Prefix /old is element-wise: = /old and /old/ (not /oldfoo); no Prefix
    # "/" of its own: a 404 instead of nginx's static files.
    assert found == ['= "/api"', '"/api/"', '= "/old"', '"/old/"', '"/"']
    assert "return 404;" in server.split('location "/" {')[1].split("}")[0]


def test_location_settings_are_rendered():
    text = render.render_nginx_conf(rich_config(), runtime())
    api = text.split('location ~ "^/api(?:/|$)" {')[1].split("\n        }\n")[0]
    for needle in (
        "deny 10.9.0.0/16;",
        "allow 10.0.0.0/8;",
        "allow 192.168.1.1/32;",
        "deny all;",
        "limit_req zone=rps_",
        "limit_conn conn_",
        "proxy_connect_timeout 3s;",
        "proxy_send_timeout 60s;",
        "proxy_read_timeout 120s;",
        "client_max_body_size 8m;",
        "proxy_buffering on;",
        'proxy_set_header Host "api.internal";',
        "return 308 https://$host$request_uri;",
        "add_header Access-Control-Expose-Headers \"X-Total\" always;",
    ):
        assert needle in api, needle
    assert api.index("deny 10.9.0.0/16") < api.index("allow 10.0.0.0/8") < api.index("deny all")
    assert re.search(r"limit_req_zone \$binary_remote_addr zone=rps_[0-9a-f]{16}:5m rate=10r/s;", text)
    assert 'if ($http_origin ~* "^(?:https://[A-Za-z0-9-]+\\\\.example\\\\.org|https://app\\\\.example\\\\.com)$")' in api
    assert 'return 301 "https://new.example.com/";' in text
    assert 'return 302 "/app";' in text
    assert r'server_name "~^[^.]+\\.wild\\.example\\.com$";' in text  # one label only


def test_default_server_404_or_default_backend():
    with_default = render.render_nginx_conf(rich_config(), runtime())
    catch_all = with_default.split("server_name _;")[1].split("server {")[0]
    assert 'set $proxy_upstream_name "ns-default-80";' in catch_all
    assert "proxy_pass http://upstream_balancer;" in catch_all
    bare = render.render_nginx_conf(Configuration(), runtime())
    assert "return 404;" in bare.split("server_name _;")[1].split("server {")[0]


def test_global_settings_are_rendered():
    settings = dict(
        listen=Listen(8080, 8443),
        workers=Workers(processes=3, connections=1024),
        server_tokens=True,
        use_forwarded_headers=True,
    )
    text = render.render_nginx_conf(rich_config(**settings), runtime())
    for needle in (
        "worker_processes 3;",
        "worker_connections 1024;",
        "listen 8080 default_server",
        "listen 8443 ssl http2 default_server",
        "server_tokens on;",
        "map $http_x_forwarded_proto $pass_access_scheme {",
        "return 308 https://$host:8443$request_uri;",
        "ssl_protocols TLSv1.2 TLSv1.3;",
        'https "max-age=31536000; includeSubDomains";',
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
    assert [s.name for s in sections] == ["backends", "certificates", "general", "routes"]
    assert all(len(s.checksum) == 64 for s in sections)


def test_view_revalidates_values_that_bypassed_the_model():
    """A model object forged past its validators still never renders."""
    location = Location("/ok", backend="svc")
    object.__setattr__(location, "backend", 'svc"; } location /x { content_by_lua_block { os.exit() } #')
    config = Configuration(servers=(Server("a.com", locations=(location,)),))
    with pytest.raises(ValidationError) as err:
        render.render_nginx_conf(config, runtime())
    assert err.value.field == "server[a.com].location[/ok].backend"

    server = Server("b.com", locations=(Location("/", backend="svc"),))
    object.__setattr__(server, "aliases", ("evil.com;\n",))
    with pytest.raises(ValidationError, match="names"):
        render.render_nginx_conf(Configuration(servers=(server,)), runtime())


def test_lua_hooks_only_where_a_backend_needs_them():
    """Plain backends are balanced by balancer_by_lua alone (view.lua_phases)."""
    config = Configuration(
        servers=(Server("example.com", locations=(
            Location("/plain", backend="plain"),
            Location("/hashed", backend="hashed"),
            Location("/hashed-ewma", backend="hashed-ewma"),
            Location("/sticky", backend="sticky"),
            Location("/ewma", backend="ewma"),
            Location("/canary", backend="primary"),
            Location("/unknown", backend="unknown"),
            Location("/grpc", backend="plain", proxy=ProxySettings(protocol=BackendProtocol.GRPC)),
        )),),
        backends=(
            Backend("plain"),
            Backend("hashed", upstream_hash_by="$request_uri", session_affinity=SessionAffinity()),
            Backend("hashed-ewma", upstream_hash_by="$request_uri", load_balance="ewma"),  # consistent hashing wins
            Backend("sticky", session_affinity=SessionAffinity()),
            Backend("ewma", load_balance="ewma"),
            Backend("primary", alternative_backends=("ewma-canary",)),
            Backend("ewma-canary", load_balance="ewma", traffic_shaping_policy=TrafficShapingPolicy(weight=5)),
        ),
    )
    text = render.render_nginx_conf(config, runtime())
    hooks = {}
    for path in ("plain", "hashed", "hashed-ewma", "sticky", "ewma", "canary", "unknown", "grpc"):
        block = text.split(f'location "/{path}/" {{')[1].split("\n        }\n")[0]
        hooks[path] = ("access_by_lua" in block, "log_by_lua" in block)
    assert hooks == {
        "plain": (False, False), "hashed": (False, False), "hashed-ewma": (False, False), "unknown": (False, False),
        "sticky": (True, False), "ewma": (True, True), "canary": (True, True),
        "grpc": (True, False),  # the 503 fallback server speaks HTTP/1.1 only
    }


def _location_block(text: str, match: str) -> str:
    return text.split(f"location {match} {{")[1].split("\n        }\n")[0]


def test_plain_locations_inherit_the_http_level_proxy_headers():
    text = render.render_nginx_conf(rich_config(), runtime())
    http_level = text.split("upstream upstream_balancer")[0]
    for needle in (
        "proxy_set_header Host $host;",
        "proxy_set_header X-Forwarded-For $platform_forwarded_for;",
        "proxy_set_header Connection $connection_upgrade;",
        "proxy_http_version 1.1;",
        "proxy_redirect off;",
    ):
        assert needle in http_level, needle
    servers = text.split("upstream upstream_balancer")[1]
    assert "proxy_http_version" not in servers and "proxy_redirect" not in servers
    # A location with its own Host (upstream-vhost) repeats the whole list:
    # nginx inherits proxy_set_header all or nothing.
    api = _location_block(text, '~ "^/api(?:/|$)"')
    assert 'proxy_set_header Host "api.internal";' in api
    assert "proxy_set_header X-Forwarded-For $platform_forwarded_for;" in api
    assert "proxy_set_header Upgrade $http_upgrade;" in api
    # gRPC has its own directives, none at http level.
    grpc = text.split("grpc_pass grpc://upstream_balancer;")[0].rsplit("location ", 1)[1]
    assert "grpc_set_header Host $host;" in grpc and "grpc_set_header X-Request-ID $request_id;" in grpc
    # Every other proxied location sets no request header of its own.
    for block in servers.split("location ")[1:]:
        if "proxy_pass" in block and "api.internal" not in block:
            assert "proxy_set_header" not in block.split("\n        }\n")[0]


def test_only_the_default_server_has_a_tls_context():
    text = render.render_nginx_conf(rich_config(), runtime())
    catch_all = text.split("server_name _;")[1].split("server {")[0]
    assert text.count("ssl_certificate ") == 1 and "ssl_certificate " in catch_all
    assert text.count("ssl_certificate_key ") == 1 and "ssl_certificate_key " in catch_all
    assert text.count("ssl_client_hello_by_lua_block") == 1 and "ssl_client_hello_by_lua_block" in catch_all
    assert "ssl_certificate_by_lua_block" not in text


def test_reused_server_views_follow_settings_and_lua_hooks():
    """Views are reused per Server object (view._ServerViews); what else a view
    depends on (global settings, a backend's Lua hooks, rate-limit zones) still shows."""
    server = Server("reuse.example", locations=(
        Location("/", backend="b"),
        Location("/limited", backend="b", rate_limit=RateLimit(rps=3)),
    ))
    first = Configuration(servers=(server,), backends=(Backend("b"),))
    bigger = Configuration(servers=(server,), backends=(Backend("b"),), settings=GlobalSettings(body_size="9m"))
    hooked = Configuration(servers=(server,), backends=(Backend("b", session_affinity=SessionAffinity()),))
    texts = [render.render_nginx_conf(c, runtime()) for c in (first, bigger, hooked, first)]
    assert "client_max_body_size 9m;" in texts[1] and "client_max_body_size 9m;" not in texts[0]
    assert "access_by_lua_block" in texts[2].split("server_name \"reuse.example\"")[1]
    assert "access_by_lua_block" not in texts[0].split("server_name \"reuse.example\"")[1]
    assert all("limit_req_zone" in text for text in texts)  # a reused view still declares its zone
    assert texts[3] == texts[0]


def test_router_hooks_only_in_the_catch_all_server():
    text = render.render_nginx_conf(rich_config(), runtime())
    catch_all, _, named = text.partition("server_name _;")[2].partition("\n    server {")
    assert 'rewrite_by_lua_block { require("router").route() }' in catch_all
    assert "location @platform_router {" in catch_all and "location @platform_router_404 {" in catch_all
    assert "require(\"router\")" not in named
    assert "rewrite_by_lua_no_postpone on;" in text
