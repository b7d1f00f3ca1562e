"""The Gateway API kinds as the fake server serves them: CRD defaults, CEL-like
validation, the status subresource, generation, and CRDs not installed."""

import pytest
from kubernetes import client

from tests.fakeapi import FakeApiServer

from .helpers import raw

GW = "/apis/gateway.networking.k8s.io/v1"


def _route(name="r", **spec):
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def _gateway(name="g", listeners=None):
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"gatewayClassName": "platform",
                     "listeners": listeners or [{"name": "http", "port": 80, "protocol": "HTTP"}]}}


def test_httproute_defaults_fill_rules_matches_and_refs(fake_api):
    status, route, _ = raw(fake_api, "POST", f"{GW}/namespaces/default/httproutes", _route(
        parentRefs=[{"name": "g"}],
        rules=[{"matches": [{"headers": [{"name": "x", "value": "1"}]}],
                "backendRefs": [{"name": "svc", "port": 80}]},
               {}]))
    assert status == 201, route
    spec = route["spec"]
    assert spec["parentRefs"] == [{"name": "g", "group": "gateway.networking.k8s.io", "kind": "Gateway"}]
    first, second = spec["rules"]
    assert first["matches"][0] == {"headers": [{"name": "x", "value": "1", "type": "Exact"}],
                                   "path": {"type": "PathPrefix", "value": "/"}}
    assert first["backendRefs"] == [{"name": "svc", "port": 80, "group": "", "kind": "Service", "weight": 1}]
    assert second["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert route["metadata"]["generation"] == 1


def test_httproute_without_rules_gets_the_default_rule(fake_api):
    route = fake_api.create(_route(parentRefs=[{"name": "g"}]))
    assert route["spec"]["rules"] == [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}]}]


def test_gateway_defaults_and_pending_status(fake_api):
    gw = fake_api.create(_gateway(listeners=[
        {"name": "https", "port": 443, "protocol": "HTTPS", "tls": {"certificateRefs": [{"name": "cert"}]}}]))
    listener = gw["spec"]["listeners"][0]
    assert listener["allowedRoutes"] == {"namespaces": {"from": "Same"}}
    assert listener["tls"] == {"mode": "Terminate",
                               "certificateRefs": [{"name": "cert", "group": "", "kind": "Secret"}]}
    assert [(c["type"], c["status"], c["reason"]) for c in gw["status"]["conditions"]] == [
        ("Accepted", "Unknown", "Pending"), ("Programmed", "Unknown", "Pending")]


@pytest.mark.parametrize("spec, message", [
    ({"rules": [{"matches": [{"path": {"type": "Exact", "value": "no-slash"}}]}]},
     "value must be an absolute path and start with '/'"),
    ({"rules": [{"backendRefs": [{"name": "svc"}]}]}, "Must have port for Service reference"),
    ({"rules": [{"filters": [{"type": "RequestHeaderModifier"}]}]},
     "filter.requestHeaderModifier must be specified for RequestHeaderModifier filter.type"),
    ({"rules": [{"filters": [{"type": "RequestRedirect", "requestRedirect": {}},
                             {"type": "URLRewrite", "urlRewrite": {}}]}]},
     "May specify either httpRouteFilterRequestRedirect or httpRouteFilterRequestRewrite, but not both"),
    ({"rules": [{"backendRefs": [{"name": "s", "port": 80}],
                 "filters": [{"type": "RequestRedirect", "requestRedirect": {"port": 8080}}]}]},
     "RequestRedirect filter must not be used together with backendRefs"),
    ({"rules": [{"matches": [{"path": {"type": "Exact", "value": "/a"}}],
                 "filters": [{"type": "URLRewrite", "urlRewrite": {
                     "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/b"}}}]}]},
     "When using URLRewrite filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified"),
    ({"rules": [{"timeouts": {"request": "1s", "backendRequest": "2s"}}]},
     "backendRequest timeout cannot be longer than request timeout"),
    ({"parentRefs": [{"name": "g"}, {"name": "g", "sectionName": "http"}]},
     "sectionName must be specified when parentRefs includes 2 or more references to the same parent"),
    ({"rules": [{"filters": [{"type": "RequestRedirect", "requestRedirect": {"statusCode": 305}}]}]},
     "Unsupported value: 305"),
])
def test_httproute_validation_rejects_with_the_crd_message(fake_api, spec, message):
    status, body, _ = raw(fake_api, "POST", f"{GW}/namespaces/default/httproutes", _route(**spec))
    assert status == 422, body
    assert message in body["message"]


@pytest.mark.parametrize("listeners, message", [
    ([{"name": "a", "port": 80, "protocol": "HTTP"}, {"name": "a", "port": 81, "protocol": "HTTP"}],
     "Listener name must be unique within the Gateway"),
    ([{"name": "a", "port": 80, "protocol": "HTTP"}, {"name": "b", "port": 80, "protocol": "HTTP"}],
     "Combination of port, protocol and hostname must be unique for each listener"),
    ([{"name": "a", "port": 80, "protocol": "HTTP", "tls": {"certificateRefs": [{"name": "c"}]}}],
     "tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']"),
    ([{"name": "a", "port": 443, "protocol": "HTTPS", "tls": {"mode": "Terminate"}}],
     "certificateRefs or options must be specified when mode is Terminate"),
    ([{"name": "a", "port": 0, "protocol": "HTTP"}], "should be between 1 and 65535"),
])
def test_gateway_validation(fake_api, listeners, message):
    status, body, _ = raw(fake_api, "POST", f"{GW}/namespaces/default/gateways", _gateway(listeners=listeners))
    assert status == 422, body
    assert message in body["message"]


