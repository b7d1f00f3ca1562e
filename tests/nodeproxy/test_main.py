import argparse
import io
import json
import urllib.error
import urllib.request

import pytest

from platformd.common.clock import FakeClock
from platformd.nodeproxy.dryrun import DryRunKernel
from platformd.nodeproxy.fakekernel import FakeKernel
from platformd.nodeproxy.health import HTTPEndpoint, ProxierHealth, node_eligible
from platformd.nodeproxy.main import build_parser, duration, make_kernel, run, wants_dual_stack
from platformd.nodeproxy.metrics import Metrics

from .objects import endpoint_slice, service
from .test_e2e import write


def args(*argv):
    return build_parser().parse_args(list(argv) + ["--healthz-bind-address", "", "--metrics-bind-address", ""])


def test_defaults_and_durations():
    a = build_parser().parse_args([])
    assert (a.scheduler, a.min_sync_period, a.sync_period) == ("rr", 1.0, 30.0)
    assert (a.healthz_bind_address, a.metrics_bind_address) == ("0.0.0.0:10256", "127.0.0.1:10249")
    assert duration("1m30s") == 90 and duration("500ms") == 0.5 and duration("2") == 2
    with pytest.raises(argparse.ArgumentTypeError):
        duration("5 parsecs")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--scheduler", "nope"])


def test_kernel_without_ipvs_gets_one_line_and_exit_1(tmp_path, capsys):
    status = run(args("--source", str(tmp_path), "--hostname", "n"), kernel=FakeKernel(ipvs=False))
    err = capsys.readouterr().err
    assert status == 1
    assert err.count("\n") == 1 and "ip_vs" in err and "Traceback" not in err


def test_real_kernel_here_without_ipvs_exits_cleanly(tmp_path, capsys):
    # This host's kernel has no IPVS (see docs); on one that has it this needs root.
    a = args("--source", str(tmp_path), "--hostname", "n", "--once")
    status = run(a, kernel=make_kernel(a))
    err = capsys.readouterr().err
    if status == 0:
        pytest.skip("this kernel has IPVS")
    assert status == 1 and "nodeproxy:" in err and "Traceback" not in err


def test_dry_run_prints_operations(tmp_path):
    write(tmp_path / "a.yaml", service("web", "10.96.0.10", sessionAffinity="ClientIP"),
          endpoint_slice("web", ["10.1.0.1"]))
    out = io.StringIO()
    status = run(args("--source", str(tmp_path), "--hostname", "n", "--dry-run", "--once"),
                 kernel=DryRunKernel(out))
    text = out.getvalue()
    assert status == 0
    assert "dry-run: add_virtual_server tcp:10.96.0.10:80 scheduler=rr persistence=10800s" in text
    assert "dry-run: add_real_server tcp:10.96.0.10:80 10.1.0.1:8080 weight=1" in text
    assert "dry-run: add_address kube-ipvs0 10.96.0.10" in text
    assert "*nat" in text


def test_cleanup_flag(tmp_path):
    kernel = FakeKernel()
    write(tmp_path / "a.yaml", service("web", "10.96.0.10"), endpoint_slice("web", ["10.1.0.1"]))
    assert run(args("--source", str(tmp_path), "--hostname", "n", "--once"), kernel=kernel) == 0
    assert kernel.virtual
    assert run(args("--cleanup"), kernel=kernel) == 0
    assert kernel.virtual == {} and "kube-ipvs0" not in kernel.links and not kernel.ipsets


def test_sysctl_failures_reported_by_name_and_stop_us(tmp_path, capsys):
    kernel = FakeKernel(sysctls={})  # no sysctl exists
    assert run(args("--source", str(tmp_path), "--hostname", "n", "--once"), kernel=kernel) == 1
    lines = capsys.readouterr().err.splitlines()
    assert any("net/ipv4/vs/conntrack=1" in m for m in lines)
    assert any("net/ipv4/ip_forward=1" in m for m in lines)
    assert all(line.startswith("nodeproxy: cannot set sysctl") for line in lines)


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_healthz_and_metrics_http():
    clock = FakeClock()
    health = ProxierHealth(timeout=60, clock=clock)
    metrics = Metrics()
    ep = HTTPEndpoint("127.0.0.1:0", health, metrics.registry)
    ep.start()
    try:
        base = f"http://127.0.0.1:{ep.port}"
        status, body = _get(base + "/healthz")
        doc = json.loads(body)
        assert status == 200 and set(doc) == {"lastUpdated", "currentTime", "nodeEligible"}
        health.updated(clock.monotonic())
        health.queued()
        clock.advance(61)
        assert _get(base + "/healthz")[0] == 503
        health.updated(clock.monotonic())
        assert _get(base + "/healthz")[0] == 200
        health.set_node_eligible(False)
        status, body = _get(base + "/healthz")
        assert status == 503 and json.loads(body)["nodeEligible"] is False
        assert _get(base + "/livez")[0] == 200
        status, body = _get(base + "/metrics")
        assert status == 200 and b"kubeproxy_sync_proxy_rules_duration_seconds" in body
        assert b"kubeproxy_network_programming_duration_seconds" in body
        assert _get(base + "/nope")[0] == 404
    finally:
        ep.stop()


