"""GatewayClass status.supportedFeatures: what the data plane serves, only on accepted classes."""

from platformd.ingress import gateway_features
from platformd.ingress import gateway_status as st
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
