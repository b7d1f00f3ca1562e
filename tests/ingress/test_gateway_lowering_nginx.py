"""Gateway API routes lowered onto the data plane model, served by a real
nginx with the real Lua (fixtures: tests/ingress/conftest.py), beside an
Ingress Server on the same host."""

from __future__ import annotations

from platformd.ingress.gateway_lowering import lower, merge
from platformd.ingress.model import Backend, Configuration, Location, Server
from tests.ingress.gateway_objects import NOW, backend, gateway, http_route, path, rule, service, translate


def _slice(service_name: str, endpoint) -> dict:
    return {"metadata": {"name": f"{service_name}-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": service_name}},
            "addressType": "IPv4", "ports": [{"name": "", "port": endpoint.port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [endpoint.address], "conditions": {"ready": True}}]}


def test_lowered_routes_are_served_beside_an_ingress_on_the_same_host(dataplane, backends):
    api, site, legacy = backends(3)
    redirect = {"matches": [path("/moved", "Exact")], "filters": [{"type": "RequestRedirect", "requestRedirect": {
        "scheme": "https", "hostname": "new.example", "statusCode": 301,
        "path": {"type": "ReplaceFullPath", "replaceFullPath": "/here"}}}]}
    route = http_route(hostnames=["web.example"], rules=[
        rule(backend("api"), matches=[path("/api", "Exact")]),
        rule(backend("site"), matches=[path("/")]),
        redirect])
    t = translate(gateway(), route, service("api"), service("site"))
    lowered = lower(t.table, http_port=80, https_port=443,
                    services={"default/api": service("api"), "default/site": service("site")},
                    slices={"default/api": (_slice("api", api.endpoint),),
                            "default/site": (_slice("site", site.endpoint),)}.get,
                    secrets={}, now=NOW)
    assert lowered.skipped == ()
    # The Ingress on the same host keeps /old; its "/" is replaced by the route's.
    ingress = Server("web.example", locations=(Location("/", backend="legacy"), Location("/old", backend="legacy")))
    config = Configuration(servers=merge([ingress], lowered.servers),
                           backends=(*lowered.backends, Backend("legacy", endpoints=(legacy.endpoint,))))
    result = dataplane.apply(config)
    assert result.ok, result.error

    def who(p):
        r = dataplane.get(p, host="web.example", follow_redirects=False)
        return r.headers.get("x-backend") or str(r.status_code)
    assert who("/api") == "b0"          # Exact to the api Service
    assert who("/api/x") == "b1"        # not Exact: the route's "/" prefix
    assert who("/anything") == "b1"
    assert who("/old/page") == "b2"     # the Ingress's own path
    moved = dataplane.get("/moved", host="web.example", follow_redirects=False)
    assert (moved.status_code, moved.headers["location"]) == (301, "https://new.example/here")
