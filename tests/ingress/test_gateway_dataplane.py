"""GatewayPlane: the lowered Gateway routes merged into what the Ingress
controller submits, without ever breaking the Ingress configuration; and
Programmed following what was applied."""

from __future__ import annotations

from dataclasses import dataclass

from platformd.ingress.gateway_controller import _programmed
from platformd.ingress.gateway_dataplane import GatewayPlane, extend
from platformd.ingress.gateway_lowering import Lowered, Skipped, lower
from platformd.ingress.model import Backend, Configuration, Endpoint, Location, Server
from tests.ingress.gateway_objects import NOW, gateway, http_route, listener, path, rule, service, translate


@dataclass
class _Result:
    ok: bool


class _Plane:
    """Records what was submitted; every apply succeeds."""

    def __init__(self):
        self.submitted = []
        self.nginx = "the real plane's"

    def submit(self, config):
        self.submitted.append(config)
        return lambda superseded=None: _Result(True)


GW_SERVER = Server("gw.example", locations=(Location("/", backend="default.svc.80"),))
GW_BACKEND = Backend("default.svc.80", endpoints=(Endpoint("10.1.0.9", 8080),))


def test_extend_merges_servers_and_keeps_the_ingress_copy_of_a_shared_backend():
    ingress_backend = Backend("default.svc.80", endpoints=(Endpoint("10.1.0.5", 8080),))
    config = Configuration(servers=(Server("ing.example", locations=(Location("/", backend="default.svc.80"),)),),
                           backends=(ingress_backend,))
    merged, left_out = extend(config, Lowered(servers=(GW_SERVER,), backends=(GW_BACKEND,)))
    assert [s.hostname for s in merged.servers] == ["gw.example", "ing.example"]
    assert merged.backends == (ingress_backend,)  # fresher: endpoint syncs patch this one
    assert left_out == ()


def test_extend_leaves_out_a_host_another_server_has_as_alias():
    config = Configuration(servers=(Server("www.example", aliases=("gw.example",),
                                           locations=(Location("/", backend="b"),)),),
                           backends=(Backend("b"),))
    merged, left_out = extend(config, Lowered(servers=(GW_SERVER,), backends=(GW_BACKEND,)))
    assert [s.hostname for s in merged.servers] == ["www.example"] and left_out == ("gw.example",)


def test_plane_submits_the_merge_and_reports_the_applied_version():
    real, applied = _Plane(), []
    plane = GatewayPlane(real, on_applied=applied.append)
    plane.submit(Configuration())()
    assert applied == [0] and real.submitted[0].servers == ()
    plane.publish(3, Lowered(servers=(GW_SERVER,), backends=(GW_BACKEND,)))
    plane.submit(Configuration())()
    assert applied == [0, 3] and [s.hostname for s in real.submitted[1].servers] == ["gw.example"]
    assert plane.nginx == "the real plane's"  # everything else is the real plane's


def test_plane_falls_back_to_the_ingress_configuration_when_the_merge_is_invalid(monkeypatch):
    from platformd.ingress import gateway_dataplane
    from platformd.ingress import validate as v

    def refuse(*_):
        raise v.ValidationError("servers", "gw.example", "refused for the test")
    monkeypatch.setattr(gateway_dataplane, "merge", refuse)
    real, applied = _Plane(), []
    plane = GatewayPlane(real, on_applied=applied.append)
    plane.publish(1, Lowered(servers=(GW_SERVER,)))
    config = Configuration(servers=(Server("ing.example", locations=(Location("/", backend="b"),)),))
    plane.submit(config)()
    assert real.submitted[-1] is config and applied == []
    assert "Gateway routes left out" in plane.last_error


def test_programmed_waits_for_apply_and_names_a_left_out_host():
    t = translate(gateway(listeners=[listener()]), http_route(hostnames=["a.example"]), service())
    lowered = lower(t.table, http_port=80, https_port=443, services={"default/svc": service()},
                    slices=lambda key: (), secrets={}, now=NOW)
    programmed = lambda gws: {k: next(c for c in s.conditions if c.type == "Programmed") for k, s in gws.items()}  # noqa: E731
    waiting = programmed(_programmed(t, lowered, applied=False))["default/gw"]
    assert (waiting.status, waiting.reason) == (False, "Pending")
    served = programmed(_programmed(t, lowered, applied=True))["default/gw"]
    assert (served.status, served.reason) == (True, "Programmed")
    bind = t.table.hosts[0].bind
    skipped = Lowered(skipped=(Skipped("a.example", (bind,), "header matches need the router"),))
    left = programmed(_programmed(t, skipped, applied=True))["default/gw"]
    assert (left.status, left.reason) == (False, "Pending") and "a.example" in left.message
    other = translate(gateway(listeners=[listener(hostname="b.example")]), http_route(), service())
    assert programmed(_programmed(other, skipped, applied=True))["default/gw"].status is True  # not its host


def test_without_a_data_plane_gateways_are_pending():
    t = translate(gateway(), http_route(hostnames=["a.example"], rules=[rule(matches=[path("/")])]), service())
    status = _programmed(t, None, applied=True)["default/gw"]
    assert [(c.status, c.reason) for c in status.conditions if c.type == "Programmed"] == [(False, "Pending")]
