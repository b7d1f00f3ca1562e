"""Authentication through a real nginx with the Lua router (lua/auth*.lua):
basic auth for every hash format, digest, external auth against a real HTTP
auth service, satisfy, and auth changes applied as data (no reload).

Fixtures: tests/ingress/conftest.py (``dataplane``). The hashes below were
made on this machine with ``openssl passwd -apr1`` and python3's ``crypt``
module (libxcrypt), see each comment.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from platformd.ingress.auth import Auth, ExternalAuth
from platformd.ingress.model import AccessControl, Backend, Configuration, Endpoint, Location, Server
from tests.helpers.backends import free_port
from tests.helpers.dataplane import apply, reloads

HOST = "app.example"

# user -> (password, stored hash)
USERS = {
    # crypt.crypt("pw-bcrypt", "$2b$05$abcdefghijklmnopqrstuu"), the $2y$ spelling of the same
    "bcrypt-2y": ("pw-bcrypt", "$2y$05$abcdefghijklmnopqrstuu05PhAplxWqDxnJScpSYqKmGxTbks2mG"),
    "bcrypt-2b": ("pw-bcrypt", "$2b$05$abcdefghijklmnopqrstuu05PhAplxWqDxnJScpSYqKmGxTbks2mG"),
    # crypt.crypt("pw-sha512", "$6$saltsalt") / ("pw-sha256", "$5$saltsalt") / ("pw-md5", "$1$saltsalt")
    "sha512": ("pw-sha512", "$6$saltsalt$CZPNVr4niieqYaHqrgdfrQ604H94bmAexPzzchp3jqxMjdifKaFca.IyeoTbVF0cxoy5RMnMCYslfoUCSvGW./"),
    "sha256": ("pw-sha256", "$5$saltsalt$XI3fksjl7/nf8khkNt0i5D7QRbB/2AeQKdYnifdJSo2"),
    "md5crypt": ("pw-md5", "$1$saltsalt$AJwDIrlvWUF2iKSOOX4fZ0"),
    # openssl passwd -apr1 -salt abcdefgh pw-apr1 / -salt x a-much-longer-password-than-16-bytes
    "apr1": ("pw-apr1", "$apr1$abcdefgh$wT38ABp1Mi8RiNRvA83Bm."),
    "apr1-long": ("a-much-longer-password-than-16-bytes", "$apr1$x$oVvsoy3ZWb.D3gbMiFfbi/"),
    # "{SHA}" + base64(sha1("pw-sha1"))
    "sha1": ("pw-sha1", "{SHA}xijDgoRYDk0v1vFBsFGjJUAqaCA="),
    "plain": ("pw-plain", "{PLAIN}pw-plain"),
}
# md5("dana:Staff:pw-digest")
DIGEST_USERS = (("dana", "84ecd3e456f73bfa16c020fa2712fe4d"),)


class _Service(BaseHTTPRequestHandler):
    """The auth service (answers by X-Token) and the backend (echoes what it got)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _answer(self) -> None:
        server = self.server
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.path.startswith("/auth"):
            server.calls.append({"path": self.path, "method": self.command, "body": body.decode(),
                                 "headers": {k.lower(): val for k, val in self.headers.items()}})
            token = self.headers.get("X-Token", "")
            status = {"good": 200, "forbidden": 403, "broken": 502}.get(token, 401)
            self.send_response(status)
            if status == 200:
                self.send_header("X-Auth-User", "alice")
                self.send_header("Set-Cookie", "session=abc; Path=/")
            if status == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="sso"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        echoed = json.dumps({"user": self.headers.get("X-Auth-User"), "path": self.path,
                             **({"tenant": self.headers["X-Tenant"]} if "X-Tenant" in self.headers else {})}).encode()
        self.send_response(404 if self.path.startswith("/missing") else 200)
        self.send_header("X-Backend", "app")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(echoed)))
        self.end_headers()
        self.wfile.write(echoed)

    do_GET = do_POST = do_HEAD = _answer


@pytest.fixture
def service():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    server.calls = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def site(service, *locations: Location) -> Configuration:
    port = service.server_address[1]
    return Configuration(servers=(Server(HOST, locations=locations),),
                         backends=(Backend("app", endpoints=(Endpoint("127.0.0.1", port),)),))


def basic(realm: str = "Staff", **kw) -> Auth:
    return Auth("basic", realm, tuple(sorted((u, h) for u, (_, h) in USERS.items())), **kw)


