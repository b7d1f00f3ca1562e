"""Authentication end to end: fake API server, the controller, real nginx.

An Ingress with basic auth is served only while its Opaque Secret exists
and is valid (fail closed), and every change (the Secret's users, the Secret
gone) applies without a reload.
"""

from __future__ import annotations

import base64

from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for

HOST = "private.example"


def _secret(content: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "basic-auth", "namespace": "default"},
            "data": {"auth": base64.b64encode(content.encode()).decode()}}


def test_basic_auth_follows_its_secret_and_fails_closed(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web"])
    fake_api.create(o.ingress_class())
    fake_api.create(o.service("web"))
    fake_api.create(o.endpoint_slice("web", [backends["web"].ip]))
    fake_api.create(_secret("alice:$apr1$abcdefgh$wT38ABp1Mi8RiNRvA83Bm.\n"))  # openssl passwd -apr1: pw-apr1
    fake_api.create(o.ingress("private", HOST, [("/", "web", 80)],
                              annotations={"auth-type": "basic", "auth-secret": "basic-auth",
                                           "auth-realm": "Team"}))
    fake_api.create(o.ingress("public", "public.example", [("/", "web", 80)]))
    running = ingress_controller()
    running.wait_ready()
    wait_for(lambda: running.get("/", host=HOST).status_code == 401, 10, message="401 from basic auth")
    assert running.get("/", host=HOST).headers["www-authenticate"] == 'Basic realm="Team"'
    assert running.get("/", host=HOST, auth=("alice", "pw-apr1")).text == "web"
    reloads = running.status()["reload_count"]

    # New users: applied as data.
    fake_api.update(_secret("bob:{PLAIN}pw-bob\n"))
    wait_for(lambda: running.get("/", host=HOST, auth=("bob", "pw-bob")).status_code == 200, 10,
             message="the Secret's new user")
    assert running.get("/", host=HOST, auth=("alice", "pw-apr1")).status_code == 401

    # The Secret deleted: the Ingress is no longer served (404), never open.
    fake_api.delete("secrets", "default", "basic-auth")
    wait_for(lambda: running.get("/", host=HOST).status_code == 404, 10, message="not served without its Secret")
    assert running.get("/", host=HOST, auth=("bob", "pw-bob")).status_code == 404
    assert running.get("/", host="public.example").text == "web"
    problems = str(running.status())
    assert "AuthSecretNotFound" in problems and "pw-bob" not in problems and "PLAIN" not in problems
    assert running.status()["reload_count"] == reloads


def test_global_auth_from_the_configmap(fake_api, ingress_controller, netns_backends):
    """global-auth-url covers every Ingress but those that opt out; a bad
    value refuses the Ingresses it would cover (never serves them open)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Auth(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.headers.get("X-Token") == "good" else 401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Auth)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        backends = netns_backends(["web"])
        fake_api.create(o.ingress_class())
        fake_api.create(o.service("web"))
        fake_api.create(o.endpoint_slice("web", [backends["web"].ip]))
        url = f"http://127.0.0.1:{server.server_address[1]}/check"
        fake_api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ingress", "namespace": "default"},
                         "data": {"global-auth-url": url}})
        fake_api.create(o.ingress("covered", "covered.example", [("/", "web", 80)]))
        fake_api.create(o.ingress("out", "out.example", [("/", "web", 80)], annotations={"enable-global-auth": "false"}))
        running = ingress_controller("--configmap", "default/ingress")
        running.wait_ready()
        wait_for(lambda: running.get("/", host="covered.example").status_code == 401, 10, message="global auth")
        assert running.get("/", host="covered.example", headers={"X-Token": "good"}).text == "web"
        assert running.get("/", host="out.example").text == "web"

        cm = fake_api.get("ConfigMap", "default", "ingress")
        cm["data"] = {"global-auth-url": "ftp://nowhere/"}
        fake_api.update(cm)
        wait_for(lambda: running.get("/", host="covered.example", headers={"X-Token": "good"}).status_code == 404,
                 10, message="covered Ingress refused while the global auth is invalid")
        assert running.get("/", host="out.example").text == "web"
    finally:
        server.shutdown()
        server.server_close()
