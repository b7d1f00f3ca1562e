"""CRUD, patch, status and discovery through the real `kubernetes` client."""

import json

import pytest
from kubernetes import client

from .helpers import raw


def _status(exc: client.ApiException) -> dict:
    return json.loads(exc.body)


def _ingress(name="web", host="example.com", path="/", service="web", port=80, ns="default"):
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"rules": [{"host": host, "http": {"paths": [{
            "path": path, "pathType": "Prefix",
            "backend": {"service": {"name": service, "port": {"number": port}}}}]}}]},
    }


def test_discovery_documents(fake_api, api_client):
    groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
    assert {"networking.k8s.io", "discovery.k8s.io", "coordination.k8s.io", "events.k8s.io",
            "rbac.authorization.k8s.io"} <= groups
    core = {r.name for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert {"namespaces", "services", "secrets", "configmaps", "nodes", "pods", "events",
            "serviceaccounts", "endpoints", "services/status"} <= core
    net = client.NetworkingV1Api(api_client).get_api_resources().resources
    ingress = next(r for r in net if r.name == "ingresses")
    assert ingress.namespaced and ingress.kind == "Ingress" and "watch" in ingress.verbs
    assert any(r.name == "ingresses/status" for r in net)
    assert client.VersionApi(api_client).get_code().major == "1"
    status, body, _ = raw(fake_api, "GET", "/api")
    assert status == 200 and body["versions"] == ["v1"]
    assert raw(fake_api, "GET", "/apis/nope.example.com/v1")[0] == 404


def test_create_get_update_delete(core):
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    assert created.metadata.uid and created.metadata.creation_timestamp
    rv1 = int(created.metadata.resource_version)
    got = core.read_namespaced_config_map("cm", "default")
    assert got.data == {"a": "1"} and got.metadata.resource_version == str(rv1)
    got.data = {"a": "2"}
    updated = core.replace_namespaced_config_map("cm", "default", got)
    assert int(updated.metadata.resource_version) > rv1
    assert updated.metadata.uid == created.metadata.uid
    deleted = core.delete_namespaced_config_map("cm", "default")
    assert deleted is not None
    with pytest.raises(client.ApiException) as e:
        core.read_namespaced_config_map("cm", "default")
    assert e.value.status == 404
    body = _status(e.value)
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": 'configmaps "cm" not found', "reason": "NotFound",
                    "details": {"name": "cm", "kind": "configmaps"}, "code": 404}


def test_already_exists_and_stale_update_conflict(core):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    with pytest.raises(client.ApiException) as e:
        core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    assert e.value.status == 409 and _status(e.value)["reason"] == "AlreadyExists"
    first = core.read_namespaced_config_map("cm", "default")
    second = core.read_namespaced_config_map("cm", "default")
    first.data = {"x": "1"}
    core.replace_namespaced_config_map("cm", "default", first)
    second.data = {"x": "2"}
    with pytest.raises(client.ApiException) as e:
        core.replace_namespaced_config_map("cm", "default", second)
    assert e.value.status == 409
    body = _status(e.value)
    assert body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    # Without a resourceVersion the update is unconditional, like the real server.
    second.metadata.resource_version = None
    assert core.replace_namespaced_config_map("cm", "default", second).data == {"x": "2"}


def test_unchanged_update_keeps_resource_version(core):
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    again = core.replace_namespaced_config_map("cm", "default", created)
    assert again.metadata.resource_version == created.metadata.resource_version


def test_generate_name(core):
    obj = core.create_namespaced_config_map("default", {"metadata": {"generateName": "cm-"}})
    assert obj.metadata.name.startswith("cm-") and len(obj.metadata.name) == 8


def test_missing_namespace_is_not_found(core):
    with pytest.raises(client.ApiException) as e:
        core.create_namespaced_config_map("nope", {"metadata": {"name": "cm"}})
    assert e.value.status == 404
    assert _status(e.value)["message"] == 'namespaces "nope" not found'


