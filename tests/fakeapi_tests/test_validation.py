"""422 Invalid for the objects this project reads or writes."""

import copy

import pytest

from tests.fakeapi import ApiError

from .helpers import raw


def _ingress(**spec):
    base = {"rules": [{"host": "example.com", "http": {"paths": [
        {"path": "/", "pathType": "Prefix",
         "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}
    base.update(spec)
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "ing", "namespace": "default"}, "spec": base}


def _path(**overrides):
    path = {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}
    path.update(overrides)
    return _ingress(rules=[{"host": "example.com", "http": {"paths": [path]}}])


def _slice(address_type="IPv4", addresses=("10.0.0.1",), **extra):
    obj = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": "eps", "namespace": "default"},
           "addressType": address_type,
           "endpoints": [{"addresses": list(addresses)}],
           "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}
    if address_type is None:
        del obj["addressType"]
    obj.update(extra)
    return obj


def _service(**spec):
    base = {"ports": [{"port": 80}]}
    base.update(spec)
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "namespace": "default"},
            "spec": base}


def _lease(**spec):
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l", "namespace": "default"}, "spec": spec}


INVALID = [
    # names
    ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name", "namespace": "default"}},
     "metadata.name", "FieldValueInvalid"),
    ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default"}},
     "metadata.name", "FieldValueRequired"),
    ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}}, "metadata.name",
     "FieldValueInvalid"),
    ({"apiVersion": "v1", "kind": "ConfigMap",
      "metadata": {"name": "cm", "namespace": "default", "labels": {"bad key!": "v"}}},
     "metadata.labels", "FieldValueInvalid"),
    # ingress
    (_path(path="relative"), "spec.rules[0].http.paths[0].path", "FieldValueInvalid"),
    (_path(pathType=None), "spec.rules[0].http.paths[0].pathType", "FieldValueRequired"),
    (_path(pathType="Regex"), "spec.rules[0].http.paths[0].pathType", "FieldValueNotSupported"),
    (_path(backend={"service": {"name": "web", "port": {"number": 80}},
                    "resource": {"kind": "Bucket", "name": "b"}}),
     "spec.rules[0].http.paths[0].backend", "FieldValueInvalid"),
    (_path(backend={}), "spec.rules[0].http.paths[0].backend", "FieldValueInvalid"),
    (_path(backend={"service": {"name": "web", "port": {"name": "http", "number": 80}}}),
     "spec.rules[0].http.paths[0].backend", "FieldValueInvalid"),
    (_path(path="/a/./b"), "spec.rules[0].http.paths[0].path", "FieldValueInvalid"),
    (_path(path="/a%2fb"), "spec.rules[0].http.paths[0].path", "FieldValueInvalid"),
    (_path(path="/a/.."), "spec.rules[0].http.paths[0].path", "FieldValueInvalid"),
    (_path(backend={"resource": {"kind": "Bucket"}}),
     "spec.rules[0].http.paths[0].backend.resource.name", "FieldValueRequired"),
    (_path(backend={"service": {"name": "web", "port": {"number": 70000}}}),
     "spec.rules[0].http.paths[0].backend.service.port.number", "FieldValueInvalid"),
    (_path(backend={"service": {"name": "web", "port": {}}}),
     "spec.rules[0].http.paths[0].backend", "FieldValueRequired"),
    (_ingress(rules=[{"host": "10.0.0.1"}]), "spec.rules[0].host", "FieldValueInvalid"),
    (_ingress(rules=[{"host": "*.*.example.com"}]), "spec.rules[0].host", "FieldValueInvalid"),
    (_ingress(tls=[{"hosts": ["Bad Host"], "secretName": "tls"}]), "spec.tls[0].hosts[0]",
     "FieldValueInvalid"),
    (_ingress(rules=[]), "spec.rules", "FieldValueInvalid"),
    # endpointslice
    (_slice(address_type=None), "addressType", "FieldValueRequired"),
    (_slice(address_type="IPv5"), "addressType", "FieldValueNotSupported"),
    (_slice(addresses=["127.0.0.1"]), "endpoints[0].addresses[0]", "FieldValueInvalid"),
    (_slice(addresses=["169.254.1.1"]), "endpoints[0].addresses[0]", "FieldValueInvalid"),
    (_slice(addresses=["0.0.0.0"]), "endpoints[0].addresses[0]", "FieldValueInvalid"),
    (_slice(addresses=["fd00::1"]), "endpoints[0].addresses[0]", "FieldValueInvalid"),
    (_slice(address_type="IPv6", addresses=["::1"]), "endpoints[0].addresses[0]", "FieldValueInvalid"),
    (_slice(address_type="IPv6", addresses=["fe80::1"]), "endpoints[0].addresses[0]", "FieldValueInvalid"),
    (_slice(addresses=["not-an-ip"]), "endpoints[0].addresses[0]", "FieldValueInvalid"),
    (_slice(endpoints=[{"addresses": []}]), "endpoints[0].addresses", "FieldValueRequired"),
    (_slice(endpoints=[{"addresses": ["10.0.0.1"]}] * 1001), "endpoints", "FieldValueTooMany"),
    (_slice(address_type="FQDN", addresses=["localhost"]), "endpoints[0].addresses[0]", "FieldValueInvalid"),
    (_slice(ports=[{"name": "http", "port": 80}, {"name": "http", "port": 81}]), "ports[1].name",
     "FieldValueDuplicate"),
    (_slice(ports=[{"name": "http", "port": 80, "protocol": "HTTP"}]), "ports[0].protocol",
     "FieldValueNotSupported"),
    # service
    (_service(ports=[]), "spec.ports", "FieldValueRequired"),
    (_service(ports=[{"port": 0}]), "spec.ports[0].port", "FieldValueInvalid"),
    (_service(ports=[{"port": 80, "protocol": "HTTP"}]), "spec.ports[0].protocol", "FieldValueNotSupported"),
    (_service(ports=[{"port": 80}, {"port": 81}]), "spec.ports[0].name", "FieldValueRequired"),
    (_service(clusterIP="300.1.1.1"), "spec.clusterIPs[0]", "FieldValueInvalid"),
    (_service(type="Magic"), "spec.type", "FieldValueNotSupported"),
    (_service(type="ExternalName", ports=[]), "spec.externalName", "FieldValueRequired"),
    ({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1svc", "namespace": "default"},
      "spec": {"ports": [{"port": 80}]}}, "metadata.name", "FieldValueInvalid"),
    # lease
    (_lease(leaseDurationSeconds=0), "spec.leaseDurationSeconds", "FieldValueInvalid"),
    (_lease(leaseTransitions=-1), "spec.leaseTransitions", "FieldValueInvalid"),
]