def test_gatewayclass_controller_name_is_immutable(fake_api):
    gc = fake_api.create({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                          "metadata": {"name": "c"}, "spec": {"controllerName": "platform.io/gateway-controller"}})
    gc["spec"]["controllerName"] = "other.io/controller"
    status, body, _ = raw(fake_api, "PUT", f"{GW}/gatewayclasses/c", gc)
    assert status == 422 and "Value is immutable" in body["message"]


def test_grpcroute_method_match_needs_service_or_method(fake_api):
    route = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GRPCRoute",
             "metadata": {"name": "g", "namespace": "default"},
             "spec": {"rules": [{"matches": [{"method": {"type": "Exact"}}]}]}}
    status, body, _ = raw(fake_api, "POST", f"{GW}/namespaces/default/grpcroutes", route)
    assert status == 422 and "One or both of 'service' or 'method' must be specified" in body["message"]
    route["spec"]["rules"][0]["matches"][0]["method"] = {"service": "echo.Echo"}
    status, body, _ = raw(fake_api, "POST", f"{GW}/namespaces/default/grpcroutes", route)
    assert status == 201 and body["spec"]["rules"][0]["matches"][0]["method"]["type"] == "Exact"


def test_referencegrant_is_served_as_v1beta1(fake_api):
    grant = {"apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
             "metadata": {"name": "allow", "namespace": "default"},
             "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "web"}],
                      "to": [{"group": "", "kind": "Service"}]}}
    status, body, _ = raw(fake_api, "POST", "/apis/gateway.networking.k8s.io/v1beta1/namespaces/default/referencegrants",
                          grant)
    assert status == 201, body
    grant["spec"]["to"] = []
    grant["metadata"]["name"] = "empty"
    status, body, _ = raw(fake_api, "POST", "/apis/gateway.networking.k8s.io/v1beta1/namespaces/default/referencegrants",
                          grant)
    assert status == 422


def test_status_subresource_keeps_spec_and_spec_change_bumps_generation(fake_api, api_client):
    fake_api.create(_route(parentRefs=[{"name": "g"}]))
    custom = client.CustomObjectsApi(api_client)
    patched = custom.patch_namespaced_custom_object_status(
        "gateway.networking.k8s.io", "v1", "default", "httproutes", "r",
        {"status": {"parents": [{"parentRef": {"name": "g"}, "controllerName": "platform.io/gateway-controller",
                                 "conditions": []}]}})
    assert patched["metadata"]["generation"] == 1
    assert patched["status"]["parents"][0]["parentRef"] == {"name": "g"}
    route = custom.get_namespaced_custom_object("gateway.networking.k8s.io", "v1", "default", "httproutes", "r")
    route["spec"]["hostnames"] = ["a.example"]
    route["status"] = {}
    updated = custom.replace_namespaced_custom_object("gateway.networking.k8s.io", "v1", "default",
                                                       "httproutes", "r", route)
    assert updated["metadata"]["generation"] == 2
    assert updated["status"]["parents"][0]["controllerName"] == "platform.io/gateway-controller"


def test_crds_not_installed_means_no_group_and_404():
    with FakeApiServer(gateway_api=False) as srv:
        srv.start()
        status, groups, _ = raw(srv, "GET", "/apis")
        assert "gateway.networking.k8s.io" not in [g["name"] for g in groups["groups"]]
        assert raw(srv, "GET", f"{GW}/httproutes")[0] == 404
        assert raw(srv, "GET", "/apis/gateway.networking.k8s.io")[0] == 404
        srv.set_crds_installed("gateway-api", True)
        assert raw(srv, "GET", f"{GW}/httproutes")[0] == 200
        with pytest.raises(ValueError, match="CRDs are not installed"):
            srv.set_crds_installed("gateway-api", False)
            srv.create(_route())


def test_update_is_defaulted_before_generation_counts(fake_api):
    created = fake_api.create(_route(parentRefs=[{"name": "g"}], rules=[{"backendRefs": [{"name": "s", "port": 80}]}]))
    again = _route(parentRefs=[{"name": "g"}], rules=[{"backendRefs": [{"name": "s", "port": 80}]}])
    again["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    status, body, _ = raw(fake_api, "PUT", f"{GW}/namespaces/default/httproutes/r", again)
    assert status == 200, body
    assert body["metadata"]["generation"] == 1
    assert body["spec"]["rules"][0]["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]


def test_kubectl_applies_gateway_api_manifests(fake_api, tmp_path):
    import subprocess
    from pathlib import Path
    kubectl = Path(__file__).resolve().parents[2] / ".cache" / "tools" / "kubectl"
    if not kubectl.exists():
        pytest.skip("kubectl not installed in .cache/tools")
    manifest = tmp_path / "route.yaml"
    manifest.write_text("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n"
                        "metadata: {name: web, namespace: default}\n"
                        "spec: {parentRefs: [{name: gw}], rules: [{backendRefs: [{name: web, port: 80}]}]}\n")
    for args in (["apply", "-f", str(manifest)], ["apply", "--server-side", "-f", str(manifest)]):
        done = subprocess.run([str(kubectl), "--kubeconfig", str(fake_api.kubeconfig), *args],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    route = fake_api.get("HTTPRoute", "default", "web")
    assert route["metadata"]["generation"] == 1
    assert route["spec"]["rules"][0]["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