def test_basic_auth_verifies_every_hash_format_and_removal_needs_no_reload(dataplane, service):
    apply(dataplane, site(service, Location("/", backend="app", auth=basic())))
    before = reloads(dataplane)

    r = dataplane.get("/", host=HOST)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == 'Basic realm="Staff"'
    for user, (password, _) in USERS.items():
        assert dataplane.get("/", host=HOST, auth=(user, password + "x")).status_code == 401, user
        assert dataplane.get("/", host=HOST, auth=(user, password)).status_code == 200, user
        # the second time comes from the worker's cache of verifications: same answer
        assert dataplane.get("/", host=HOST, auth=(user, password)).status_code == 200, user
    assert dataplane.get("/", host=HOST, auth=("nobody", "pw-plain")).status_code == 401
    assert dataplane.get("/", host=HOST, auth=("plain", "")).status_code == 401
    assert dataplane.get("/", host=HOST, headers={"Authorization": "Basic !!!"}).status_code == 401

    # A password change (a new hash) is a cache miss: the old password fails.
    changed = Auth("basic", "Staff", (("plain", "{PLAIN}new"),))
    apply(dataplane, site(service, Location("/", backend="app", auth=changed)))
    assert dataplane.get("/", host=HOST, auth=("plain", "pw-plain")).status_code == 401
    assert dataplane.get("/", host=HOST, auth=("plain", "new")).status_code == 200

    # Auth removed: open at once, as data.
    apply(dataplane, site(service, Location("/", backend="app")))
    assert dataplane.get("/", host=HOST).status_code == 200
    assert reloads(dataplane) == before
    assert "pw-" not in dataplane.error_log()


def test_digest_auth_and_replay(dataplane, service):
    apply(dataplane, site(service, Location("/", backend="app", auth=Auth("digest", "Staff", DIGEST_USERS))))
    r = dataplane.get("/d?x=1", host=HOST)
    assert r.status_code == 401
    challenge = r.headers["www-authenticate"]
    assert challenge.startswith('Digest realm="Staff", qop="auth"') and "nonce=" in challenge

    assert dataplane.get("/d?x=1", host=HOST, auth=httpx.DigestAuth("dana", "wrong")).status_code == 401
    ok = dataplane.get("/d?x=1", host=HOST, auth=httpx.DigestAuth("dana", "pw-digest"))
    assert ok.status_code == 200
    # The exact request again (same nonce, nc): refused as a replay.
    sent = ok.request.headers["authorization"]
    assert dataplane.get("/d?x=1", host=HOST, headers={"Authorization": sent}).status_code == 401
    # The same credentials for another URI: refused.
    assert dataplane.get("/other", host=HOST, headers={"Authorization": sent}).status_code == 401


def test_external_auth(dataplane, service):
    port = service.server_address[1]
    ext = ExternalAuth(url=f"http://127.0.0.1:{port}/auth?check=1", response_headers=("X-Auth-User",),
                       signin="https://login.example/start")
    apply(dataplane, site(service, Location("/", backend="app", auth=Auth(external=ext))))
    before = reloads(dataplane)

    # 2xx: proxied, with the auth answer's header replacing the client's own.
    r = dataplane.get("/p?q=1", host=HOST, headers={"X-Token": "good", "X-Auth-User": "mallory"})
    assert r.status_code == 200 and r.json() == {"user": "alice", "path": "/p?q=1"}
    assert r.headers.get("set-cookie") == "session=abc; Path=/"
    call = service.calls[-1]
    assert call["path"] == "/auth?check=1" and call["method"] == "GET"
    assert call["headers"]["x-original-url"] == f"http://{HOST}/p?q=1"
    assert call["headers"]["x-original-method"] == "GET"
    assert call["headers"]["host"] == f"127.0.0.1:{port}"

    # The request body never reaches the auth service.
    r = httpx.post(dataplane.http_url + "/p", headers={"Host": HOST, "X-Token": "good"}, content=b"secret-body")
    assert r.status_code == 200
    assert service.calls[-1]["body"] == "" and service.calls[-1]["method"] == "GET"

    # 401 -> the sign-in page with the original URL; 403 -> 403.
    r = dataplane.get("/p?q=1", host=HOST)
    assert r.status_code == 302
    assert r.headers["location"] == "https://login.example/start?rd=http%3A%2F%2Fapp.example%2Fp%3Fq%3D1"
    assert dataplane.get("/p", host=HOST, headers={"X-Token": "forbidden"}).status_code == 403
    # Anything else from the auth service: 500, never open.
    assert dataplane.get("/p", host=HOST, headers={"X-Token": "broken"}).status_code == 500

    # Without auth-signin, a 401 passes with the service's challenge.
    apply(dataplane, site(service, Location("/", backend="app", auth=Auth(external=ExternalAuth(
        url=f"http://127.0.0.1:{port}/auth")))))
    r = dataplane.get("/p", host=HOST)
    assert r.status_code == 401 and r.headers["www-authenticate"] == 'Bearer realm="sso"'
    assert reloads(dataplane) == before

    # The internal location cannot be asked from outside.
    assert dataplane.get("/_platform_auth", host=HOST).status_code == 404


def test_external_auth_urls_with_request_variables(dataplane, service):
    """oauth2-proxy's usual annotations: variables read per request."""
    port = service.server_address[1]
    ext = ExternalAuth(url=f"http://127.0.0.1:{port}/auth/$host?m=${{request_method}}",
                       signin="https://$host/oauth2/start?rd=$escaped_request_uri")
    apply(dataplane, site(service, Location("/", backend="app", auth=Auth(external=ext))))
    assert dataplane.get("/p?q=1", host=HOST, headers={"X-Token": "good"}).status_code == 200
    assert service.calls[-1]["path"] == "/auth/app.example?m=GET"
    r = dataplane.get("/p?q=1", host=HOST)
    assert (r.status_code, r.headers["location"]) == (302, "https://app.example/oauth2/start?rd=%2Fp%3Fq%3D1")


