"""kubelib: the real ``kubernetes`` client, with only the parts we use imported.

Each case runs in a fresh interpreter (what is imported is the point) against
the fake API server: in-cluster over https with a service account token, a
kubeconfig, and code that then asks for the whole library.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fakeapi import FakeApiServer

ROOT = Path(__file__).resolve().parents[2]
# Imported by the whole package, never by what the controllers use.
UNUSED = ["kubernetes.dynamic", "kubernetes.watch", "kubernetes.stream", "kubernetes.leaderelection",
          "kubernetes.informer", "kubernetes.utils.create_from_yaml", "kubernetes_validate", "websocket"]
KUBECONFIG_ONLY = ["kubernetes.config.kube_config", "oauthlib", "requests_oauthlib", "requests"]
# ApiClient and what it imports: a pod never needs them (kubeclient.Client).
API_CLIENT = ["kubernetes.client.api_client", "pydantic", "dateutil", "multiprocessing.pool"]


def run(code: str, **env: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON line, returned parsed."""
    prologue = "import json, sys\nloaded = lambda names: [n for n in names if n in sys.modules]\n"
    clean = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    out = subprocess.run([sys.executable, "-c", prologue + textwrap.dedent(code)], cwd=ROOT,
                         env={**clean, "PYTHONPATH": str(ROOT), "HOME": env.pop("HOME", "/nonexistent"), **env},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def server():
    srv = FakeApiServer(rbac=True)  # https, bearer tokens
    srv.add_token("sa-token", "system:serviceaccount:ingress:platform", ["system:masters"])
    srv.start()
    srv.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
    yield srv
    srv.stop()


def test_in_cluster_uses_only_the_client_core_and_talks_to_the_server(server, tmp_path):
    token = tmp_path / "token"
    token.write_text("sa-token")
    got = run(f"""
        from platformd.common import kubeclient
        kubeclient.SERVICE_ACCOUNT_TOKEN = {str(token)!r}
        kubeclient.SERVICE_ACCOUNT_CA = {server.ca_file!r}
        api = kubeclient.load()
        names = [n["metadata"]["name"] for n in kubeclient.request_json(api, "GET", "/api/v1/namespaces")["items"]]
        print(json.dumps({{"host": api.configuration.host, "names": names,
                           "unused": loaded({UNUSED + KUBECONFIG_ONLY + API_CLIENT!r})}}))
        """, KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(server.port))
    assert got["host"] == f"https://127.0.0.1:{server.port}"
    assert "shop" in got["names"]  # authenticated (401 otherwise) and verified against the CA
    assert got["unused"] == []


def test_a_kubeconfig_loads_the_kubeconfig_loader_and_nothing_else_unused(server, tmp_path):
    path = server.write_kubeconfig(tmp_path / "kubeconfig", token="sa-token")
    got = run(f"""
        from platformd.common import kubeclient
        api = kubeclient.load({path!r})
        version = kubeclient.check_reachable(api)
        print(json.dumps({{"version": bool(version), "unused": loaded({UNUSED!r}),
                           "loader": loaded({KUBECONFIG_ONLY[:1]!r})}}))
        """)
    assert got == {"version": True, "unused": [], "loader": ["kubernetes.config.kube_config"]}


def test_requests_send_the_token_and_the_library_user_agent_and_encode_the_query(server, tmp_path):
    from platformd.common import kubeclient
    from platformd.common.kubelib import client as k8s

    path = server.write_kubeconfig(tmp_path / "kubeconfig", token="sa-token")
    ours = kubeclient.load(str(path))
    theirs = k8s.ApiClient(ours.configuration)  # request() takes the library's ApiClient as well
    query = [("labelSelector", "!tier,app notin (a,b)"), ("fieldSelector", "metadata.name=shop")]
    for api in (ours, theirs):
        answer = kubeclient.request_json(api, "GET", "/api/v1/namespaces", query=query)
        assert [n["metadata"]["name"] for n in answer["items"]] == ["shop"]
        assert kubeclient.request_json(api, "GET", "/api/v1/namespaces/shop")["metadata"]["name"] == "shop"
    assert ours.default_headers == theirs.default_headers  # the same User-Agent
    assert kubeclient._url("https://h:1", "/p", query) == (
        "https://h:1/p?labelSelector=%21tier%2Capp%20notin%20%28a%2Cb%29&fieldSelector=metadata.name%3Dshop")
    theirs.close()


def test_the_whole_library_is_still_there_for_code_that_asks_for_it(server, tmp_path):
    path = server.write_kubeconfig(tmp_path / "kubeconfig", token="sa-token")
    got = run(f"""
        from platformd.common import kubeclient, kubelib
        import kubernetes
        from kubernetes import client, config, watch
        config.load_kube_config(config_file={path!r})
        names = [n.metadata.name for n in client.CoreV1Api().list_namespace().items]
        print(json.dumps({{"version": kubernetes.__version__, "names": names,
                           "watch": watch.Watch.__name__, "same": client is kubelib.client,
                           "configuration": client.Configuration is kubelib.Configuration}}))
        """)
    assert got["version"] and "shop" in got["names"]
    assert got["watch"] == "Watch" and got["same"] and got["configuration"]


def test_a_library_imported_before_is_left_as_it_is(server, tmp_path):
    path = server.write_kubeconfig(tmp_path / "kubeconfig", token="sa-token")
    got = run(f"""
        import kubernetes
        full = sorted(sys.modules)
        from platformd.common import kubeclient
        api = kubeclient.load({path!r})
        print(json.dumps({{"version": bool(kubeclient.check_reachable(api)),
                           "same": sys.modules["kubernetes"] is kubernetes,
                           "dynamic": "kubernetes.dynamic" in full}}))
        """)
    assert got == {"version": True, "same": True, "dynamic": True}
