"""Gateway API header modifiers and RequestMirror lowered onto the header
program and mirror (gateway_filters.py), on plain data: semantics, the
mirror's Backend, and hostile values left out with the reason."""

from dataclasses import replace

import pytest

from platformd.ingress import headers as h
from platformd.ingress.mirror import Mirror
from tests.ingress.gateway_objects import backend, gateway, grpc_route, http_route, rule, service
from tests.ingress.test_gateway_lowering import _lower


def _modifier(kind, **spec):
    field = "requestHeaderModifier" if kind == "RequestHeaderModifier" else "responseHeaderModifier"
    return {"type": kind, field: spec}


def _pairs(*items):
    return [{"name": n, "value": v} for n, v in items]


def _location(out):
    [server] = out.servers
    [loc] = server.locations
    return loc


def test_modifiers_become_one_program_set_add_remove():
    filters = [
        _modifier("RequestHeaderModifier", set=_pairs(("X-Set", "s")), add=_pairs(("X-Add", "a")), remove=["X-Rm"]),
        _modifier("ResponseHeaderModifier", set=_pairs(("X-Frame-Options", "DENY")), remove=["Server"]),
    ]
    out = _lower(gateway(), http_route(hostnames=["web.example"], rules=[rule(filters=filters)]), service())
    assert _location(out).headers == (
        h.HeaderOp("request", "set", "X-Set", ("s",)), h.HeaderOp("request", "add", "X-Add", ("a",)),
        h.HeaderOp("request", "remove", "X-Rm"),
        h.HeaderOp("response", "set", "X-Frame-Options", ("DENY",)), h.HeaderOp("response", "remove", "Server"),
    )


def test_values_are_literal():
    filters = [_modifier("RequestHeaderModifier", set=_pairs(("X-A", "$host ${remote_addr}; {x}")))]
    out = _lower(gateway(), http_route(hostnames=["web.example"], rules=[rule(filters=filters)]), service())
    assert _location(out).headers == (h.HeaderOp("request", "set", "X-A", ("$host ${remote_addr}; {x}",)),)


def test_grpc_routes_get_modifiers_too():
    filters = [_modifier("ResponseHeaderModifier", add=_pairs(("X-Lane", "grpc")))]
    out = _lower(gateway(), grpc_route(hostnames=["g.example"], rules=[{"backendRefs": [backend()],
                                                                       "filters": filters}]), service())
    assert _location(out).headers == (h.HeaderOp("response", "add", "X-Lane", ("grpc",)),)


@pytest.mark.parametrize("spec", [
    {"set": _pairs(("X-A", "a\r\nSet-Cookie: pwned=1"))},
    {"add": _pairs(("X-A", "a\nb"))},
    {"set": _pairs(("X-A", "a\x00b"))},
    {"set": _pairs(("X A", "b"))},
    {"set": _pairs(("X-A{", "b"))},
    {"set": _pairs(("Content-Length", "0"))},
    {"add": _pairs(("Transfer-Encoding", "chunked"))},
    {"set": _pairs(("Host", "evil.example"))},
    {"set": _pairs(("X-A", "x" * 5000))},
])
def test_hostile_modifier_values_leave_the_host_out(spec):
    filters = [_modifier("RequestHeaderModifier", **spec)]
    out = _lower(gateway(), http_route(hostnames=["web.example"], rules=[rule(filters=filters)]), service())
    assert out.servers == ()
    [skipped] = out.skipped
    assert skipped.hostname == "web.example" and "pwned" not in repr(out.servers)


@pytest.mark.parametrize("spec, share", [
    ({}, (100, 100)),
    ({"percent": 0}, (0, 100)),
    ({"percent": 25}, (25, 100)),
    ({"fraction": {"numerator": 1, "denominator": 3}}, (1, 3)),
])
def test_request_mirror_goes_to_the_route_backend_of_the_service(spec, share):
    mirror = {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "svc", "port": 80}, **spec}}
    out = _lower(gateway(), http_route(hostnames=["web.example"],
                                       rules=[rule(backend("svc2"), filters=[mirror])]), service(), service("svc2"))
    loc = _location(out)
    assert loc.mirror == Mirror(backend="default.svc.80.route", numerator=share[0], denominator=share[1])
    assert loc.backend == "default.svc2.80.route"
    assert ("mirror", "/_platform_mirror") in loc.lane_directives
    names = {b.name: b for b in out.backends}
    assert [e.address for e in names["default.svc.80.route"].endpoints] == ["10.1.0.5"]


def test_a_grpc_route_mirror_is_a_grpc_copy():
    mirror = {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "svc", "port": 80}, "percent": 50}}
    out = _lower(gateway(), grpc_route(hostnames=["g.example"], rules=[{"backendRefs": [backend()],
                                                                       "filters": [mirror]}]), service())
    loc = _location(out)
    assert loc.mirror == Mirror(backend="default.svc.80.route", numerator=50)
    assert loc.lane_directives == (("mirror", "/_platform_mirror_grpc"), ("mirror_request_body", "on"))


def test_several_request_mirrors_each_get_their_copy_and_share():
    filters = [{"type": "RequestMirror", "requestMirror": {"backendRef": {"name": n, "port": 80}, **share}}
               for n, share in (("svc", {}), ("svc2", {"percent": 30}), ("svc3", {"fraction": {"numerator": 1,
                                                                                             "denominator": 7}}))]
    out = _lower(gateway(), http_route(hostnames=["web.example"], rules=[rule(filters=filters)]),
                 service(), service("svc2"), service("svc3"))
    loc = _location(out)
    assert tuple(replace(m, also=()) for m in loc.mirror.copies) == (Mirror(backend="default.svc.80.route"),
                                 Mirror(backend="default.svc2.80.route", numerator=30),
                                 Mirror(backend="default.svc3.80.route", numerator=1, denominator=7))
    # One `mirror` per copy: a lane per (kind, number of copies).
    assert loc.lane_directives == (("mirror", "/_platform_mirror"), ("mirror", "/_platform_mirror/2"),
                                   ("mirror", "/_platform_mirror/3"), ("mirror_request_body", "on"))
    assert {"default.svc2.80.route", "default.svc3.80.route"} <= {b.name for b in out.backends}