def test_node_eligibility():
    assert node_eligible({"metadata": {}})
    assert not node_eligible({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})
    assert not node_eligible({"metadata": {}, "spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler"}]}})


def test_status_document_after_sync(tmp_path):
    from platformd.nodeproxy.proxier import Proxier, ProxierOptions
    clock = FakeClock()
    p = Proxier(FakeKernel(), ProxierOptions(hostname="n"), clock)
    assert p.status()["last_sync_time"] is None
    p.on_service(None, service("web", "10.96.0.10"))
    p.on_slice(None, endpoint_slice("web", ["10.1.0.1", "10.1.0.2"]))
    p.sync()
    st = p.status()
    assert (st["virtual_servers"], st["real_servers"], st["last_sync_time"]) == (1, 2, clock.wall())
    ep = HTTPEndpoint("127.0.0.1:0", p.health, None, p.status)
    ep.start()
    try:
        status, body = _get(f"http://127.0.0.1:{ep.port}/status")
        assert status == 200 and json.loads(body)["real_servers"] == 2
        assert _get(f"http://127.0.0.1:{ep.port}/metrics")[0] == 404
    finally:
        ep.stop()


def test_ipvsview_table():
    from platformd.nodeproxy.ipvsview import format_table, render
    from platformd.nodeproxy.kernel import RealServer, VirtualServer
    k = FakeKernel()
    vs = VirtualServer("TCP", "10.96.0.10", 80, "rr", 60)
    k.add_virtual_server(vs)
    k.add_real_server(vs, RealServer("10.1.0.1", 8080))
    k.set_connections(vs, RealServer("10.1.0.1", 8080), 3, 4)
    text = format_table(k)
    assert "TCP  10.96.0.10:80 rr persistent 60" in text
    assert "  -> 10.1.0.1:8080" in text and "Masq    1      3          4" in text
    vs6 = VirtualServer("UDP", "fd00:96::10", 53)
    k.add_virtual_server(vs6)
    k.add_real_server(vs6, RealServer("fd00:244::1", 5353))
    text = format_table(k)
    assert "UDP  [fd00:96::10]:53 rr" in text and "  -> [fd00:244::1]:5353" in text
    with pytest.raises(SystemExit) as exc:
        render(FakeKernel(ipvs=False))
    assert "ip_vs" in str(exc.value)


def test_dry_run_prints_only_the_difference_on_later_syncs():
    from platformd.nodeproxy.proxier import Proxier, ProxierOptions
    out = io.StringIO()
    p = Proxier(DryRunKernel(out), ProxierOptions(hostname="n"), FakeClock())
    old = endpoint_slice("web", ["10.1.0.1"])
    p.on_service(None, service("web", "10.96.0.10"))
    p.on_slice(None, old)
    p.sync()
    out.truncate(0)
    out.seek(0)
    p.on_slice(old, endpoint_slice("web", ["10.1.0.2"]))
    p.sync()
    assert out.getvalue().splitlines() == [
        "dry-run: delete_real_server tcp:10.96.0.10:80 10.1.0.1:8080 weight=1",
        "dry-run: add_real_server tcp:10.96.0.10:80 10.1.0.2:8080 weight=1"]


def test_handler_unwraps_tombstones():
    from platformd.common.informer import DeletedFinalStateUnknown
    from platformd.nodeproxy.main import _Handler
    calls = []
    h = _Handler(lambda prev, cur: calls.append((prev, cur)))
    h.on_add({"a": 1})
    h.on_update({"a": 1}, {"a": 2})
    h.on_delete(DeletedFinalStateUnknown("ns/x", {"a": 3}))
    h.on_delete({"a": 4})
    assert calls == [(None, {"a": 1}), ({"a": 1}, {"a": 2}), ({"a": 3}, None), ({"a": 4}, None)]


