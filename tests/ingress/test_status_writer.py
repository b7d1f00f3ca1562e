"""StatusWriter against the fake API server: no address source leaves status alone, with one warning."""

from __future__ import annotations

import logging

from platformd.common import kubeclient
from platformd.ingress.status import StatusOptions, StatusWriter
from tests.ingress_e2e import objects as o

KEY = "default/web"
NODE = {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.4"}]}}


def _lb(fake_api) -> list:
    obj = fake_api.get("Ingress", "default", "web") or {}
    return ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []


def test_no_address_source_leaves_status_alone_and_warns_once(fake_api, caplog):
    fake_api.create(o.ingress("web", "web.example", [("/", "web", 80)]))
    api = kubeclient.load(fake_api.kubeconfig)
    node: dict = {"node": NODE}
    writer = StatusWriter(api, StatusOptions(node_name="node-a"), is_leader=lambda: True, owned=lambda: [KEY],
                          get_ingress=lambda key: fake_api.get("Ingress", "default", "web"),
                          get_service=lambda key: None, get_node=lambda name: node["node"])
    writer.sync()
    assert _lb(fake_api) == [{"ip": "10.0.0.4"}]

    node["node"] = None                   # the Node cannot be read any more: no address source
    with caplog.at_level(logging.WARNING, logger="platformd.ingress.status"):
        writer.sync()
        writer.sync()
    assert _lb(fake_api) == [{"ip": "10.0.0.4"}]          # written earlier: kept, not cleared
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "Node node-a has no ExternalIP or InternalIP" in warnings[0]

    node["node"] = NODE                   # back, then gone again: warned again, once
    writer.sync()
    node["node"] = None
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="platformd.ingress.status"):
        writer.sync()
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_without_any_flag_or_node_nothing_is_written(fake_api, caplog):
    fake_api.create(o.ingress("web", "web.example", [("/", "web", 80)]))
    api = kubeclient.load(fake_api.kubeconfig)
    writer = StatusWriter(api, StatusOptions(), is_leader=lambda: True, owned=lambda: [KEY],
                          get_ingress=lambda key: fake_api.get("Ingress", "default", "web"),
                          get_service=lambda key: None, get_node=lambda name: None)
    with caplog.at_level(logging.WARNING, logger="platformd.ingress.status"):
        writer.sync()
    assert _lb(fake_api) == []
    assert "neither --publish-service nor --publish-status-address" in caplog.text