def test_namespace_delete_removes_its_objects(fake_api, core):
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_config_map("team", {"metadata": {"name": "cm"}})
    ns = core.read_namespace("team")
    assert ns.status.phase == "Active"
    assert ns.metadata.labels["kubernetes.io/metadata.name"] == "team"
    core.delete_namespace("team")
    assert fake_api.get("namespaces", None, "team")["status"]["phase"] == "Terminating"
    # Content stays (and can still be deleted) until the namespace controller runs ...
    assert fake_api.get("configmaps", "team", "cm") is not None
    with pytest.raises(client.ApiException) as e:
        core.create_namespaced_config_map("team", {"metadata": {"name": "late"}})
    assert e.value.status == 403
    assert _status(e.value)["message"] == ('configmaps "late" is forbidden: unable to create new '
                                           'content in namespace team because it is being terminated')
    fake_api.finalize_namespaces()
    assert fake_api.get("configmaps", "team", "cm") is None
    assert fake_api.get("namespaces", None, "team") is None


def test_namespace_controller_runs_after_a_delay(tmp_path):
    from tests.fakeapi import FakeApiServer
    from tests.helpers.waiting import wait_for
    with FakeApiServer(namespace_finalize_delay=0.1) as srv:
        srv.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "x"}})
        srv.delete("namespaces", None, "x")
        wait_for(lambda: srv.get("namespaces", None, "x") is None, timeout=5, message="namespace x gone")
        assert srv.get("configmaps", "x", "cm") is None


def test_name_mismatch_is_bad_request(core):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    with pytest.raises(client.ApiException) as e:
        core.replace_namespaced_config_map("cm", "default", {"metadata": {"name": "other"}})
    assert e.value.status == 400 and _status(e.value)["reason"] == "BadRequest"


def test_service_defaults_allocate_cluster_ip_and_node_ports(core):
    a = core.create_namespaced_service("default", {"metadata": {"name": "a"},
                                                   "spec": {"ports": [{"port": 80}]}})
    b = core.create_namespaced_service("default", {"metadata": {"name": "b"},
                                                   "spec": {"type": "NodePort",
                                                            "ports": [{"port": 80, "targetPort": 8080}]}})
    assert a.spec.cluster_ip != b.spec.cluster_ip
    assert a.spec.cluster_ips == [a.spec.cluster_ip] and a.spec.type == "ClusterIP"
    assert a.spec.ports[0].protocol == "TCP" and a.spec.ports[0].target_port == 80
    assert 30000 <= b.spec.ports[0].node_port <= 32767
    headless = core.create_namespaced_service("default", {"metadata": {"name": "h"},
                                                          "spec": {"clusterIP": "None"}})
    assert headless.spec.cluster_ip == "None"
    a.spec.cluster_ip = "10.96.99.99"
    a.spec.cluster_ips = ["10.96.99.99"]
    with pytest.raises(client.ApiException) as e:
        core.replace_namespaced_service("a", "default", a)
    assert e.value.status == 422


def test_ingress_generation_and_status_subresource(net):
    created = net.create_namespaced_ingress("default", _ingress())
    assert created.metadata.generation == 1
    # Labels do not bump generation; spec does.
    created.metadata.labels = {"team": "a"}
    labelled = net.replace_namespaced_ingress("web", "default", created)
    assert labelled.metadata.generation == 1
    labelled.spec.rules[0].host = "other.example.com"
    changed = net.replace_namespaced_ingress("web", "default", labelled)
    assert changed.metadata.generation == 2
    # A plain PUT cannot change status ...
    changed.status = {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}
    after_put = net.replace_namespaced_ingress("web", "default", changed)
    assert not after_put.status.load_balancer.ingress
    # ... the /status subresource can, and only status.
    after_put.status = {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}
    after_put.spec.rules[0].host = "ignored.example.com"
    after_status = net.replace_namespaced_ingress_status("web", "default", after_put)
    assert after_status.status.load_balancer.ingress[0].ip == "192.0.2.1"
    assert after_status.spec.rules[0].host == "other.example.com"
    assert after_status.metadata.generation == 2
    patched = net.patch_namespaced_ingress_status(
        "web", "default", {"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example"}]}}})
    assert patched.status.load_balancer.ingress[0].hostname == "lb.example"


def test_patch_flavours(core, api_client):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm", "labels": {"a": "1"}},
                                                  "data": {"k": "v", "drop": "x"}})
    merged = core.patch_namespaced_config_map("cm", "default", {"data": {"k": "v2", "drop": None}})
    assert merged.data == {"k": "v2"}
    jp = core.patch_namespaced_config_map("cm", "default", [
        {"op": "add", "path": "/data/n", "value": "1"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "2"}])
    assert jp.data == {"k": "v2", "n": "1"} and jp.metadata.labels == {"a": "2"}
    with pytest.raises(client.ApiException) as e:
        core.patch_namespaced_config_map("cm", "default", [{"op": "test", "path": "/data/k", "value": "no"}])
    assert e.value.status == 422
    merge = core.patch_namespaced_config_map("cm", "default", {"data": {"m": "1"}},
                                             _content_type="application/merge-patch+json")
    assert merge.data["m"] == "1"