def _post_path(obj):
    group_version = obj["apiVersion"]
    prefix = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
    plural = {"ConfigMap": "configmaps", "Namespace": "namespaces", "Ingress": "ingresses",
              "EndpointSlice": "endpointslices", "Service": "services", "Lease": "leases"}[obj["kind"]]
    ns = obj["metadata"].get("namespace")
    return f"{prefix}/namespaces/{ns}/{plural}" if ns else f"{prefix}/{plural}"


@pytest.mark.parametrize("obj,field,reason", INVALID,
                         ids=[f"{o['kind']}-{f}-{i}" for i, (o, f, _) in enumerate(INVALID)])
def test_invalid_objects_are_rejected(fake_api, obj, field, reason):
    obj = copy.deepcopy(obj)
    for path in ((obj.get("spec") or {}).get("rules") or []):
        for p in (path.get("http") or {}).get("paths") or []:
            if p.get("pathType") is None:
                p.pop("pathType", None)
    status, body, _ = raw(fake_api, "POST", _post_path(obj), obj)
    assert status == 422, body
    assert body["kind"] == "Status" and body["reason"] == "Invalid" and body["code"] == 422
    causes = body["details"]["causes"]
    assert (field, reason) in [(c["field"], c["reason"]) for c in causes], causes
    assert body["details"]["kind"] == obj["kind"]
    assert " is invalid: " in body["message"]


