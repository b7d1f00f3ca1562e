"""Which server and location answer, through a real nginx (view.py's rules).

Host matching (exact beats wildcard, a wildcard covers one label), path
precedence on hosts mixing Regex and Prefix paths, the 404 of a server
without ``/``, the catch-all server's own locations, HSTS on TLS servers
only, and the configured default certificate. Fixtures: tests/ingress/conftest.py.
"""

from __future__ import annotations

import ssl

import pytest

from platformd.ingress.model import (
    Backend,
    Certificate,
    Configuration,
    Location,
    PathMatch,
    Server,
)
from tests.helpers.certs import self_signed, served_certificate
from tests.helpers.dataplane import answer, apply


def backends_for(named: dict) -> tuple[Backend, ...]:
    """One backend per test server, named after it."""
    return tuple(Backend(name, endpoints=(server.endpoint,)) for name, server in named.items())


def test_wildcard_host_covers_one_label_and_exact_hosts_win(dataplane, backends):
    wild, exact, deep = backends(3)
    apply(dataplane, Configuration(
        servers=(
            Server("*.example.com", locations=(Location("/", backend="wild"),)),
            Server("app.example.com", locations=(Location("/", backend="exact"),)),
            Server("*.b.example.com", locations=(Location("/", backend="deep"),)),
        ),
        backends=backends_for({"wild": wild, "exact": exact, "deep": deep}),
    ))
    assert answer(dataplane, "/", "app.example.com") == exact.name
    assert answer(dataplane, "/", "APP.example.com") == exact.name
    assert answer(dataplane, "/", "other.example.com") == wild.name
    assert answer(dataplane, "/", "x.b.example.com") == deep.name
    # nginx's own "*.example.com" would take these; Kubernetes does not.
    assert answer(dataplane, "/", "a.x.example.com") == "404"
    assert answer(dataplane, "/", "example.com") == "404"


def test_server_without_root_answers_404_not_files(dataplane, backends):
    (api,) = backends(1)
    apply(dataplane, Configuration(
        servers=(Server("app.example.com", locations=(Location("/api", backend="api"),)),),
        backends=backends_for({"api": api}),
    ))
    assert answer(dataplane, "/api/x", "app.example.com") == api.name
    for path in ("/", "/index.html", "/50x.html", "/apix"):
        r = dataplane.get(path, host="app.example.com")
        assert r.status_code == 404 and "x-backend" not in r.headers, path
        assert "Welcome to nginx" not in r.text


def test_longest_path_wins_on_a_host_mixing_regex_and_prefix(dataplane, backends):
    root, admin, regex, exact, short, version = backends(6)
    apply(dataplane, Configuration(
        servers=(Server("app.example.com", locations=(
            Location("/", backend="root"),
            Location("/api/admin", backend="admin"),
            Location("/api/.*", match=PathMatch.REGEX, backend="regex"),
            Location("/api/x", match=PathMatch.EXACT, backend="exact"),
            Location("/v", backend="short"),
            Location("/v/[0-9]+", match=PathMatch.REGEX, backend="version"),
        )),),
        backends=backends_for({"root": root, "admin": admin, "regex": regex, "exact": exact,
                               "short": short, "version": version}),
    ))
    expected = {
        "/api/admin": admin,  # Prefix /api/admin (10 chars) beats the regex /api/.* (7)
        "/api/admin/users": admin,
        "/api/adminx": regex,  # Prefix is element-wise: /api/adminx is not under /api/admin
        "/api/other": regex,
        "/API/other": regex,  # Regex paths are case-insensitive
        "/api/x": exact,  # Exact beats everything
        "/v/12": version,  # the regex /v/[0-9]+ is longer than Prefix /v
        "/v/latest": short,
        "/v": short,
        "/elsewhere": root,
    }
    got = {path: answer(dataplane, path, "app.example.com") for path in expected}
    assert got == {path: server.name for path, server in expected.items()}


def test_prefix_paths_alone_keep_longest_prefix_semantics(dataplane, backends):
    root, api, exact = backends(3)
    apply(dataplane, Configuration(
        servers=(Server("app.example.com", locations=(
            Location("/", backend="root"),
            Location("/api", backend="api"),
            Location("/api", match=PathMatch.EXACT, backend="exact"),
        )),),
        backends=backends_for({"root": root, "api": api, "exact": exact}),
    ))
    got = {p: answer(dataplane, p, "app.example.com") for p in ("/api", "/api/", "/api/v1", "/apiv1", "/")}
    assert got == {"/api": exact.name, "/api/": api.name, "/api/v1": api.name, "/apiv1": root.name, "/": root.name}


