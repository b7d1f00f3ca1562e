"""The chart's RBAC is enough for the code, and the code needs nothing beyond
deploy/rbac-expected.yaml.

Each component runs as a real process against the fake API server with RBAC
on, authenticated as the ServiceAccount the chart renders, with the chart's
Roles and bindings as the only grants. Every request it makes is then mapped
to an RBAC attribute (verb, group, resource): none may be refused (403) and
each must be in the expectation file. The static comparison in test_rbac.py
keeps the chart equal to the file; this keeps the file honest about the code.

Only the paths a short run takes are seen (no Ingress status cleared by a
class change, for instance), so this proves "sufficient for what ran", not
"minimal".
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import parse_qs

import pytest

from tests.fakeapi import FakeApiServer

from . import helmtool, rbac
from .helmtool import container, workload

pytestmark = pytest.mark.slow

NS = helmtool.NAMESPACE
NODE = "node-a"
NODE_IP = "192.0.2.21"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request_atoms(log) -> tuple[set[tuple[str, str, str]], list[str]]:
    """(group, resource, verb) of each resource request in the fake server's log,
    and a description of every refused one."""
    used, refused = set(), []
    for _, method, path, query, status in log:
        parts = path.strip("/").split("/")
        if parts[:1] == ["api"] and len(parts) >= 3:
            group, rest = "", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 4:
            group, rest = parts[1], parts[3:]
        else:
            continue                                    # discovery, /version, /healthz
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            rest = rest[2:]                             # namespaced resource
        resource = "/".join([rest[0]] + rest[2:3])      # plural, plus a subresource
        named = len(rest) >= 2
        watch = parse_qs(query).get("watch", ["false"])[0] in ("true", "1")
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
            method, "watch" if watch else ("get" if named else "list"))
        used.add((group, resource, verb))
        if status == 403:
            refused.append(f"{method} {path}?{query}")
    return used, refused


def expected_atoms(component: str) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for _, group, resource, verb in rbac.expected(component)}


@pytest.fixture
def api_as(rendered, tmp_path):
    """Start an RBAC-enforcing fake API server loaded with the chart's RBAC;
    returns (server, kubeconfig path for the component's ServiceAccount)."""
    servers = []

    def start(component_label: str, scenario: str = "both", namespace: str = "apps"):
        docs = rendered(scenario)
        srv = FakeApiServer(rbac=True).start()
        servers.append(srv)
        srv.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        srv.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        for doc in docs:
            if doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                               "IngressClass", "ConfigMap"):
                srv.create(doc)
        sa = workload(docs, component_label)["spec"]["template"]["spec"]["serviceAccountName"]
        token = f"token-{sa}"
        srv.add_service_account_token(token, NS, sa)
        kubeconfig = srv.write_kubeconfig(tmp_path / f"{sa}.kubeconfig", token=token, namespace=NS)
        seed_workload_objects(srv, namespace)
        return srv, kubeconfig, docs

    yield start
    for srv in servers:
        srv.stop()


