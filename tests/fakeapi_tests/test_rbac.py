"""Token authentication and RBAC evaluated from the server's own RBAC objects."""

import json

import pytest
from kubernetes import client, config

from tests.fakeapi import FakeApiServer

from .helpers import connect, raw

SA_USER = "system:serviceaccount:platform:ingress"


@pytest.fixture
def rbac_api(tmp_path):
    srv = FakeApiServer(rbac=True).start()
    srv.kubeconfig = srv.write_kubeconfig(tmp_path / "admin")
    try:
        yield srv
    finally:
        srv.stop()


def _client(srv, tmp_path, token):
    path = srv.write_kubeconfig(tmp_path / f"kc-{token}", token=token)
    return config.new_client_from_config(str(path))


def _seed(srv):
    srv.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "platform"}})
    srv.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "ingress-reader"},
                "rules": [{"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "ingressclasses"],
                           "verbs": ["get", "list", "watch"]},
                          {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses/status"],
                           "verbs": ["update", "patch"]}]})
    srv.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "ingress-reader"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "ingress-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "ingress", "namespace": "platform"}]})
    srv.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "leader", "namespace": "platform"},
                "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                           "verbs": ["get", "update"], "resourceNames": ["platform-leader"]},
                          {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                           "verbs": ["create"]}]})
    srv.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "leader", "namespace": "platform"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leader"},
                "subjects": [{"kind": "ServiceAccount", "name": "ingress"}]})
    srv.create({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}})
    srv.add_service_account_token("sa-token", "platform", "ingress")


def test_admin_kubeconfig_can_do_anything(rbac_api):
    api = config.new_client_from_config(str(rbac_api.kubeconfig))
    client.CoreV1Api(api).create_namespace({"metadata": {"name": "x"}})
    api.close()


def test_unknown_token_is_401_and_anonymous_is_403(rbac_api):
    status, body, _ = raw(rbac_api, "GET", "/api/v1/namespaces", token="nope")
    assert status == 401 and body["reason"] == "Unauthorized"
    status, body, _ = raw(rbac_api, "GET", "/api/v1/namespaces")
    assert status == 403 and body["reason"] == "Forbidden"
    assert 'User "system:anonymous" cannot list resource "namespaces"' in body["message"]


def test_cluster_role_binding_to_service_account(rbac_api, tmp_path):
    _seed(rbac_api)
    api = _client(rbac_api, tmp_path, "sa-token")
    net = client.NetworkingV1Api(api)
    assert [i.metadata.name for i in net.list_ingress_for_all_namespaces().items] == ["web"]
    ingress = net.read_namespaced_ingress("web", "default")
    ingress.status = {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}
    net.replace_namespaced_ingress_status("web", "default", ingress)
    with pytest.raises(client.ApiException) as e:
        net.replace_namespaced_ingress("web", "default", ingress)
    assert e.value.status == 403
    body = json.loads(e.value.body)
    assert body["message"] == (
        f'ingresses.networking.k8s.io "web" is forbidden: User "{SA_USER}" cannot update resource '
        f'"ingresses" in API group "networking.k8s.io" in the namespace "default"')
    assert body["details"] == {"name": "web", "group": "networking.k8s.io", "kind": "ingresses"}
    with pytest.raises(client.ApiException) as e:
        client.CoreV1Api(api).list_namespaced_secret("default")
    assert e.value.status == 403
    denied = rbac_api.denied_requests
    assert [(d["verb"], d["resource"], d["subresource"]) for d in denied] == [
        ("update", "ingresses", ""), ("list", "secrets", "")]
    assert denied[0]["user"] == SA_USER
    api.close()


