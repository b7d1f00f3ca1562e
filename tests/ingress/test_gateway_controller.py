"""The Gateway API loop against the fake API server: discovery, informers,
translation and the leader-only status writer (no data plane yet)."""

from __future__ import annotations

import logging
import threading
from argparse import Namespace

import pytest

from platformd.common import kubeclient, resources
from platformd.common.apisource import ApiSource
from platformd.common.informer import InformerFactory
from platformd.ingress import gateway_setup
from platformd.ingress.gateway_controller import GatewayController, discover
from platformd.ingress.gateway_input import GatewayOptions
from platformd.ingress.gateway_statuswriter import GatewayStatusWriter
from tests.fakeapi import FakeApiServer
from tests.helpers.waiting import wait_for
from tests.ingress.gateway_objects import CONTROLLER, gateway, gateway_class, http_route, service


def _clean(obj):
    obj = {**obj, "metadata": {k: v for k, v in obj["metadata"].items()
                               if k not in ("creationTimestamp", "generation")}}
    return obj


class Loop:
    """A GatewayController and its status writer running on threads."""

    def __init__(self, fake_api, leader=True, options=None):
        self.api = kubeclient.load(str(fake_api.kubeconfig))
        source = ApiSource(self.api)
        self.ingress_factory = InformerFactory(source)
        self.factory = InformerFactory(source)
        self.leader = leader
        self.gateway = GatewayController(
            self.factory, options or GatewayOptions(), services=self.ingress_factory.informer(resources.SERVICES),
            secrets=self.ingress_factory.informer(resources.SECRETS), publish_addresses=lambda: ("192.0.2.1",),
            min_sync_interval=0.05)
        self.writer = GatewayStatusWriter(self.api, CONTROLLER, is_leader=lambda: self.leader,
                                          translation=lambda: self.gateway.translation,
                                          get=self.gateway.get, keys=self.gateway.keys)
        self.writes_lock = threading.Lock()
        self.gateway.on_translated = self.translated
        self.stop = threading.Event()

    def translated(self, _translation, routes):
        self.writer.changed(routes)
        self.sync_status()

    def sync_status(self):
        with self.writes_lock:
            self.writer.sync()

    def start(self):
        self.ingress_factory.start()
        self.thread = threading.Thread(target=self.gateway.run, args=(self.stop,), daemon=True)
        self.thread.start()
        return self

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.ingress_factory.stop()
        self.api.close()


@pytest.fixture
def loop(fake_api):
    loops = []

    def make(**kw):
        lp = Loop(fake_api, **kw).start()
        loops.append(lp)
        return lp
    yield make
    for lp in loops:
        lp.close()


def _conditions(obj, path=()):
    status = obj.get("status") or {}
    for step in path:
        status = status[step]
    return {c["type"]: (c["status"], c["reason"], c.get("observedGeneration")) for c in status.get("conditions") or ()}


def _seed(fake_api):
    fake_api.create(_clean(gateway_class()))
    fake_api.create(service())
    fake_api.create(_clean(gateway()))
    fake_api.create(_clean(http_route()))


def test_discover_tells_whether_the_crds_are_installed(fake_api):
    api = kubeclient.load(str(fake_api.kubeconfig))
    try:
        assert discover(api) is None
        fake_api.set_crds_installed("gateway-api", False)
        assert discover(api) == "gateway.networking.k8s.io/v1 is not served"
    finally:
        api.close()


def test_without_crds_create_logs_one_line_and_returns_none(tmp_path, caplog):
    with FakeApiServer(gateway_api=False) as srv:
        api = kubeclient.load(srv.write_kubeconfig(tmp_path / "kc"))
        args = Namespace(gateway_api="auto", gateway_controller_name=CONTROLLER, gateway_address_pool=(),
                         gateway_listener_port=[], http_port=80, https_port=443, watch_namespace=None)
        with caplog.at_level(logging.INFO):
            assert gateway_setup.create(args, None, api, InformerFactory, None, tuple) is None
        lines = [r.getMessage() for r in caplog.records if "Gateway API" in r.getMessage()]
        assert lines == ["Gateway API CRDs are not installed (gateway.networking.k8s.io/v1 is not served): "
                         "serving Ingresses only; install the Gateway API v1.6 standard CRDs and restart "
                         "to serve Gateways"]
        api.close()


