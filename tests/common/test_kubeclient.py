import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from platformd.common import errors, kubeclient
from platformd.common.errors import KubeConfigError


def kubeconfig(server, contexts=("one",), current="one", token="t0ken"):
    lines = ["apiVersion: v1", "kind: Config", "clusters:",
             "- name: c", "  cluster:", f"    server: {server}",
             "users:", "- name: u", "  user:", f"    token: {token}", "contexts:"]
    for name in contexts:
        lines += [f"- name: {name}", "  context: {cluster: c, user: u}"]
    if current:
        lines.append(f"current-context: {current}")
    return "\n".join(lines) + "\n"


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(kubeclient, "DEFAULT_KUBECONFIG", str(tmp_path / "home" / ".kube" / "config"))


class Api:
    """A tiny HTTP server answering from a table: path -> (status, headers, body)."""

    def __init__(self):
        self.routes = {}
        self.requests = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                api.requests.append((self.path, dict(self.headers)))
                status, headers, body = api.routes.get(self.path.split("?")[0], (404, {}, b"{}"))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api():
    server = Api()
    yield server
    server.close()


# ---------------------------------------------------------------- load


def test_explicit_kubeconfig_beats_the_environment(tmp_path, monkeypatch):
    (tmp_path / "explicit").write_text(kubeconfig("http://127.0.0.1:1111"))
    (tmp_path / "env").write_text(kubeconfig("http://127.0.0.1:2222"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "env"))
    assert kubeclient.load(str(tmp_path / "explicit")).configuration.host == "http://127.0.0.1:1111"
    assert kubeclient.load().configuration.host == "http://127.0.0.1:2222"


def test_context_selects_the_cluster(tmp_path):
    text = kubeconfig("http://a.invalid", contexts=("one",)) + """\
"""
    path = tmp_path / "cfg"
    path.write_text(text.replace("contexts:\n", "contexts:\n- name: two\n  context: {cluster: d, user: u}\n")
                    .replace("users:", "- name: d\n  cluster:\n    server: http://b.invalid\nusers:"))
    assert kubeclient.load(str(path)).configuration.host == "http://a.invalid"
    assert kubeclient.load(str(path), context="two").configuration.host == "http://b.invalid"


def test_default_location_is_used_last(tmp_path):
    default = tmp_path / "home" / ".kube" / "config"
    default.parent.mkdir(parents=True)
    default.write_text(kubeconfig("http://127.0.0.1:3333"))
    assert kubeclient.load().configuration.host == "http://127.0.0.1:3333"


