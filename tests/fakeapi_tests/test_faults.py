"""Fault injection, restart, request log and the standalone entry point."""

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.fakeapi import FakeApiServer
from tests.helpers.waiting import wait_for

from .helpers import raw

REPO = Path(__file__).resolve().parents[2]


def _cm(name, ns="default"):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}}


def test_start_is_fast():
    started = time.monotonic()
    srv = FakeApiServer().start()
    try:
        assert time.monotonic() - started < 0.2
        assert raw(srv, "GET", "/healthz")[0] == 200
    finally:
        srv.stop()


def test_fail_next_with_path_prefix(fake_api):
    fake_api.faults.fail_next(2, status=500, path_prefix="/api/v1/namespaces/default/configmaps")
    assert raw(fake_api, "GET", "/api/v1/namespaces")[0] == 200
    status, body, _ = raw(fake_api, "GET", "/api/v1/namespaces/default/configmaps")
    assert status == 500 and body["reason"] == "InternalError" and body["kind"] == "Status"
    assert raw(fake_api, "GET", "/api/v1/namespaces/default/configmaps")[0] == 500
    assert raw(fake_api, "GET", "/api/v1/namespaces/default/configmaps")[0] == 200


def test_fail_next_429_has_retry_after(fake_api):
    fake_api.faults.fail_next(1, status=429)
    status, body, headers = raw(fake_api, "GET", "/api/v1/configmaps")
    assert status == 429 and body["reason"] == "TooManyRequests"
    assert headers["Retry-After"] == "1"


def test_request_log_records_every_request(fake_api):
    before = len(fake_api.request_log)
    raw(fake_api, "GET", "/api/v1/namespaces/default/configmaps", query={"limit": "5"})
    raw(fake_api, "GET", "/api/v1/namespaces/default/configmaps/missing")
    entries = fake_api.request_log[before:]
    assert [(m, p, q, s) for _, m, p, q, s in entries] == [
        ("GET", "/api/v1/namespaces/default/configmaps", "limit=5", 200),
        ("GET", "/api/v1/namespaces/default/configmaps/missing", "", 404)]
    assert entries[0][0] <= entries[1][0] <= time.monotonic()


def _open_watch(srv, rv):
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=5)
    conn.request("GET", f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}")
    return conn, conn.getresponse()


def test_drop_watches_ends_streams(fake_api):
    conn, resp = _open_watch(fake_api, fake_api.storage.resource_version)
    time.sleep(0.1)
    fake_api.faults.drop_watches()
    started = time.monotonic()
    assert resp.read() == b""   # clean end of the chunked stream
    assert time.monotonic() - started < 2
    conn.close()


def test_abrupt_drop_cuts_connection(fake_api):
    conn, resp = _open_watch(fake_api, fake_api.storage.resource_version)
    time.sleep(0.1)
    fake_api.faults.drop_watches(abrupt=True)
    with pytest.raises(http.client.IncompleteRead):
        resp.read()
    conn.close()


def test_stall_watches_delays_events(fake_api):
    conn, resp = _open_watch(fake_api, fake_api.storage.resource_version)
    fake_api.faults.stall_watches(0.5)
    started = time.monotonic()
    fake_api.create(_cm("a"))
    line = resp.readline()
    assert json.loads(line)["type"] == "ADDED"
    assert time.monotonic() - started >= 0.4
    conn.close()


def test_restart_keeps_port_data_and_counts_on(fake_api, core):
    fake_api.create(_cm("a"))
    rv = int(fake_api.get("configmaps", "default", "a")["metadata"]["resourceVersion"])
    port = fake_api.port
    conn, resp = _open_watch(fake_api, rv)
    fake_api.restart()
    assert fake_api.port == port
    with pytest.raises((http.client.IncompleteRead, ConnectionError)):
        resp.read()
    conn.close()
    created = core.create_namespaced_config_map("default", _cm("b"))
    assert int(created.metadata.resource_version) > rv
    assert {c.metadata.name for c in core.list_namespaced_config_map("default").items} == {"a", "b"}


def test_stop_refuses_connections(fake_api):
    fake_api.stop()
    with pytest.raises(ConnectionError):
        raw(fake_api, "GET", "/version")
    fake_api.start()
    assert raw(fake_api, "GET", "/version")[0] == 200


def test_client_reconnects_after_restart(fake_api, tmp_path):
    api = config.new_client_from_config(str(fake_api.kubeconfig))
    core = client.CoreV1Api(api)
    core.list_namespace()                      # keep-alive connection now open
    fake_api.restart()
    wait_for(lambda: core.list_namespace().items, timeout=5, interval=0.05, ignore=(Exception,))
    api.close()


def test_standalone_module(tmp_path):
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: loaded\n  namespace: demo\n"
        "---\napiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata:\n  name: platform\n"
        "spec:\n  controller: example.com/platform\n")
    kubeconfig = tmp_path / "kubeconfig"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakeapi", "--port", "0", "--kubeconfig",
                             str(kubeconfig), "--load", str(manifests)],
                            stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        api = config.new_client_from_config(str(kubeconfig))
        assert client.CoreV1Api(api).read_namespaced_config_map("loaded", "demo").metadata.name == "loaded"
        api.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_watch_threads_end_when_client_goes_away(fake_api):
    conn, resp = _open_watch(fake_api, fake_api.storage.resource_version)
    time.sleep(0.1)
    assert fake_api.open_watches == 1
    conn.close()
    resp.close()
    wait_for(lambda: fake_api.open_watches == 0, timeout=3, message="no open watches")


def test_standalone_rbac_with_token_file(tmp_path):
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('admin-token,alice,1,"system:masters"\nweak-token,bob,2\n')
    kubeconfig = tmp_path / "kubeconfig"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakeapi", "--rbac", "--kubeconfig",
                             str(kubeconfig), "--token", "admin-token", "--token-auth-file", str(tokens)],
                            stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("https://127.0.0.1:")
        api = config.new_client_from_config(str(kubeconfig))
        assert client.CoreV1Api(api).list_namespace().items
        api.close()
        weak = tmp_path / "weak"
        weak.write_text(kubeconfig.read_text().replace("token: admin-token", "token: weak-token"))
        api = config.new_client_from_config(str(weak))
        with pytest.raises(client.ApiException) as e:
            client.CoreV1Api(api).list_namespace()
        assert e.value.status == 403
        api.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