def test_patch_with_stale_resource_version_conflicts(core):
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    core.patch_namespaced_config_map("cm", "default", {"data": {"a": "1"}})
    with pytest.raises(client.ApiException) as e:
        core.patch_namespaced_config_map("cm", "default", {"metadata": {
            "resourceVersion": created.metadata.resource_version}, "data": {"a": "2"}})
    assert e.value.status == 409


def test_server_side_apply_creates_then_merges(fake_api):
    manifest = ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  namespace: default\n"
                "data:\n  a: '1'\n")
    status, body, _ = raw(fake_api, "PATCH", "/api/v1/namespaces/default/configmaps/applied",
                          manifest, {"fieldManager": "test"}, "application/apply-patch+yaml")
    assert status == 201 and body["data"] == {"a": "1"}
    status, body, _ = raw(fake_api, "PATCH", "/api/v1/namespaces/default/configmaps/applied",
                          manifest.replace("'1'", "'2'"), {"fieldManager": "test"},
                          "application/apply-patch+yaml")
    assert status == 200 and body["data"] == {"a": "2"}
    status, body, _ = raw(fake_api, "PATCH", "/api/v1/namespaces/default/configmaps/applied",
                          "{}", None, "text/plain")
    assert status == 415


def test_finalizers_delay_deletion(core):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm", "finalizers": ["x/y"]}})
    core.delete_namespaced_config_map("cm", "default")
    pending = core.read_namespaced_config_map("cm", "default")
    assert pending.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("cm", "default", {"metadata": {"finalizers": None}})
    with pytest.raises(client.ApiException) as e:
        core.read_namespaced_config_map("cm", "default")
    assert e.value.status == 404


def test_delete_precondition(core):
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    core.patch_namespaced_config_map("cm", "default", {"data": {"a": "1"}})
    with pytest.raises(client.ApiException) as e:
        core.delete_namespaced_config_map("cm", "default", body=client.V1DeleteOptions(
            preconditions=client.V1Preconditions(resource_version=created.metadata.resource_version)))
    assert e.value.status == 409


def test_secret_string_data_is_encoded(core):
    secret = core.create_namespaced_secret("default", {"metadata": {"name": "s"},
                                                       "stringData": {"k": "hello"}})
    assert secret.data == {"k": "aGVsbG8="} and secret.type == "Opaque"


def test_cluster_scoped_and_all_namespaces_paths(fake_api, core, net):
    net.create_ingress_class({"metadata": {"name": "platform"}, "spec": {"controller": "example.com/platform"}})
    assert [c.metadata.name for c in net.list_ingress_class().items] == ["platform"]
    core.create_node({"metadata": {"name": "node-1"}})
    assert core.read_node("node-1").metadata.name == "node-1"
    fake_api.create(_ingress(name="a", ns="one"))
    fake_api.create(_ingress(name="b", ns="two"))
    listed = net.list_ingress_for_all_namespaces()
    assert [(i.metadata.namespace, i.metadata.name) for i in listed.items] == [("one", "a"), ("two", "b")]
    assert listed.kind == "IngressList" and listed.api_version == "networking.k8s.io/v1"


def test_leases_and_endpointslices_round_trip(coord, disc):
    lease = coord.create_namespaced_lease("default", {
        "metadata": {"name": "leader"},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15,
                 "renewTime": "2026-01-01T00:00:00.000000Z"}})
    assert lease.spec.holder_identity == "me"
    eps = disc.create_namespaced_endpoint_slice("default", {
        "metadata": {"name": "web-abc", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": True}}],
        "ports": [{"name": "http", "port": 8080}]})
    assert eps.ports[0].protocol == "TCP"


def test_fixture_direct_methods(fake_api):
    created = fake_api.create(_ingress(ns="fresh"))  # creates the namespace too
    assert fake_api.get("namespaces", None, "fresh") is not None
    created["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.9"}]}}
    updated = fake_api.update(created)
    assert updated["status"]["loadBalancer"]["ingress"][0]["ip"] == "192.0.2.9"
    assert fake_api.get("Ingress", "fresh", "web")["metadata"]["resourceVersion"] == \
        updated["metadata"]["resourceVersion"]
    assert [o["metadata"]["name"] for o in fake_api.list_objects("ingresses")] == ["web"]
    fake_api.delete("Ingress", "fresh", "web")
    assert fake_api.get("ingresses", "fresh", "web") is None