def test_external_auth_proxy_headers_method_and_redirect_header(dataplane, service):
    port = service.server_address[1]
    ext = ExternalAuth(url=f"http://127.0.0.1:{port}/auth", method="POST", proxy_headers=(("X-Tenant", "blue"),),
                       request_redirect="/after")
    apply(dataplane, site(service, Location("/", backend="app", auth=Auth(external=ext))))
    r = dataplane.get("/p", host=HOST, headers={"X-Token": "good", "X-Tenant": "red"})
    call = service.calls[-1]
    assert (call["method"], call["headers"]["x-tenant"]) == ("POST", "blue")
    assert call["headers"]["x-auth-request-redirect"] == "/after"
    assert r.json()["tenant"] == "red"  # the upstream gets the client's own header back
    # Without auth-request-redirect the header is the request URI.
    apply(dataplane, site(service, Location("/", backend="app", auth=Auth(external=ExternalAuth(
        url=f"http://127.0.0.1:{port}/auth")))))
    dataplane.get("/q?x=1", host=HOST, headers={"X-Token": "good"})
    assert service.calls[-1]["headers"]["x-auth-request-redirect"] == "/q?x=1"
    assert "x-tenant" not in service.calls[-1]["headers"]


def test_auth_always_set_cookie(dataplane, service):
    """The auth answer's cookie: on 2xx/3xx answers only, or on every answer."""
    port = service.server_address[1]
    for always, on_404 in ((False, None), (True, "session=abc; Path=/")):
        ext = ExternalAuth(url=f"http://127.0.0.1:{port}/auth", always_set_cookie=always)
        apply(dataplane, site(service, Location("/", backend="app", auth=Auth(external=ext))))
        assert dataplane.get("/ok", host=HOST, headers={"X-Token": "good"}).headers["set-cookie"] == "session=abc; Path=/"
        assert dataplane.get("/missing", host=HOST, headers={"X-Token": "good"}).headers.get("set-cookie") == on_404


def test_external_auth_down_is_500_not_open(dataplane, service):
    dead = free_port()
    apply(dataplane, site(service, Location("/", backend="app", auth=Auth(external=ExternalAuth(
        url=f"http://127.0.0.1:{dead}/auth")))))
    assert dataplane.get("/", host=HOST, headers={"X-Token": "good"}).status_code == 500


def test_external_auth_cache(dataplane, service):
    port = service.server_address[1]
    ext = ExternalAuth(url=f"http://127.0.0.1:{port}/auth", cache_key=("$http_x_token",),
                       cache_codes=(200,), cache_seconds=60)
    apply(dataplane, site(service, Location("/", backend="app", auth=Auth(external=ext))))
    service.calls.clear()
    assert dataplane.get("/a", host=HOST, headers={"X-Token": "good"}).status_code == 200
    assert dataplane.get("/b", host=HOST, headers={"X-Token": "good"}).status_code == 200
    assert len(service.calls) == 1  # the second answer came from the cache
    # Another key, and a status not listed: asked each time.
    assert dataplane.get("/a", host=HOST, headers={"X-Token": "nope"}).status_code == 401
    assert dataplane.get("/a", host=HOST, headers={"X-Token": "nope"}).status_code == 401
    assert len(service.calls) == 3


@pytest.mark.parametrize("satisfy, access, creds, status", [
    ("all", {"allow": ("127.0.0.1/32",)}, False, 401),  # the address is allowed, the password still needed
    ("all", {"allow": ("127.0.0.1/32",)}, True, 200),
    ("all", {"allow": ("10.0.0.0/8",)}, True, 403),  # the address is not allowed: no password helps
    ("any", {"allow": ("127.0.0.1/32",)}, False, 200),  # the address suffices
    ("any", {"allow": ("10.0.0.0/8",)}, False, 401),  # else the password must
    ("any", {"allow": ("10.0.0.0/8",)}, True, 200),
    ("any", {"deny": ("10.0.0.0/8",)}, False, 401),  # a deny list alone admits nobody by itself
    ("any", {"deny": ("127.0.0.1/32",)}, True, 200),  # denied, but the password suffices
    ("all", {"deny": ("127.0.0.1/32",)}, True, 403),
])
def test_satisfy(dataplane, service, satisfy, access, creds, status):
    auth = Auth("basic", "Staff", (("plain", "{PLAIN}pw-plain"),), satisfy=satisfy)
    apply(dataplane, site(service, Location("/", backend="app", access=AccessControl(**access), auth=auth)))
    kwargs = {"auth": ("plain", "pw-plain")} if creds else {}
    assert dataplane.get("/", host=HOST, **kwargs).status_code == status
