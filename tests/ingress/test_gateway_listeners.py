"""GatewayClass and Gateway translation on plain data: one test per rule of
the spec (classes, listeners, ports, TLS, conflicts, addresses)."""

import pytest

from platformd.ingress.gateway_input import GatewayOptions
from platformd.ingress.gateway_model import Bind
from tests.helpers.certs import self_signed
from tests.ingress.gateway_objects import (
    conditions, gateway, gateway_class, grant, http_route, https_listener, listener, listener_status, service,
    tls_secret, translate,
)


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed("example.com", tmp_path_factory.mktemp("certs"))


# --- GatewayClass -----------------------------------------------------------------------------

def test_class_with_our_controller_name_is_accepted_with_supported_version():
    t = translate(gateway_class(), gateway())
    assert conditions(t.classes["platform"].conditions) == {
        "Accepted": (True, "Accepted"), "SupportedVersion": (True, "SupportedVersion")}
    assert t.classes["platform"].generation == 1


def test_class_of_another_controller_and_its_gateways_get_no_status():
    t = translate(gateway_class("other", controller="example.com/other"), gateway(cls="other"), http_route())
    assert dict(t.classes) == {} and dict(t.gateways) == {} and dict(t.http_routes) == {}
    assert t.table.hosts == ()


def test_controller_name_is_an_option():
    t = translate(gateway_class(controller="acme.io/gw"), gateway(),
                  options=GatewayOptions(controller_name="acme.io/gw"))
    assert conditions(t.classes["platform"].conditions)["Accepted"] == (True, "Accepted")


def test_class_with_parameters_ref_is_not_accepted_and_its_gateways_are_not_served():
    cls = gateway_class(parametersRef={"group": "", "kind": "ConfigMap", "name": "x"})
    t = translate(cls, gateway(), http_route())
    assert conditions(t.classes["platform"].conditions)["Accepted"] == (False, "InvalidParameters")
    assert conditions(t.gateways["default/gw"].conditions)["Accepted"][0] is False
    assert t.table.hosts == () and dict(t.http_routes) == {}


def test_unsupported_crd_version_is_reported():
    t = translate(gateway_class(), crd_version="v1.2.0")
    assert conditions(t.classes["platform"].conditions) == {
        "Accepted": (False, "UnsupportedVersion"), "SupportedVersion": (False, "UnsupportedVersion")}
    assert conditions(translate(gateway_class(), crd_version="v1.6.0").classes["platform"].conditions)[
        "SupportedVersion"] == (True, "SupportedVersion")


# --- Gateway and listeners --------------------------------------------------------------------

def test_http_listener_is_accepted_programmed_with_supported_kinds():
    t = translate(gateway(generation=3))
    status = t.gateways["default/gw"]
    assert status.generation == 3
    assert conditions(status.conditions) == {"Accepted": (True, "Accepted"), "Programmed": (True, "Programmed")}
    lst = listener_status(t)
    assert conditions(lst.conditions) == {"Accepted": (True, "Accepted"), "Programmed": (True, "Programmed"),
                                          "ResolvedRefs": (True, "ResolvedRefs"),
                                          "Conflicted": (False, "NoConflicts")}
    assert lst.supported_kinds == (("gateway.networking.k8s.io", "HTTPRoute"),
                                   ("gateway.networking.k8s.io", "GRPCRoute"))
    assert lst.attached_routes == 0


def test_unsupported_protocol_listener():
    t = translate(gateway(listeners=[listener("tcp", 5000, "TCP"), listener()]))
    tcp = listener_status(t, name="tcp")
    assert conditions(tcp.conditions)["Accepted"] == (False, "UnsupportedProtocol")
    assert conditions(tcp.conditions)["Programmed"] == (False, "Invalid")
    # One good listener keeps the Gateway accepted, with the reason naming the bad one.
    assert conditions(t.gateways["default/gw"].conditions) == {
        "Accepted": (True, "ListenersNotValid"), "Programmed": (True, "Programmed")}


def test_ports_80_and_443_map_to_the_data_plane_ports(cert):
    options = GatewayOptions(http_port=8080, https_port=8443)
    t = translate(gateway(listeners=[listener(), https_listener()]), http_route(), tls_secret("cert", *cert),
                  options=options)
    binds = {h.bind for h in t.table.hosts}
    assert binds == {Bind(None, 8080, "HTTP", 80), Bind(None, 8443, "HTTPS", 443)}


