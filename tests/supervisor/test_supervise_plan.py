"""The pure half of `platformd --role`: flag routing, program plans, config text."""

from __future__ import annotations

import argparse
import configparser

import pytest

from platformd import supervise
from platformd.supervise import SuperviseError, route_flags, supervisor_quote


def _parser(*flags: tuple[str, dict]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    for name, kw in flags:
        p.add_argument(name, **kw)
    return p


INGRESS = _parser(("--kubeconfig", {}), ("--http-port", {"type": int}), ("--watch-ingress-without-class", {"action": "store_true"}))
NODEPROXY = _parser(("--kubeconfig", {}), ("--node-ip", {"action": "append"}), ("--masquerade-all", {"action": "store_true"}))


def test_shared_flag_reaches_both_components_and_others_only_their_owner():
    routed = route_flags(
        ["--kubeconfig", "/k", "--http-port=18080", "--node-ip", "10.0.0.1", "--masquerade-all",
         "--watch-ingress-without-class", "--node-ip", "10.0.0.2"],
        {"ingress": INGRESS, "nodeproxy": NODEPROXY},
    )
    assert routed["ingress"] == ["--kubeconfig", "/k", "--http-port=18080", "--watch-ingress-without-class"]
    assert routed["nodeproxy"] == ["--kubeconfig", "/k", "--node-ip", "10.0.0.1", "--masquerade-all",
                                   "--node-ip", "10.0.0.2"]


def test_flag_of_a_component_outside_the_role_is_an_error_not_dropped():
    with pytest.raises(SuperviseError, match="unknown flag --node-ip"):
        route_flags(["--node-ip", "10.0.0.1"], {"ingress": INGRESS})


def test_missing_value_and_stray_positional_are_errors():
    with pytest.raises(SuperviseError, match="needs a value"):
        route_flags(["--kubeconfig"], {"ingress": INGRESS})
    with pytest.raises(SuperviseError, match="unexpected argument"):
        route_flags(["oops"], {"ingress": INGRESS})


@pytest.mark.parametrize("hostile", ["a\n[program:evil]\ncommand=/bin/sh", "x\ry", "nul\x00"])
def test_line_breaks_cannot_inject_supervisord_sections(hostile):
    with pytest.raises(SuperviseError):
        supervisor_quote(["platformd", hostile])


def test_quoting_survives_supervisord_expansion():
    # supervisord expands %(...)s and splits with shlex: both must give back the argv.
    import shlex

    argv = ["x", "100%", "a b", "it's", "%(ENV_HOME)s"]
    line = supervisor_quote(argv)
    assert shlex.split(line.replace("%%", "%")) == argv


def _args(**kw):
    ns = supervise.build_parser().parse_args([])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def test_role_all_plans_every_program_with_internal_ports(tmp_path):
    args = _args(role="all", health_port=12345, ingress_internal_port=23456)
    programs = supervise.plan_programs(args, {"ingress": ["--http-port", "18080"], "nodeproxy": []}, tmp_path)
    by_name = {p.name: p for p in programs}
    assert set(by_name) == {"nginx", "ingress", "nodeproxy", "health"}
    assert by_name["nginx"].stopsignal == "QUIT"
    assert by_name["nginx"].priority < by_name["ingress"].priority < by_name["health"].priority
    ingress = by_name["ingress"].argv
    assert ingress[ingress.index("--healthz-port") + 1] == "23456"
    assert "--external-nginx" in ingress and "18080" in ingress
    health = by_name["health"].argv
    assert health[health.index("--port") + 1] == "12345"
    assert "http://127.0.0.1:23456" in health
    nodeproxy = by_name["nodeproxy"].argv
    assert nodeproxy[nodeproxy.index("--healthz-bind-address") + 1] == "0.0.0.0:10256"
    assert "http://127.0.0.1:10256" in health


def test_user_given_nodeproxy_healthz_address_is_kept_and_probed(tmp_path):
    args = _args(role="nodeproxy")
    programs = supervise.plan_programs(args, {"nodeproxy": ["--healthz-bind-address", "127.0.0.1:4444"]}, tmp_path)
    np = next(p for p in programs if p.name == "nodeproxy")
    assert np.argv.count("--healthz-bind-address") == 1
    health = next(p for p in programs if p.name == "health")
    assert "http://127.0.0.1:4444" in health.argv
    assert not any(p.name in ("nginx", "ingress") for p in programs)


def test_rendered_config_is_valid_ini_with_one_section_per_program(tmp_path):
    args = _args(role="ingress")
    programs = supervise.plan_programs(args, {"ingress": []}, tmp_path)
    text = supervise.render_config(args, programs, tmp_path)
    cp = configparser.RawConfigParser()
    cp.read_string(text)
    assert {"program:nginx", "program:ingress", "program:health", "eventlistener:fatal-watch"} <= set(cp.sections())
    assert cp.get("program:nginx", "stopsignal") == "QUIT"
    assert "PROCESS_STATE_FATAL" in cp.get("eventlistener:fatal-watch", "events")
    assert cp.get("unix_http_server", "file") == f"{tmp_path}/supervisor.sock"
