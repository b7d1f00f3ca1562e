"""kubectl (the real binary from .cache/tools) against the fake server."""

import json
import subprocess
from pathlib import Path

import pytest

KUBECTL = Path(__file__).resolve().parents[2] / ".cache" / "tools" / "kubectl"

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl not installed in .cache/tools")

INGRESS = """\
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: demo
  namespace: default
spec:
  ingressClassName: platform
  rules:
  - host: demo.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web
            port:
              number: 80
"""


def kubectl(fake_api, *args, check=True):
    proc = subprocess.run([str(KUBECTL), "--kubeconfig", str(fake_api.kubeconfig), *args],
                          capture_output=True, text=True, timeout=60)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_create_get_apply_delete(fake_api, tmp_path):
    manifest = tmp_path / "ingress.yaml"
    manifest.write_text(INGRESS)
    assert "created" in kubectl(fake_api, "create", "-f", str(manifest)).stdout
    table = kubectl(fake_api, "get", "ingresses", "-A").stdout
    assert "NAMESPACE" in table and "demo" in table and "demo.example.com" in table
    as_json = json.loads(kubectl(fake_api, "get", "ingress", "demo", "-o", "json").stdout)
    assert as_json["spec"]["rules"][0]["host"] == "demo.example.com"
    manifest.write_text(INGRESS.replace("demo.example.com", "new.example.com"))
    kubectl(fake_api, "apply", "--server-side", "-f", str(manifest))
    assert fake_api.get("ingresses", "default", "demo")["spec"]["rules"][0]["host"] == "new.example.com"
    assert fake_api.get("ingresses", "default", "demo")["metadata"]["generation"] == 2
    kubectl(fake_api, "delete", "-f", str(manifest))
    assert fake_api.get("ingresses", "default", "demo") is None


def test_server_side_validation_errors_reach_kubectl(fake_api, tmp_path):
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(INGRESS.replace("path: /", "path: relative"))
    proc = kubectl(fake_api, "create", "-f", str(manifest), check=False)
    assert proc.returncode != 0
    assert "must be an absolute path" in proc.stderr


def test_get_missing_and_names(fake_api):
    proc = kubectl(fake_api, "get", "configmap", "nope", check=False)
    assert proc.returncode != 0 and 'configmaps "nope" not found' in proc.stderr
    fake_api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}})
    assert kubectl(fake_api, "get", "cm", "-o", "name").stdout.split() == ["configmap/a"]


def test_label_selector_and_delete_by_name(fake_api):
    for name, app in (("a", "web"), ("b", "db")):
        fake_api.create({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": name, "namespace": "default", "labels": {"app": app}}})
    assert kubectl(fake_api, "get", "cm", "-l", "app=web", "-o", "name").stdout.split() == ["configmap/a"]
    kubectl(fake_api, "delete", "configmap", "b")
    assert fake_api.get("configmaps", "default", "b") is None


def test_client_side_apply(fake_api, tmp_path):
    manifest = tmp_path / "cm.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: default\n"
                        "data:\n  a: '1'\n")
    kubectl(fake_api, "apply", "-f", str(manifest))
    manifest.write_text(manifest.read_text().replace("'1'", "'2'"))
    kubectl(fake_api, "apply", "-f", str(manifest))
    assert fake_api.get("configmaps", "default", "cfg")["data"] == {"a": "2"}


def test_auth_can_i_and_create_token_with_rbac(tmp_path):
    from tests.fakeapi import FakeApiServer

    srv = FakeApiServer(rbac=True).start()
    try:
        srv.kubeconfig = srv.write_kubeconfig(tmp_path / "admin")
        srv.create({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "ingress", "namespace": "platform"}})
        srv.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": "read-ingresses"},
                    "rules": [{"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"],
                               "verbs": ["list", "watch"]}]})
        kubectl(srv, "create", "clusterrolebinding", "ingress", "--clusterrole=read-ingresses",
                "--serviceaccount=platform:ingress")
        sa = "--as=system:serviceaccount:platform:ingress"
        assert kubectl(srv, "auth", "can-i", "list", "ingresses", sa).stdout.strip() == "yes"
        proc = kubectl(srv, "auth", "can-i", "delete", "ingresses", sa, check=False)
        assert proc.stdout.strip() == "no" and proc.returncode == 1
        token = kubectl(srv, "create", "token", "ingress", "-n", "platform").stdout.strip()
        path = srv.write_kubeconfig(tmp_path / "sa", token=token)
        proc = subprocess.run([str(KUBECTL), "--kubeconfig", path, "get", "secrets", "-A"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and "Forbidden" in proc.stderr
    finally:
        srv.stop()


def test_imperative_creates_send_protobuf_and_are_decoded(fake_api):
    kubectl(fake_api, "create", "namespace", "team")
    kubectl(fake_api, "create", "configmap", "cfg", "-n", "team", "--from-literal=a=1")
    kubectl(fake_api, "create", "secret", "generic", "sec", "-n", "team", "--from-literal=pw=hunter2")
    kubectl(fake_api, "create", "serviceaccount", "bot", "-n", "team")
    kubectl(fake_api, "create", "role", "reader", "-n", "team", "--verb=get,list",
            "--resource=configmaps", "--resource-name=cfg")
    kubectl(fake_api, "create", "rolebinding", "reader", "-n", "team", "--role=reader",
            "--serviceaccount=team:bot")
    assert fake_api.get("configmaps", "team", "cfg")["data"] == {"a": "1"}
    assert fake_api.get("secrets", "team", "sec")["data"] == {"pw": "aHVudGVyMg=="}
    assert fake_api.get("serviceaccounts", "team", "bot") is not None
    role = fake_api.get("roles", "team", "reader")
    assert role["rules"] == [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": ["cfg"]}]
    binding = fake_api.get("rolebindings", "team", "reader")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}
    assert any(q.startswith("fieldManager=kubectl-create") for _, m, _, q, _ in fake_api.request_log if m == "POST")


def test_apply_a_chart_like_manifest_with_workloads(fake_api, tmp_path):
    manifest = tmp_path / "all.yaml"
    manifest.write_text("""\
apiVersion: v1
kind: Namespace
metadata: {name: platform}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ingress, namespace: platform}
spec:
  selector: {matchLabels: {app: ingress}}
  template:
    metadata: {labels: {app: ingress}}
    spec: {containers: [{name: c, image: example/platform:1}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: nodeproxy, namespace: platform}
spec:
  selector: {matchLabels: {app: nodeproxy}}
  template:
    metadata: {labels: {app: nodeproxy}}
    spec: {containers: [{name: c, image: example/platform:1}]}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: ingress, namespace: platform}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: ingress}}}
""")
    kubectl(fake_api, "apply", "--server-side", "-f", str(manifest))
    assert fake_api.get("deployments", "platform", "ingress")["metadata"]["generation"] == 1
    assert "nodeproxy" in kubectl(fake_api, "get", "ds", "-n", "platform").stdout
    kubectl(fake_api, "delete", "-f", str(manifest))
    assert fake_api.get("poddisruptionbudgets", "platform", "ingress") is None