def test_other_ports_need_a_mapping_else_port_unavailable():
    t = translate(gateway(listeners=[listener("alt", 8000)]), http_route())
    assert conditions(listener_status(t, name="alt").conditions)["Accepted"] == (False, "PortUnavailable")
    assert conditions(t.gateways["default/gw"].conditions)["Accepted"] == (False, "ListenersNotValid")
    mapped = translate(gateway(listeners=[listener("alt", 8000)]), http_route(),
                       options=GatewayOptions(listener_ports={8000: 18000}))
    assert conditions(listener_status(mapped, name="alt").conditions)["Accepted"] == (True, "Accepted")
    assert [h.bind for h in mapped.table.hosts] == [Bind(None, 18000, "HTTP", 8000)]


def test_port_80_with_https_is_port_unavailable(cert):
    t = translate(gateway(listeners=[listener("x", 80, "HTTPS", tls={"certificateRefs": [{"name": "cert"}]})]),
                  tls_secret("cert", *cert))
    assert conditions(listener_status(t, name="x").conditions)["Accepted"] == (False, "PortUnavailable")


def test_https_listener_with_valid_certificate_is_served(cert):
    t = translate(gateway(listeners=[https_listener(hostname="example.com")]), tls_secret("cert", *cert))
    assert conditions(listener_status(t, name="https").conditions)["ResolvedRefs"] == (True, "ResolvedRefs")
    [binding] = t.table.certificates
    assert (binding.bind.port, binding.hostname, binding.secrets) == (443, "example.com", ("default/cert",))


def test_https_listener_with_missing_or_bad_secret_is_invalid_certificate_ref(cert):
    missing = translate(gateway(listeners=[https_listener()]))
    lst = conditions(listener_status(missing, name="https").conditions)
    assert lst["ResolvedRefs"] == (False, "InvalidCertificateRef")
    assert lst["Programmed"] == (False, "Invalid")
    assert missing.table.certificates == ()
    opaque = tls_secret("cert", *cert)
    opaque["type"] = "Opaque"
    assert conditions(listener_status(translate(gateway(listeners=[https_listener()]), opaque),
                                      name="https").conditions)["ResolvedRefs"] == (False, "InvalidCertificateRef")


def test_certificate_ref_of_another_kind_is_invalid_certificate_ref(cert):
    gw = gateway(listeners=[https_listener(kind="ConfigMap")])
    assert conditions(listener_status(translate(gw, tls_secret("cert", *cert)), name="https").conditions)[
        "ResolvedRefs"] == (False, "InvalidCertificateRef")


def test_cross_namespace_certificate_needs_a_reference_grant(cert):
    secret = tls_secret("cert", *cert, namespace="certs")
    gw = gateway(listeners=[https_listener(namespace="certs")])
    denied = translate(gw, secret)
    assert conditions(listener_status(denied, name="https").conditions)["ResolvedRefs"] == (False, "RefNotPermitted")
    allowed = translate(gw, secret, grant("certs", "default", from_kind="Gateway", to_kind="Secret"))
    assert conditions(listener_status(allowed, name="https").conditions)["ResolvedRefs"] == (True, "ResolvedRefs")
    assert allowed.table.certificates[0].secrets == ("certs/cert",)


def test_grant_for_another_secret_name_does_not_permit(cert):
    gw = gateway(listeners=[https_listener(namespace="certs")])
    t = translate(gw, tls_secret("cert", *cert, namespace="certs"),
                  grant("certs", "default", from_kind="Gateway", to_kind="Secret", to_name="other"))
    assert conditions(listener_status(t, name="https").conditions)["ResolvedRefs"] == (False, "RefNotPermitted")


def test_unsupported_route_kinds_are_invalid_route_kinds():
    lst = listener(allowedRoutes={"kinds": [{"kind": "HTTPRoute"}, {"kind": "TCPRoute"}]})
    status = listener_status(translate(gateway(listeners=[lst])))
    assert conditions(status.conditions)["ResolvedRefs"] == (False, "InvalidRouteKinds")
    assert status.supported_kinds == (("gateway.networking.k8s.io", "HTTPRoute"),)


def test_an_https_listener_on_a_plain_mapped_port_is_unavailable(cert):
    options = GatewayOptions(listener_ports={8000: 18000})
    gw = gateway(listeners=[listener("a", 8000), listener("b", 8000, "HTTPS", tls={"certificateRefs": [{"name": "cert"}]})])
    t = translate(gw, tls_secret("cert", *cert), options=options)
    assert conditions(listener_status(t, name="a").conditions)["Conflicted"] == (False, "NoConflicts")
    b = conditions(listener_status(t, name="b").conditions)
    # A mapped port is served as plain HTTP (nginx.conf listens without TLS there).
    assert b["Accepted"] == (False, "PortUnavailable") and b["Programmed"] == (False, "Invalid")