def test_in_cluster(tmp_path, monkeypatch):
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token")
    ca.write_text("not really a certificate")
    monkeypatch.setattr(kubeclient, "SERVICE_ACCOUNT_TOKEN", str(token))
    monkeypatch.setattr(kubeclient, "SERVICE_ACCOUNT_CA", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    client = kubeclient.load()
    assert client.configuration.host == "https://10.0.0.1:443"
    assert client.configuration.get_api_key_with_prefix("BearerToken").lower() == "bearer sa-token"
    with pytest.raises(KubeConfigError, match="needs a kubeconfig"):
        kubeclient.load(context="x")
    token.unlink()
    with pytest.raises(KubeConfigError, match="token .* is missing"):
        kubeclient.load()


@pytest.mark.parametrize("setup, message", [
    (lambda p: None, r"kubeconfig .*/cfg: no such file"),
    (lambda p: p.write_text("clusters: [\n  - name: c\n"), r"kubeconfig .*/cfg:2: invalid YAML"),
    (lambda p: p.write_text("just a string\n"), r"not a kubeconfig"),
    (lambda p: p.write_text(kubeconfig("http://x", current=None)), r"no current-context set .*contexts: one"),
    (lambda p: p.write_text(kubeconfig("http://x", current="nope")), r"context 'nope' not found \(contexts: one\)"),
    (lambda p: p.write_text(kubeconfig("http://x").replace("cluster: c,", "cluster: missing,")),
     r"context 'one': "),
])
def test_bad_kubeconfigs_give_one_line_errors(tmp_path, setup, message):
    path = tmp_path / "cfg"
    setup(path)
    with pytest.raises(KubeConfigError, match=message) as info:
        kubeclient.load(str(path))
    assert "\n" not in str(info.value)


def test_missing_kubeconfig_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope"))
    with pytest.raises(KubeConfigError, match=r"^KUBECONFIG=.*/nope: no such file$"):
        kubeclient.load()


def test_no_configuration_at_all():
    with pytest.raises(KubeConfigError, match="no Kubernetes configuration"):
        kubeclient.load()


# ---------------------------------------------------------------- reachability and errors


def test_check_reachable_names_the_server_and_the_problem(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}"
    (tmp_path / "cfg").write_text(kubeconfig(url))
    client = kubeclient.load(str(tmp_path / "cfg"))
    with pytest.raises(errors.ApiUnreachable) as info:
        kubeclient.check_reachable(client, timeout=2)
    assert str(info.value) == f"cannot reach the API server at {url}: connection refused"


def test_check_reachable_returns_the_version_and_sends_the_token(tmp_path, api):
    api.routes["/version"] = (200, {"Content-Type": "application/json"}, b'{"gitVersion": "v1.31.0"}')
    (tmp_path / "cfg").write_text(kubeconfig(api.url))
    client = kubeclient.load(str(tmp_path / "cfg"))
    assert kubeclient.check_reachable(client)["gitVersion"] == "v1.31.0"
    assert {k.lower(): v for k, v in api.requests[0][1].items()}["authorization"] == "Bearer t0ken"


def test_check_reachable_reports_rejected_credentials(tmp_path, api):
    status = {"kind": "Status", "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    api.routes["/version"] = (401, {}, json.dumps(status).encode())
    (tmp_path / "cfg").write_text(kubeconfig(api.url))
    with pytest.raises(errors.AccessDenied, match=f"API server at {api.url} refused /version: Unauthorized"):
        kubeclient.check_reachable(kubeclient.load(str(tmp_path / "cfg")))


@pytest.mark.parametrize("status, headers, body, cls, retry_after", [
    (410, {}, {"kind": "Status", "reason": "Expired", "message": "too old resource version: 1", "code": 410},
     errors.ResourceExpired, None),
    (429, {"Retry-After": "3"}, {"kind": "Status", "reason": "TooManyRequests", "message": "slow down"},
     errors.TooManyRequests, 3.0),
    (503, {}, "<html>bad gateway</html>", errors.ServerError, None),
    (404, {}, {"kind": "Status", "reason": "NotFound", "message": "nope"}, errors.NotFound, None),
    (409, {}, {}, errors.Conflict, None),
    (422, {}, {}, errors.ClientError, None),
    (403, {}, {}, errors.AccessDenied, None),
])
def test_error_responses_become_our_exceptions(tmp_path, api, status, headers, body, cls, retry_after):
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    api.routes["/api/v1/things"] = (status, headers, raw)
    (tmp_path / "cfg").write_text(kubeconfig(api.url))
    client = kubeclient.load(str(tmp_path / "cfg"))
    with pytest.raises(cls) as info:
        kubeclient.request_json(client, "GET", "/api/v1/things", query={"limit": "5"})
    assert info.value.status == status
    assert info.value.retry_after == retry_after
    assert "\n" not in str(info.value)
    if isinstance(body, dict) and body.get("message"):
        assert info.value.message == body["message"]


def test_non_json_success_is_an_invalid_response(tmp_path, api):
    api.routes["/api/v1/things"] = (200, {}, b"<html>proxy login</html>")
    (tmp_path / "cfg").write_text(kubeconfig(api.url))
    with pytest.raises(errors.InvalidResponse):
        kubeclient.request_json(kubeclient.load(str(tmp_path / "cfg")), "GET", "/api/v1/things")


def test_insecure_skip_tls_verify_is_one_warning_at_load_not_one_per_request(tmp_path, caplog):
    import logging
    import warnings

    import urllib3
    import yaml

    from tests.fakeapi import FakeApiServer

    srv = FakeApiServer(tls=True).start()
    try:
        config = yaml.safe_load(open(srv.write_kubeconfig(tmp_path / "kc")))
        cluster = config["clusters"][0]["cluster"]
        del cluster["certificate-authority-data"]
        cluster["insecure-skip-tls-verify"] = True
        (tmp_path / "kc").write_text(yaml.safe_dump(config))
        with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
            warnings.simplefilter("always")           # the worst case: every warning shown
            api = kubeclient.load(str(tmp_path / "kc"))
            for _ in range(3):
                assert kubeclient.request_json(api, "GET", "/api/v1/namespaces")["kind"] == "NamespaceList"
        assert not [w for w in caught if issubclass(w.category, urllib3.exceptions.InsecureRequestWarning)]
        records = [r for r in caplog.records if r.name == "platformd.common.kubeclient"]
        assert len(records) == 1 and "insecure-skip-tls-verify" in records[0].getMessage()
    finally:
        srv.stop()