def test_dual_stack_flag_serves_ipv6_and_cleanup_removes_it(tmp_path, capsys):
    svc = service("web", "10.96.0.10")
    svc["spec"]["clusterIPs"] = ["10.96.0.10", "fd00:96::10"]
    six = endpoint_slice("web", ["fd00:244::1"], name="web-6")
    six["addressType"] = "IPv6"
    write(tmp_path / "a.yaml", svc, endpoint_slice("web", ["10.1.0.1"]), six)
    kernel, six_rules = FakeKernel(), FakeKernel().firewall
    assert run(args("--source", str(tmp_path), "--hostname", "n", "--once"), kernel=kernel) == 0
    assert {k[1] for k in kernel.virtual} == {"10.96.0.10"}  # without the flag: IPv4 only, as before
    assert run(args("--source", str(tmp_path), "--hostname", "n", "--once", "--dual-stack"),
               kernel=kernel, ip6tables=six_rules) == 0
    assert {k[1] for k in kernel.virtual} == {"10.96.0.10", "fd00:96::10"}
    assert any("KUBE-6-CLUSTER-IP" in r for r in six_rules.iptables["nat"]["KUBE-SERVICES"])
    assert run(args("--cleanup"), kernel=kernel, ip6tables=six_rules) == 0
    assert kernel.virtual == {} and not kernel.ipsets
    assert not any(c.startswith("KUBE-") for t in six_rules.iptables.values() for c in t)
    # the flag without an ip6tables door is one clear line, not a traceback
    assert run(args("--source", str(tmp_path), "--hostname", "n", "--once", "--dual-stack"), kernel=kernel) == 1
    assert "--dual-stack=true needs ip6tables" in capsys.readouterr().err


def test_dry_run_dual_stack_says_which_rules_are_ip6tables(tmp_path, capsys):
    svc = service("web", "fd00:96::10")
    write(tmp_path / "a.yaml", svc)
    assert run(args("--source", str(tmp_path), "--hostname", "n", "--dry-run", "--once", "--dual-stack")) == 0
    out = capsys.readouterr().out
    assert "dry-run: add_address kube-ipvs0 fd00:96::10" in out
    assert "dry-run ip6tables: restore_iptables" in out and "KUBE-6-CLUSTER-IP" in out
    # IPv6 virtual servers bracketed, as ipvsadm writes them
    assert "dry-run: add_virtual_server tcp:[fd00:96::10]:80 scheduler=rr" in out


@pytest.mark.parametrize("choice, node_ips, ipv6, mode, expected", [
    ("auto", ["192.168.1.10", "fd00:1::10"], True, "ipvs", True),       # node IPs of both families
    ("auto", ["192.168.1.10"], True, "ipvs", False),                    # single-stack node: unchanged
    ("auto", ["fd00:1::10", "192.168.1.10"], False, "ipvs", False),     # no ip6tables / no IPv6 in the kernel
    ("auto", [], True, "ipvs", False),                                  # IPVS without --node-ip: IPv4, as before
    ("auto", [], True, "nftables", True),                               # nftables without --node-ip: both, as before
    ("auto", ["192.168.1.10"], True, "nftables", False),
    ("true", ["192.168.1.10"], False, "ipvs", True),                    # as given (and refused later without ip6tables)
    ("false", ["192.168.1.10", "fd00:1::10"], True, "nftables", False),
])
def test_dual_stack_auto_decides_from_the_node(choice, node_ips, ipv6, mode, expected):
    assert wants_dual_stack(choice, node_ips, ipv6, mode) is expected


def test_dual_stack_flag_forms_and_node_ip_lists():
    assert args().dual_stack == "auto"
    assert args("--dual-stack").dual_stack == "true"
    assert args("--dual-stack=false").dual_stack == "false"
    # the downward API's status.hostIPs is a comma-separated list
    a = args("--node-ip", "192.168.1.10,FD00:1::10", "--node-ip", "10.0.0.1")
    assert a.node_ip == ["192.168.1.10", "fd00:1::10", "10.0.0.1"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--node-ip", "192.168.1.10,nope"])


def test_auto_serves_both_families_when_the_node_ips_have_both(tmp_path):
    svc = service("web", "10.96.0.10")
    svc["spec"]["clusterIPs"] = ["10.96.0.10", "fd00:96::10"]
    write(tmp_path / "a.yaml", svc)
    base = ("--source", str(tmp_path), "--hostname", "n", "--once")
    kernel = FakeKernel()
    assert run(args(*base, "--node-ip", "192.168.1.10,fd00:1::10"), kernel=kernel, ip6tables=FakeKernel().firewall) == 0
    assert {k[1] for k in kernel.virtual} == {"10.96.0.10", "fd00:96::10"}
    kernel = FakeKernel()
    assert run(args(*base, "--node-ip", "192.168.1.10"), kernel=kernel, ip6tables=FakeKernel().firewall) == 0
    assert {k[1] for k in kernel.virtual} == {"10.96.0.10"}  # an IPv4 node stays single-stack


def test_virtual_and_real_servers_print_ipv6_in_brackets():
    from platformd.nodeproxy.kernel import RealServer, VirtualServer
    assert str(VirtualServer("TCP", "fd00::1", 80)) == "tcp:[fd00::1]:80"
    assert str(RealServer("fd00:244::5", 8080)) == "[fd00:244::5]:8080"
    assert str(VirtualServer("UDP", "10.96.0.10", 53)) == "udp:10.96.0.10:53"