def test_attached_routes_count_per_listener():
    gw = gateway(listeners=[listener("a", hostname="a.example"), listener("b", hostname="b.example")])
    t = translate(gw, http_route("r1"), http_route("r2", hostnames=["a.example"]),
                  http_route("r3", parents=[{"name": "gw", "sectionName": "b"}]))
    assert listener_status(t, name="a").attached_routes == 2
    assert listener_status(t, name="b").attached_routes == 2


# --- addresses ----------------------------------------------------------------------------------

def test_without_pool_gateways_report_publish_addresses_and_colliding_listeners_conflict():
    options = GatewayOptions(publish_addresses=("192.0.2.1", "lb.example.com"))
    old = gateway("old", created="2026-01-01T00:00:00Z")
    new = gateway("new", created="2026-02-01T00:00:00Z")
    t = translate(new, old, options=options)
    assert t.gateways["default/old"].addresses == (("IPAddress", "192.0.2.1"), ("Hostname", "lb.example.com"))
    assert conditions(listener_status(t, "default/old").conditions)["Conflicted"] == (False, "NoConflicts")
    newer = conditions(listener_status(t, "default/new").conditions)
    assert newer["Conflicted"] == (True, "HostnameConflict")
    assert newer["Programmed"] == (False, "Invalid")


def test_without_pool_listeners_with_different_hostnames_do_not_conflict():
    a = gateway("a", listeners=[listener(hostname="a.example")])
    b = gateway("b", listeners=[listener(hostname="b.example")])
    t = translate(a, b)
    for key in ("default/a", "default/b"):
        assert conditions(listener_status(t, key).conditions)["Conflicted"] == (False, "NoConflicts")


def test_pool_gives_each_gateway_its_own_address_oldest_first():
    options = GatewayOptions(address_pool=("10.0.0.1", "10.0.0.2"))
    old = gateway("old", created="2026-01-01T00:00:00Z")
    new = gateway("new", created="2026-02-01T00:00:00Z")
    third = gateway("third", created="2026-03-01T00:00:00Z")
    t = translate(third, new, old, http_route(parents=[{"name": "old"}, {"name": "new"}]), options=options)
    assert t.gateways["default/old"].addresses == (("IPAddress", "10.0.0.1"),)
    assert t.gateways["default/new"].addresses == (("IPAddress", "10.0.0.2"),)
    assert conditions(listener_status(t, "default/new").conditions)["Conflicted"] == (False, "NoConflicts")
    assert conditions(t.gateways["default/third"].conditions)["Programmed"] == (False, "AddressNotAssigned")
    assert {h.bind.address for h in t.table.hosts} == {"10.0.0.1", "10.0.0.2"}


def test_pool_honours_requested_address_and_refuses_others():
    options = GatewayOptions(address_pool=("10.0.0.1", "10.0.0.2"))
    asks = gateway("asks", created="2026-02-01T00:00:00Z", addresses=[{"type": "IPAddress", "value": "10.0.0.1"}])
    plain = gateway("plain", created="2026-01-01T00:00:00Z")
    outside = gateway("outside", addresses=[{"type": "IPAddress", "value": "192.0.2.9"}])
    named = gateway("named", addresses=[{"type": "NamedAddress", "value": "x"}])
    t = translate(asks, plain, outside, named, options=options)
    assert t.gateways["default/asks"].addresses == (("IPAddress", "10.0.0.1"),)
    assert t.gateways["default/plain"].addresses == (("IPAddress", "10.0.0.2"),)
    assert conditions(t.gateways["default/outside"].conditions)["Programmed"] == (False, "AddressNotUsable")
    assert conditions(t.gateways["default/named"].conditions)["Accepted"] == (False, "UnsupportedAddress")


def test_pool_keeps_the_address_a_gateway_already_shows():
    options = GatewayOptions(address_pool=("10.0.0.1", "10.0.0.2"))
    shown = gateway("b", created="2026-02-01T00:00:00Z",
                    status={"addresses": [{"type": "IPAddress", "value": "10.0.0.1"}]})
    t = translate(gateway("a"), shown, options=options)
    assert t.gateways["default/b"].addresses == (("IPAddress", "10.0.0.1"),)
    assert t.gateways["default/a"].addresses == (("IPAddress", "10.0.0.2"),)


def test_translation_is_deterministic_whatever_the_input_order():
    objs = [gateway("a"), gateway("b", listeners=[listener(hostname="b.example")]),
            http_route("r1", parents=[{"name": "a"}]), http_route("r2", parents=[{"name": "b"}]), service()]
    assert translate(*objs) == translate(*reversed(objs))