def test_dry_run_does_not_persist(fake_api, core):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}}, dry_run="All")
    assert fake_api.get("configmaps", "default", "cm") is None


def test_events_are_one_storage_seen_through_two_apis(fake_api, api_client, core):
    events = client.EventsV1Api(api_client)
    created = events.create_namespaced_event("default", {
        "metadata": {"name": "web.1"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "example.com/platform", "reportingInstance": "pod-1",
        "action": "Sync", "reason": "Synced", "type": "Normal", "note": "all good",
        "regarding": {"kind": "Ingress", "namespace": "default", "name": "web"}})
    assert created.note == "all good"
    legacy = core.read_namespaced_event("web.1", "default")
    assert legacy.message == "all good" and legacy.involved_object.name == "web"
    assert legacy.reporting_component == "example.com/platform"
    core.patch_namespaced_event("web.1", "default", {"count": 2})
    assert events.read_namespaced_event("web.1", "default").deprecated_count == 2
    assert [e.metadata.name for e in events.list_namespaced_event(
        "default", field_selector="regarding.name=web").items] == ["web.1"]
    core.create_namespaced_event("default", {"metadata": {"name": "old.1"}, "message": "hi",
                                             "involvedObject": {"kind": "Pod", "name": "p"}})
    status, listed, _ = raw(fake_api, "GET", "/apis/events.k8s.io/v1/namespaces/default/events")
    assert [(e["metadata"]["name"], e["eventTime"]) for e in listed["items"]] == [
        ("old.1", None), ("web.1", "2026-01-01T00:00:00.000000Z")]  # normalised like Go
    status, body, _ = raw(fake_api, "POST", "/apis/events.k8s.io/v1/namespaces/default/events",
                          {"metadata": {"name": "bad"}, "reason": "X"})
    assert status == 422
    assert {c["field"] for c in body["details"]["causes"]} == {"eventTime", "type"}
    status, body, _ = raw(fake_api, "POST", "/apis/events.k8s.io/v1/namespaces/default/events",
                          {"metadata": {"name": "bad"}, "type": "Normal",
                           "eventTime": "2026-01-01T00:00:00.000000Z"})
    assert {c["field"] for c in body["details"]["causes"]} == {
        "reportingController", "reportingInstance", "action", "reason"}
    # Old-style events live in the namespace of the object they are about.
    status, body, _ = raw(fake_api, "POST", "/api/v1/namespaces/default/events",
                          {"metadata": {"name": "elsewhere"}, "message": "x",
                           "involvedObject": {"kind": "Pod", "namespace": "other", "name": "p"}})
    assert status == 422 and body["details"]["causes"][0]["field"] == "involvedObject.namespace"


def test_delete_answers_like_the_real_server(fake_api, core):
    cm = fake_api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}})
    status, body, _ = raw(fake_api, "DELETE", "/api/v1/namespaces/default/configmaps/cm")
    assert status == 200 and body == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                      "status": "Success",
                                      "details": {"name": "cm", "kind": "configmaps",
                                                  "uid": cm["metadata"]["uid"]}}
    core.create_namespaced_service("default", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 1}]}})
    status, body, _ = raw(fake_api, "DELETE", "/api/v1/namespaces/default/services/s")
    assert status == 200 and body["kind"] == "Service"   # services return the deleted object


def _apply(fake_api, manifest: dict, manager: str | None = "deploy"):
    path = "/api/v1/namespaces/default/configmaps/" + manifest["metadata"]["name"]
    query = {"fieldManager": manager} if manager else None
    return raw(fake_api, "PATCH", path, json.dumps(manifest), query, "application/apply-patch+yaml")