def test_catch_all_server_serves_hostless_locations_then_the_default_backend(dataplane, backends):
    fallback, hostless = backends(2)
    apply(dataplane, Configuration(
        servers=(Server("app.example.com", locations=(Location("/", backend="fallback"),)),),
        backends=backends_for({"fallback": fallback, "hostless": hostless}),
        default_backend="fallback",
        default_server_locations=(Location("/x", backend="hostless"),),
    ))
    assert answer(dataplane, "/x/1", "unknown.example.org") == hostless.name
    assert answer(dataplane, "/x", "unknown.example.org") == hostless.name
    assert answer(dataplane, "/y", "unknown.example.org") == fallback.name
    # Rules without a host are for hosts no rule names.
    assert answer(dataplane, "/x/1", "app.example.com") == fallback.name


def test_catch_all_without_default_backend_answers_404_beside_its_locations(dataplane, backends):
    (hostless,) = backends(1)
    apply(dataplane, Configuration(
        backends=backends_for({"hostless": hostless}),
        default_server_locations=(Location("/x", backend="hostless"),),
    ))
    assert answer(dataplane, "/x/1", "unknown.example.org") == hostless.name
    assert answer(dataplane, "/", "unknown.example.org") == "404"


# --- TLS ------------------------------------------------------------------------------


@pytest.fixture
def pems(tmp_path):
    return {cn: self_signed(cn, tmp_path) for cn in ("secure.example.com", "default")}


def test_hsts_only_on_servers_with_tls(dataplane, backends, pems):
    (b0,) = backends(1)
    cert = Certificate("ns/secure", *pems["secure.example.com"], hostnames=("secure.example.com",))
    apply(dataplane, Configuration(
        servers=(
            Server("secure.example.com", tls_certificate="ns/secure", tls=True, locations=(Location("/", backend="app"),)),
            Server("plain.example.com", locations=(Location("/", backend="app"),)),
        ),
        backends=backends_for({"app": b0}),
        certificates=(cert,),
    ))
    secure = dataplane.get("/", host="secure.example.com", https=True)
    assert secure.text == b0.name and secure.headers["strict-transport-security"].startswith("max-age=")
    plain = dataplane.get("/", host="plain.example.com", https=True)
    assert plain.text == b0.name and "strict-transport-security" not in plain.headers
    assert "strict-transport-security" not in dataplane.get("/", host="secure.example.com").headers  # http


def test_configured_default_certificate_serves_unknown_names(dataplane, backends, pems):
    (b0,) = backends(1)
    exact = Certificate("ns/secure", *pems["secure.example.com"], hostnames=("secure.example.com",))
    default = Certificate("platform/default", *pems["default"])
    config = Configuration(
        servers=(Server("secure.example.com", locations=(Location("/", backend="app"),)),),
        backends=backends_for({"app": b0}),
        certificates=(exact, default),
        default_certificate="platform/default",
    )
    apply(dataplane, config)
    port = dataplane.https_port
    assert served_certificate(port, "secure.example.com") == ssl.PEM_cert_to_DER_cert(exact.cert_pem)
    assert served_certificate(port, "other.example.org") == ssl.PEM_cert_to_DER_cert(default.cert_pem)
    assert served_certificate(port, None) == ssl.PEM_cert_to_DER_cert(default.cert_pem)


def test_plain_backend_unknown_or_emptied_answers_503_from_the_balancer(dataplane, backends):
    (b0,) = backends(1)
    config = Configuration(
        servers=(Server("app.example.com", locations=(
            Location("/", backend="app"), Location("/ghost", backend="ghost"),
        )),),
        backends=backends_for({"app": b0}),
    )
    apply(dataplane, config)
    assert "access_by_lua" not in dataplane.nginx.files.conf.read_text()
    assert answer(dataplane, "/", "app.example.com") == b0.name
    assert answer(dataplane, "/ghost/x", "app.example.com") == "503"
    assert dataplane.apply(Configuration(servers=config.servers, backends=(Backend("app"),))).kind == "dynamic"
    assert answer(dataplane, "/", "app.example.com") == "503"
    apply(dataplane, config)
    assert answer(dataplane, "/", "app.example.com") == b0.name


def test_https_upstream_without_endpoints_answers_503_from_the_access_phase(dataplane):
    from platformd.ingress.model import ProxySettings

    apply(dataplane, Configuration(
        servers=(Server("app.example.com", locations=(
            Location("/", backend="app", proxy=ProxySettings(protocol="HTTPS")),
        )),),
        backends=(Backend("app"),),
    ))
    assert answer(dataplane, "/", "app.example.com") == "503"