def test_role_binding_is_namespaced_and_honours_resource_names(rbac_api, tmp_path):
    _seed(rbac_api)
    coord = client.CoordinationV1Api(_client(rbac_api, tmp_path, "sa-token"))
    lease = {"metadata": {"name": "platform-leader"}, "spec": {"holderIdentity": "a"}}
    coord.create_namespaced_lease("platform", lease)
    got = coord.read_namespaced_lease("platform-leader", "platform")
    got.spec.holder_identity = "b"
    coord.replace_namespaced_lease("platform-leader", "platform", got)
    coord.create_namespaced_lease("platform", {"metadata": {"name": "other"}})
    with pytest.raises(client.ApiException) as e:
        coord.read_namespaced_lease("other", "platform")       # not in resourceNames
    assert e.value.status == 403
    with pytest.raises(client.ApiException) as e:
        coord.create_namespaced_lease("default", lease)         # binding only in "platform"
    assert e.value.status == 403
    with pytest.raises(client.ApiException) as e:
        coord.list_namespaced_lease("platform")                # list not granted
    assert e.value.status == 403


def test_discovery_is_allowed_for_authenticated_users(rbac_api):
    rbac_api.add_token("t", "alice", ["dev"])
    assert raw(rbac_api, "GET", "/apis", token="t")[0] == 200
    assert raw(rbac_api, "GET", "/api/v1/namespaces", token="t")[0] == 403


def test_group_subjects_and_aggregated_cluster_roles(rbac_api):
    rbac_api.add_token("t", "alice", ["dev"])
    rbac_api.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                     "metadata": {"name": "view-ns", "labels": {"agg": "yes"}},
                     "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}]})
    rbac_api.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                     "metadata": {"name": "aggregate"},
                     "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "yes"}}]}})
    rbac_api.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": "devs"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                 "name": "aggregate"},
                     "subjects": [{"kind": "Group", "name": "dev"}]})
    assert raw(rbac_api, "GET", "/api/v1/namespaces", token="t")[0] == 200
    assert raw(rbac_api, "GET", "/api/v1/namespaces/default", token="t")[0] == 403


def test_access_reviews_and_impersonation(rbac_api, tmp_path):
    _seed(rbac_api)
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"verb": "list", "group": "networking.k8s.io",
                                              "resource": "ingresses"}}}
    status, body, _ = raw(rbac_api, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                          review, token="sa-token")
    assert status == 201 and body["status"]["allowed"] is True
    review["spec"]["resourceAttributes"]["verb"] = "delete"
    status, body, _ = raw(rbac_api, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                          review, token="sa-token")
    assert body["status"]["allowed"] is False
    # An admin may act as the service account (kubectl --as).
    conn = connect(rbac_api)
    conn.request("GET", "/api/v1/namespaces/default/secrets",
                 headers={"Authorization": "Bearer fakeapi-admin-token", "Impersonate-User": SA_USER})
    assert conn.getresponse().status == 403
    conn.close()
    # A service account may not impersonate anyone.
    conn = connect(rbac_api)
    conn.request("GET", "/apis", headers={"Authorization": "Bearer sa-token", "Impersonate-User": "admin"})
    resp = conn.getresponse()
    assert resp.status == 403 and b'cannot impersonate resource \\"users\\"' in resp.read()
    conn.close()


def test_token_request_gives_a_working_service_account_token(rbac_api):
    _seed(rbac_api)
    rbac_api.create({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": "ingress", "namespace": "platform"}})
    status, body, _ = raw(rbac_api, "POST", "/api/v1/namespaces/platform/serviceaccounts/ingress/token",
                          {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
                          token="fakeapi-admin-token")
    assert status == 201
    token = body["status"]["token"]
    assert raw(rbac_api, "GET", "/apis/networking.k8s.io/v1/ingresses", token=token)[0] == 200
    assert raw(rbac_api, "GET", "/api/v1/secrets", token=token)[0] == 403
    status, _, _ = raw(rbac_api, "POST", "/api/v1/namespaces/platform/serviceaccounts/missing/token",
                       {"spec": {}}, token="fakeapi-admin-token")
    assert status == 404


def test_rbac_serves_https_and_plain_http_can_be_chosen(rbac_api, tmp_path):
    assert rbac_api.url.startswith("https://")
    plain = FakeApiServer(rbac=True, tls=False).start()
    try:
        assert plain.url.startswith("http://")
        assert raw(plain, "GET", "/api/v1/namespaces", token="fakeapi-admin-token")[0] == 200
    finally:
        plain.stop()