VALID = [
    _ingress(),
    _ingress(rules=[{"host": "*.example.com", "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"name": "http"}}}}]}}]),
    _ingress(rules=[], defaultBackend={"service": {"name": "web", "port": {"number": 80}}}),
    _path(pathType="ImplementationSpecific", path=""),
    _path(backend={"resource": {"apiGroup": "example.com", "kind": "Bucket", "name": "b"}}),
    _slice(),
    _slice(address_type="IPv6", addresses=["2001:db8::1"]),
    _slice(address_type="FQDN", addresses=["db.example.com"]),
    _service(),
    _service(clusterIP="None", ports=[]),
    _service(type="ExternalName", externalName="db.example.com", ports=[]),
    _lease(holderIdentity="me", leaseDurationSeconds=15, renewTime="2026-01-01T00:00:00.123456Z"),
]


@pytest.mark.parametrize("obj", VALID, ids=[f"{o['kind']}-{i}" for i, o in enumerate(VALID)])
def test_valid_objects_are_accepted(fake_api, obj):
    status, body, _ = raw(fake_api, "POST", _post_path(obj), obj)
    assert status == 201, body


def test_message_shape_for_one_error(fake_api):
    status, body, _ = raw(fake_api, "POST", _post_path(_path(path="relative")), _path(path="relative"))
    assert body["message"] == ('Ingress.networking.k8s.io "ing" is invalid: '
                               'spec.rules[0].http.paths[0].path: Invalid value: "relative": '
                               'must be an absolute path')
    assert body["details"] == {
        "name": "ing", "group": "networking.k8s.io", "kind": "Ingress",
        "causes": [{"reason": "FieldValueInvalid", "message": 'Invalid value: "relative": must be an absolute path',
                    "field": "spec.rules[0].http.paths[0].path"}]}


def test_message_lists_several_errors(fake_api):
    obj = _slice(addresses=["127.0.0.1", "169.254.0.1"])
    status, body, _ = raw(fake_api, "POST", _post_path(obj), obj)
    assert body["message"].startswith('EndpointSlice.discovery.k8s.io "eps" is invalid: [endpoints[0]')
    assert len(body["details"]["causes"]) == 2


def test_updates_are_validated_too(fake_api):
    fake_api.create(_ingress())
    obj = fake_api.get("ingresses", "default", "ing")
    obj["spec"]["rules"][0]["http"]["paths"][0]["path"] = "nope"
    with pytest.raises(ApiError) as e:
        fake_api.update(obj)
    assert e.value.code == 422
    eps = fake_api.create(_slice())
    eps["addressType"] = "IPv6"
    eps["endpoints"] = [{"addresses": ["2001:db8::1"]}]
    with pytest.raises(ApiError) as e:
        fake_api.update(eps)
    assert "field is immutable" in e.value.message


def test_times_are_normalised_like_go_decoding(fake_api):
    lease = _lease(holderIdentity="me", renewTime="2026-01-01T01:00:00.5+01:00",
                   acquireTime="2026-01-01T00:00:00Z")
    status, body, _ = raw(fake_api, "POST", _post_path(lease), lease)
    assert status == 201
    assert body["spec"]["renewTime"] == "2026-01-01T00:00:00.500000Z"
    assert body["spec"]["acquireTime"] == "2026-01-01T00:00:00.000000Z"
    bad = _lease(renewTime="yesterday")
    bad["metadata"]["name"] = "bad"
    status, body, _ = raw(fake_api, "POST", _post_path(bad), bad)
    assert status == 400 and body["reason"] == "BadRequest"


@pytest.mark.parametrize("entry,field", [
    ({"ip": "not-an-ip"}, "status.loadBalancer.ingress[0].ip"),
    ({"hostname": "192.0.2.1"}, "status.loadBalancer.ingress[0].hostname"),
    ({"hostname": "Bad_Host"}, "status.loadBalancer.ingress[0].hostname"),
    ({"ip": "192.0.2.1", "ports": [{"port": 0, "protocol": "TCP"}]},
     "status.loadBalancer.ingress[0].ports[0].port"),
])
def test_load_balancer_status_is_validated(fake_api, entry, field):
    fake_api.create(_ingress())
    path = "/apis/networking.k8s.io/v1/namespaces/default/ingresses/ing/status"
    status, body, _ = raw(fake_api, "PATCH", path, {"status": {"loadBalancer": {"ingress": [entry]}}},
                          content_type="application/merge-patch+json")
    assert status == 422 and body["details"]["causes"][0]["field"] == field
    status, body, _ = raw(fake_api, "PATCH", path,
                          {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}},
                          content_type="application/merge-patch+json")
    assert status == 200


def test_wrong_json_types_fail_decoding_like_go(fake_api):
    obj = _lease(leaseDurationSeconds="15")
    status, body, _ = raw(fake_api, "POST", _post_path(obj), obj)
    assert status == 400 and body["reason"] == "BadRequest"
    assert body["message"] == ('Lease in version "v1" cannot be handled as a Lease: json: cannot '
                               'unmarshal string into Go struct field LeaseSpec.spec.leaseDurationSeconds '
                               'of type int32')


def test_unknown_fields_are_dropped_warned_or_refused(fake_api):
    obj = _ingress()
    obj["spec"]["ingressClass"] = "typo"
    obj["spec"]["rules"][0]["http"]["paths"][0]["extra"] = 1
    status, body, headers = raw(fake_api, "POST", _post_path(obj), obj)
    assert status == 201 and "ingressClass" not in body["spec"]
    assert "extra" not in body["spec"]["rules"][0]["http"]["paths"][0]
    assert 'unknown field \\"spec.ingressClass\\"' in headers["Warning"]
    obj["metadata"]["name"] = "strict"
    status, body, _ = raw(fake_api, "POST", _post_path(obj), obj, query={"fieldValidation": "Strict"})
    assert status == 400
    assert body["message"] == ('Ingress in version "v1" cannot be handled as a Ingress: strict decoding '
                               'error: unknown field "spec.rules[0].http.paths[0].extra", unknown field '
                               '"spec.ingressClass"')   # in document order
    seeded = fake_api.create({**_ingress(), "metadata": {"name": "seeded", "namespace": "default"},
                              "bogus": True})
    assert "bogus" not in seeded
