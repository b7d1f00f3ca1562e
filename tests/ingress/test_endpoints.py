"""Service + EndpointSlices → endpoints (pure, table-driven)."""

from __future__ import annotations

import pytest

from platformd.ingress.endpoints import resolve
from platformd.ingress.model import Endpoint
from tests.ingress.test_translate_fixtures import (
    endpoint,
    endpoint_slice,
    ingress,
    path,
    rule,
    service,
    translate,
)

SVC = service("web", ports=((80, "http"), (9090, "metrics")))


def eps(*pairs) -> tuple[Endpoint, ...]:
    return tuple(Endpoint(ip, port) for ip, port in pairs)


CASES = [
    # (description, service, slices, port, service_upstream, endpoints, issue reasons)
    ("port by number, ready endpoints", SVC, [endpoint_slice(endpoints=["10.0.0.1", "10.0.0.2"])], 80, False,
     eps(("10.0.0.1", 8080), ("10.0.0.2", 8080)), []),
    ("port by name", SVC, [endpoint_slice(endpoints=["10.0.0.1"])], "http", False, eps(("10.0.0.1", 8080)), []),
    ("target port from the slice port of the same name", SVC,
     [endpoint_slice(endpoints=["10.0.0.1"], port=8080, port_name="http"),
      endpoint_slice(endpoints=["10.0.0.1"], port=9100, port_name="metrics", name="m")], 9090, False,
     eps(("10.0.0.1", 9100)), []),
    ("unnamed single port matches unnamed slice port", service("web", ports=((80, None),)),
     [endpoint_slice(endpoints=["10.0.0.1"], port=3000, port_name=None)], 80, False, eps(("10.0.0.1", 3000)), []),
    ("slices without our port contribute nothing", SVC, [endpoint_slice(endpoints=["10.0.0.1"], port_name="other")],
     80, False, (), []),
    ("ready unset counts as ready; not ready is skipped", SVC,
     [endpoint_slice(endpoints=[endpoint("10.0.0.1", ready=None), endpoint("10.0.0.2", ready=False)])], 80, False,
     eps(("10.0.0.1", 8080)), []),
    ("serving+terminating only when nothing is ready", SVC,
     [endpoint_slice(endpoints=[endpoint("10.0.0.2", ready=False, serving=True, terminating=True),
                                endpoint("10.0.0.3", ready=False, serving=False, terminating=True)])], 80, False,
     eps(("10.0.0.2", 8080)), []),
    ("terminating ignored while some are ready", SVC,
     [endpoint_slice(endpoints=["10.0.0.1", endpoint("10.0.0.2", ready=False, serving=True, terminating=True)])],
     80, False, eps(("10.0.0.1", 8080)), []),
    ("de-duplicated across slices", SVC,
     [endpoint_slice(endpoints=["10.0.0.1"], name="a"), endpoint_slice(endpoints=["10.0.0.1", "10.0.0.2"], name="b")],
     80, False, eps(("10.0.0.1", 8080), ("10.0.0.2", 8080)), []),
    ("IPv6 slice", SVC, [endpoint_slice(endpoints=["fd00::1"], address_type="IPv6")], 80, False,
     eps(("fd00::1", 8080)), []),
    ("an address that is not an IP is skipped, the others kept", SVC,
     [endpoint_slice(endpoints=["10.0.0.1", "not-an-ip", "10.0.0.300"])], 80, False, eps(("10.0.0.1", 8080)), []),
    ("a slice port that is no port number contributes nothing", SVC,
     [endpoint_slice(endpoints=["10.0.0.1"], port=70000)], 80, False, (), []),
    ("FQDN slices are skipped", SVC, [endpoint_slice(endpoints=["db.example.com"], address_type="FQDN")], 80, False,
     (), []),
    ("service-upstream uses ClusterIP and service port", SVC, [endpoint_slice(endpoints=["10.0.0.1"])], 80, True,
     eps(("10.96.0.10", 80)), []),
    ("service-upstream on a headless service falls back", service("web", cluster_ip="None"),
     [endpoint_slice(endpoints=["10.0.0.1"])], 80, True, eps(("10.0.0.1", 8080)), ["ServiceUpstreamWithoutClusterIP"]),
    ("missing service", None, [], 80, False, (), ["ServiceNotFound"]),
    ("missing port number", SVC, [], 81, False, (), ["ServicePortNotFound"]),
    ("missing port name", SVC, [], "grpc", False, (), ["ServicePortNotFound"]),
    ("ExternalName with an IP", service("web", type_="ExternalName", external_name="192.0.2.7", ports=()), [], 443,
     False, eps(("192.0.2.7", 443)), []),
    ("ExternalName with a DNS name is unsupported", service("web", type_="ExternalName", external_name="api.example.net"),
     [], 80, False, (), ["ExternalNameUnsupported"]),
]


@pytest.mark.parametrize("desc,svc,slices,port,upstream,expected,issues", CASES, ids=[c[0] for c in CASES])
def test_resolve(desc, svc, slices, port, upstream, expected, issues):
    result = resolve("default/web", svc, tuple(slices), port, service_upstream=upstream)
    assert tuple(sorted(set(result.endpoints))) == expected
    assert [i.reason for i in result.issues] == issues


def test_missing_service_keeps_the_path_with_an_empty_backend_and_a_problem():
    result = translate(ingress(rules=[rule("example.com", path("/", service="gone"))]))
    loc = result.configuration.servers[0].locations[0]
    assert loc.backend == "default.gone.80"
    assert result.configuration.backend("default.gone.80").endpoints == ()
    assert [(p.kind, p.name, p.reason) for p in result.problems] == [("Ingress", "app", "ServiceNotFound")]


def test_service_upstream_annotation_and_named_port_backend_name():
    result = translate(
        ingress(rules=[rule("example.com", path("/", port="http"))], annotations={"service-upstream": "true"}),
        service("web"), endpoint_slice(endpoints=["10.0.0.1"]),
    )
    backend = result.configuration.backend("default.web.http")
    assert backend is not None and backend.endpoints == eps(("10.96.0.10", 80))
