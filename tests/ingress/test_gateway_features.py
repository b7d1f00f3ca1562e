"""GatewayClass status.supportedFeatures: what the data plane serves, only on accepted classes."""

from platformd.ingress import gateway_features
from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_input import GatewayOptions
from tests.ingress.gateway_objects import NOW, gateway_class, translate


def test_an_accepted_class_lists_the_supported_features_sorted():
    t = translate(gateway_class())
    body = st.render_class(t.classes["platform"], {"status": {"supportedFeatures": [{"name": "Stale"}]}}, NOW)
    assert body["supportedFeatures"] == [{"name": n} for n in sorted(gateway_features.SUPPORTED)]
    assert list(gateway_features.SUPPORTED) == sorted(set(gateway_features.SUPPORTED))
    assert {"HTTPRoute", "HTTPRouteQueryParamMatching", "HTTPRouteMethodMatching"} <= set(gateway_features.SUPPORTED)


def test_a_class_not_accepted_claims_no_features():
    cls = gateway_class(parametersRef={"group": "", "kind": "ConfigMap", "name": "x"})
    status = translate(cls).classes["platform"]
    body = st.render_class(status, {"status": {"supportedFeatures": [{"name": "HTTPRoute"}]}}, NOW)
    assert "supportedFeatures" not in body


def test_redirect_features_are_claimed_and_port_8080_only_when_mapped_plain():
    assert {"HTTPRouteSchemeRedirect", "HTTPRoutePortRedirect", "HTTPRoutePathRedirect",
            "HTTPRoute303RedirectStatusCode", "HTTPRoute307RedirectStatusCode",
            "HTTPRoute308RedirectStatusCode", "HTTPRouteRequestMirror", "HTTPRouteRequestPercentageMirror",
            "HTTPRouteRequestMultipleMirrors", "HTTPRouteResponseHeaderModification",
            "GatewayStaticAddresses", "GatewayHTTPListenerIsolation", "HTTPRoutePathRewrite",
            "HTTPRouteHostRewrite"} <= set(gateway_features.SUPPORTED)
    assert {"HTTPRouteRequestTimeout", "HTTPRouteBackendTimeout"} <= set(gateway_features.SUPPORTED)
    # Served only approximately or not at all: never claimed.
    assert not {"HTTPRouteRequestHeaderModification", "HTTPRouteCORS",
                "GatewayInfrastructurePropagation"} & set(gateway_features.SUPPORTED)
    assert "GatewayPort8080" not in gateway_features.supported(set())
    assert "GatewayPort8080" not in gateway_features.supported({8443})
    mapped = gateway_features.supported({8080})
    assert "GatewayPort8080" in mapped and list(mapped) == sorted(mapped)


def test_the_translation_claims_port_8080_when_the_options_map_it():
    plain = translate(gateway_class(), options=GatewayOptions(listener_ports={8080: 18080})).classes["platform"]
    tls = translate(gateway_class(), options=GatewayOptions(
        listener_ports={8080: 18080}, tls_listener_ports=frozenset({8080}))).classes["platform"]
    assert "GatewayPort8080" in plain.supported_features
    assert "GatewayPort8080" not in tls.supported_features