def seed_workload_objects(srv: FakeApiServer, namespace: str = "apps") -> None:
    """A node, and one Service with endpoints behind one Ingress of our class, in ``namespace``
    (plus an Opaque Secret there, which the controller must never list)."""
    srv.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": "password", "namespace": namespace}, "data": {"p": "aHVudGVyMg=="}})
    srv.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
                "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}]}})
    srv.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": namespace},
                "spec": {"clusterIP": "10.96.0.20", "ports": [{"name": "http", "port": 80, "targetPort": 8080,
                                                               "protocol": "TCP"}],
                         "selector": {"app": "web"}}})
    srv.create({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "web-1", "namespace": namespace,
                             "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": True}}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
    srv.create({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": "web", "namespace": namespace},
                "spec": {"ingressClassName": "platform",
                         "rules": [{"host": "web.example", "http": {"paths": [
                             {"path": "/", "pathType": "Prefix",
                              "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})


def component_args(docs, label: str, drop: set[str]) -> list[str]:
    """The chart's flags for the program itself (platformd's own dropped)."""
    args = container(workload(docs, label))["args"][1:]
    keep = []
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in drop | {"--state-dir", "--log-format", "--health-address", "--health-port", "--healthz-port"}:
            continue
        keep.append(arg.replace("$(NODE_NAME)", NODE).replace("$(NODE_IP)", NODE_IP))
    return keep


def assert_within_expected(srv: FakeApiServer, component: str) -> None:
    used, refused = request_atoms(srv.request_log)
    assert not refused, f"{component}: requests refused by the chart's RBAC:\n" + "\n".join(refused)
    beyond = used - expected_atoms(component)
    assert not beyond, f"{component} used API access missing from deploy/rbac-expected.yaml: {sorted(beyond)}"
    assert used, f"{component} made no API requests"


def test_nodeproxy_needs_no_more_than_the_chart_grants(api_as, tmp_path):
    srv, kubeconfig, docs = api_as("node-proxy")
    args = component_args(docs, "node-proxy", drop={"--healthz-bind-address", "--metrics-bind-address"})
    proc = subprocess.run(
        [sys.executable, "-m", "platformd.cli", "nodeproxy", "--kubeconfig", kubeconfig, "--dry-run", "--once",
         f"--healthz-bind-address=127.0.0.1:{free_port()}", "--metrics-bind-address=", *args],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_within_expected(srv, "nodeproxy")


@pytest.mark.parametrize("scenario,namespace,expected", [("both", "apps", "ingress"),
                                                         ("ingress-namespaced", "team-a", "ingress-namespaced")])
def test_ingress_needs_no_more_than_the_chart_grants(api_as, tmp_path, scenario, namespace, expected):
    """Also with rbac.scope namespace: Roles in the watched and release namespaces are enough."""
    if shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"):
        pytest.skip("nginx is not installed (scripts/setup.sh installs it)")
    srv, kubeconfig, docs = api_as("ingress-controller", scenario, namespace)
    # Status from the node's address: exercises the Node read too.
    args = component_args(docs, "ingress-controller", drop={"--publish-service", "--http-port", "--https-port"})
    env = dict(os.environ, POD_NAMESPACE=NS, POD_NAME="ingress-0", NODE_NAME=NODE)
    proc = subprocess.Popen(
        [sys.executable, "-m", "platformd.cli", "ingress", "--kubeconfig", kubeconfig,
         "--state-dir", str(tmp_path / "state"), f"--http-port={free_port()}", f"--https-port={free_port()}",
         "--healthz-host=127.0.0.1", f"--healthz-port={free_port()}", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
        start_new_session=True)
    try:
        status = wait_for_status(srv, proc, timeout=60, namespace=namespace)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)      # shutdown path: status cleared, Lease released
        try:
            output, _ = proc.communicate(timeout=45)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
    assert_within_expected(srv, expected)
    assert status == [{"ip": NODE_IP}], f"the controller never wrote the Ingress status:\n{output[-3000:]}"
    secret_lists = [query for _, method, path, query, _ in srv.request_log if path.endswith("/secrets")]
    # Secrets are only ever asked for by type (#15): TLS ones, and Opaque ones
    # for auth-secret (#12; docs/security.md says what is kept of them);
    # service-account tokens and every other type stay unseen.
    assert secret_lists and all(parse_qs(q).get("fieldSelector") in (["type=kubernetes.io/tls"], ["type=Opaque"])
                                for q in secret_lists), secret_lists


def wait_for_status(srv: FakeApiServer, proc: subprocess.Popen, timeout: float, namespace: str = "apps") -> list:
    """The Ingress's status.loadBalancer.ingress once written; [] on timeout,
    on exit, or as soon as a request was refused (it would only be retried)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        ingress = srv.get("Ingress", namespace, "web") or {}
        status = ((ingress.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        if status or request_atoms(list(srv.request_log))[1]:
            return status
        time.sleep(0.5)
    return []