def test_server_side_apply_removes_fields_the_manager_dropped(fake_api):
    manifest = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cfg", "labels": {"a": "1", "b": "2"}},
                "data": {"x": "1", "y": "2"}}
    status, body, _ = _apply(fake_api, manifest)
    assert status == 201
    entry = body["metadata"]["managedFields"][0]
    assert entry["manager"] == "deploy" and entry["operation"] == "Apply"
    assert entry["fieldsV1"]["f:data"] == {"f:x": {}, "f:y": {}}
    # Another applier owns z; a plain patch adds w (not tracked: stays).
    _apply(fake_api, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
                      "data": {"z": "3"}}, manager="other")
    raw(fake_api, "PATCH", "/api/v1/namespaces/default/configmaps/cfg", {"data": {"w": "4"}}, None,
        "application/merge-patch+json")
    manifest["metadata"]["labels"] = {"a": "1"}
    manifest["data"] = {"x": "1"}
    status, body, _ = _apply(fake_api, manifest)
    assert status == 200
    assert body["metadata"]["labels"] == {"a": "1"}
    assert body["data"] == {"x": "1", "z": "3", "w": "4"}
    assert sorted(e["manager"] for e in body["metadata"]["managedFields"]) == ["deploy", "other"]


def test_server_side_apply_needs_a_field_manager(fake_api):
    status, body, _ = _apply(fake_api, {"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": "cfg"}}, manager=None)
    assert status == 422 and body["details"]["causes"][0]["field"] == "fieldManager"


def test_service_update_keeps_allocations(core):
    svc = core.create_namespaced_service("default", {"metadata": {"name": "np"}, "spec": {
        "type": "NodePort", "ports": [{"port": 80}]}})
    replaced = core.replace_namespaced_service("np", "default", {
        "metadata": {"name": "np", "labels": {"x": "1"}}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}})
    assert replaced.spec.cluster_ip == svc.spec.cluster_ip
    assert replaced.spec.ports[0].node_port == svc.spec.ports[0].node_port


def test_create_resets_status_but_seeding_keeps_it(fake_api, net):
    lb = {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}}
    posted = net.create_namespaced_ingress("default", {**_ingress(name="posted"), "status": lb})
    assert not posted.status.load_balancer.ingress
    seeded = fake_api.create({**_ingress(name="seeded"), "status": lb})
    assert seeded["status"] == lb


def test_endpointslice_generation_counts_endpoint_changes(fake_api):
    eps = fake_api.create({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                           "metadata": {"name": "web-1", "namespace": "default"}, "addressType": "IPv4",
                           "endpoints": [{"addresses": ["10.1.0.5"]}], "ports": [{"port": 80}]})
    assert eps["metadata"]["generation"] == 1
    eps["metadata"]["labels"] = {"kubernetes.io/service-name": "web"}
    eps = fake_api.update(eps)
    assert eps["metadata"]["generation"] == 1
    eps["endpoints"].append({"addresses": ["10.1.0.6"]})
    assert fake_api.update(eps)["metadata"]["generation"] == 2


def test_strategic_merge_patch_merges_lists_by_key(fake_api, core):
    core.create_namespaced_service("default", {"metadata": {"name": "s", "finalizers": ["a/b"]}, "spec": {
        "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}})
    patched = core.patch_namespaced_service("s", "default", {"spec": {"ports": [
        {"port": 80, "targetPort": 8080}, {"name": "metrics", "port": 9090}]},
        "metadata": {"finalizers": ["c/d"]}})
    assert [(p.name, p.port, p.target_port) for p in patched.spec.ports] == [
        ("http", 80, 8080), ("https", 443, 443), ("metrics", 9090, 9090)]
    assert patched.metadata.finalizers == ["a/b", "c/d"]
    patched = core.patch_namespaced_service("s", "default", {"spec": {
        "$setElementOrder/ports": [{"port": 9090}, {"port": 80}, {"port": 443}],
        "ports": [{"port": 443, "$patch": "delete"}]}})
    assert [p.port for p in patched.spec.ports] == [9090, 80]
    # Lists without a merge strategy (EndpointSlice endpoints) are replaced whole.
    fake_api.create({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                     "metadata": {"name": "e", "namespace": "default"}, "addressType": "IPv4",
                     "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]})
    status, body, _ = raw(fake_api, "PATCH", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/e",
                          {"endpoints": [{"addresses": ["10.0.0.3"]}]}, None,
                          "application/strategic-merge-patch+json")
    assert [e["addresses"] for e in body["endpoints"]] == [["10.0.0.3"]]