def test_leader_writes_status_with_observed_generation_and_programmed_pending(fake_api, loop):
    _seed(fake_api)
    lp = loop()
    gw = wait_for(lambda: (g := fake_api.get("Gateway", "default", "gw")) and
                  _conditions(g).get("Accepted", ("",))[0] == "True" and g, message="Gateway status")
    assert _conditions(gw) == {"Accepted": ("True", "Accepted", 1), "Programmed": ("False", "Pending", 1)}
    assert gw["status"]["addresses"] == [{"type": "IPAddress", "value": "192.0.2.1"}]
    assert gw["status"]["listeners"][0]["attachedRoutes"] == 1
    cls = fake_api.get("GatewayClass", None, "platform")
    assert _conditions(cls)["Accepted"] == ("True", "Accepted", 1)
    route = wait_for(lambda: (r := fake_api.get("HTTPRoute", "default", "route")) and r.get("status", {}).get("parents") and r)
    [parent] = route["status"]["parents"]
    assert parent["controllerName"] == CONTROLLER and parent["parentRef"] == {
        "group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}
    assert {c["type"]: c["status"] for c in parent["conditions"]} == {"Accepted": "True", "ResolvedRefs": "True"}
    assert lp.gateway.translation.table.hosts  # the table is built, waiting for the data plane


def test_status_is_written_only_when_it_changes(fake_api, loop):
    _seed(fake_api)
    lp = loop()
    wait_for(lambda: (fake_api.get("HTTPRoute", "default", "route") or {}).get("status", {}).get("parents"))
    wait_for(lambda: lp.writer.writes >= 3, message="three writes")
    settled = lp.writer.writes
    for _ in range(3):
        lp.sync_status()
    lp.gateway.sync()
    assert lp.writer.writes == settled


def test_unchanged_route_statuses_are_not_rendered_again(fake_api, loop, monkeypatch):
    from platformd.ingress import gateway_status

    _seed(fake_api)
    lp = loop()
    wait_for(lambda: (fake_api.get("HTTPRoute", "default", "route") or {}).get("status", {}).get("parents"))
    wait_for(lambda: lp.writer.writes >= 3, message="three writes")
    wait_for(lambda: (lp.gateway.get(resources.HTTP_ROUTES, "default/route") or {}).get("status", {}).get("parents"),
             message="the informer shows the route's status")
    lp.gateway.sync()
    lp.sync_status()  # the stored route shows our status: remembered
    rendered = []
    real = gateway_status.render_route
    monkeypatch.setattr(gateway_status, "render_route", lambda *a: rendered.append(a) or real(*a))
    lp.gateway.sync()
    lp.sync_status()
    assert rendered == []  # the same status against the same stored route
    # A change of the route is still rendered and written.
    route = fake_api.get("HTTPRoute", "default", "route")
    route["spec"]["rules"][0]["backendRefs"][0]["name"] = "missing"
    fake_api.update(route)
    wait_for(lambda: any(c["reason"] == "BackendNotFound" for c in
                         fake_api.get("HTTPRoute", "default", "route")["status"]["parents"][0]["conditions"]),
             message="ResolvedRefs=False written")
    assert rendered


def test_generation_bump_updates_observed_generation(fake_api, loop):
    _seed(fake_api)
    loop()
    wait_for(lambda: _conditions(fake_api.get("HTTPRoute", "default", "route") or {}, ("parents", 0)) if
             (fake_api.get("HTTPRoute", "default", "route") or {}).get("status", {}).get("parents") else None)
    route = fake_api.get("HTTPRoute", "default", "route")
    route["spec"]["rules"][0]["backendRefs"][0]["name"] = "missing"
    fake_api.update(route)

    def parent():
        r = fake_api.get("HTTPRoute", "default", "route")
        conds = {c["type"]: c for c in r["status"]["parents"][0]["conditions"]}
        return conds if conds["ResolvedRefs"]["observedGeneration"] == 2 else None
    conds = wait_for(parent, message="observedGeneration 2")
    assert (conds["ResolvedRefs"]["status"], conds["ResolvedRefs"]["reason"]) == ("False", "BackendNotFound")
    assert conds["Accepted"]["observedGeneration"] == 2


def test_a_follower_writes_nothing(fake_api, loop):
    _seed(fake_api)
    lp = loop(leader=False)
    wait_for(lambda: lp.gateway.translation is not None and lp.gateway.translation.http_routes)
    lp.sync_status()
    assert lp.writer.writes == 0
    assert _conditions(fake_api.get("Gateway", "default", "gw"))["Accepted"][1] == "Pending"


def test_route_no_longer_ours_loses_our_parent_entry_and_keeps_others(fake_api, loop):
    _seed(fake_api)
    lp = loop()
    wait_for(lambda: (fake_api.get("HTTPRoute", "default", "route") or {}).get("status", {}).get("parents"))
    route = fake_api.get("HTTPRoute", "default", "route")
    route["status"]["parents"].append({"parentRef": {"name": "theirs"}, "controllerName": "example.com/other",
                                       "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                                                       "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    fake_api.update(route)
    route = fake_api.get("HTTPRoute", "default", "route")
    route["spec"]["parentRefs"] = [{"name": "theirs"}]
    fake_api.update(route)
    wait_for(lambda: [p["controllerName"] for p in fake_api.get("HTTPRoute", "default", "route")["status"]["parents"]]
             == ["example.com/other"], message="our entry removed")
    assert lp.writer.writes >= 1


def test_file_source_serves_gateway_api_manifests(tmp_path):
    from platformd.common.filesource import FileSource
    (tmp_path / "gateway.yaml").write_text("""
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: platform}
spec: {controllerName: platform.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  gatewayClassName: platform
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: apps}
spec:
  parentRefs: [{name: gw, namespace: default}]
  hostnames: [web.example]
  rules: [{backendRefs: [{name: web, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: from-default, namespace: apps}
spec:
  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: default}]
  to: [{group: "", kind: Secret}]
""")
    source = FileSource(str(tmp_path), poll_interval=0.05)
    ingress_factory, factory = InformerFactory(source), InformerFactory(source)
    gateway = GatewayController(factory, GatewayOptions(), services=ingress_factory.informer(resources.SERVICES),
                                secrets=ingress_factory.informer(resources.SECRETS))
    ingress_factory.start()
    stop = threading.Event()
    thread = threading.Thread(target=gateway.run, args=(stop,), daemon=True)
    thread.start()
    try:
        translation = wait_for(lambda: gateway.translation, message="first translation")
        assert list(translation.gateways) == ["default/gw"]
        assert len(factory.informer(resources.REFERENCE_GRANTS).store.keys()) == 1  # v1 name accepted
        # The route is in another namespace and the listener allows Same only.
        [parent] = translation.http_routes["apps/web"].parents
        assert (parent.conditions[0].status, parent.conditions[0].reason) == (False, "NotAllowedByListeners")
    finally:
        stop.set()
        thread.join(5)
        ingress_factory.stop()
        source.close()


def test_summary_counts_and_lists_what_is_not_accepted(fake_api, loop):
    _seed(fake_api)
    fake_api.create(_clean(http_route("lost", parents=[{"name": "gw", "sectionName": "nope"}])))
    lp = loop()
    summary = wait_for(lambda: (s := lp.gateway.summary()).get("http_routes") == 2 and s, message="summary")
    assert summary == {"synced": True, "gateways": 1, "http_routes": 2, "grpc_routes": 0, "not_accepted": [
        "HTTPRoute default/lost: NoMatchingParent: Gateway default/gw has no listener with sectionName nope"],
        "not_served": [], "last_error": None}


def test_platformctl_shows_gateway_counts_and_reasons():
    from platformd.ctl import render_status_table
    doc = {"role": "ingress", "healthy": True, "ready": True, "programs": [], "components": {"ingress": {
        "healthy": True, "status": {"ingresses": 3, "gateway_api": {
            "synced": True, "gateways": 1, "http_routes": 2, "grpc_routes": 0,
            "not_accepted": ["HTTPRoute default/lost: NoMatchingParent: no listener"],
            "not_served": ["hdr.example: header, query parameter and method matches need the router"]}}}}}
    text = render_status_table(doc)
    import re
    assert "gateway api:" in text and re.search(r"httproutes:\s+2\n", text) and re.search(r"not accepted:\s+1\n", text)
    assert "  - HTTPRoute default/lost: NoMatchingParent: no listener" in text
    assert "  - host hdr.example: header, query parameter and method matches need the router" in text


def test_the_controller_hands_over_the_routes_whose_status_may_change(fake_api, loop):
    _seed(fake_api)
    fake_api.create(_clean(http_route("other")))
    lp = loop()
    handed = []
    translated = lp.translated
    lp.gateway.on_translated = lambda t, routes: handed.append(routes) or translated(t, routes)
    wait_for(lambda: (fake_api.get("HTTPRoute", "default", "other") or {}).get("status", {}).get("parents"))
    handed.clear()
    route = fake_api.get("HTTPRoute", "default", "route")
    route["spec"]["rules"][0]["backendRefs"][0]["name"] = "missing"
    fake_api.update(route)
    wait_for(lambda: frozenset({("HTTPRoute", "default/route")}) in handed, message="the changed route handed over")
    assert all(routes is not None and routes <= {("HTTPRoute", "default/route")} for routes in handed)
    handed.clear()
    gw = fake_api.get("Gateway", "default", "gw")
    gw["spec"]["listeners"][0]["hostname"] = "elsewhere.example"
    fake_api.update(gw)
    wait_for(lambda: None in handed, message="a Gateway change: every route")  # (a full build)
