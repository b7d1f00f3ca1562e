"""#15: ExternalName Services may not point inside the node (EndpointSlice rules)."""

from __future__ import annotations

import pytest

from platformd.ingress import endpoints
from tests.ingress.test_translate_fixtures import ingress, path, reasons, rule, translate


def external(name: str, target: str, port: int = 38281) -> dict:
    return {"kind": "Service", "metadata": {"name": name, "namespace": "default"},
            "spec": {"type": "ExternalName", "externalName": target,
                     "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}}


REFUSED = ["127.0.0.1", "127.1.2.3", "::1", "0.0.0.0", "::", "169.254.169.254", "fe80::1",
           "224.0.0.251", "ff02::1", "::ffff:127.0.0.1", "::ffff:169.254.169.254"]


@pytest.mark.parametrize("target", REFUSED)
def test_special_targets_are_refused(target):
    result = endpoints.resolve("default/x", external("x", target), (), 38281)
    assert result.endpoints == ()
    assert [i.reason for i in result.issues] == ["ExternalNameRefused"]


@pytest.mark.parametrize("target", ["10.0.0.5", "192.0.2.10", "2001:db8::1"])
def test_ordinary_addresses_still_work(target):
    result = endpoints.resolve("default/x", external("x", target), (), 38281)
    assert [e.address for e in result.endpoints] == [target]


def test_the_issue_reproduction_serves_no_loopback_endpoint():
    """externalName 127.0.0.1 port 38281 exposed the loopback-only /status."""
    result = translate(ingress("peek", rules=[rule("peek.example", path("/", "status", 38281))]),
                       external("status", "127.0.0.1"))
    assert "ExternalNameRefused" in reasons(result)
    assert all(e.address != "127.0.0.1" for b in result.configuration.backends for e in b.endpoints)


def test_external_name_can_be_switched_off():
    def objects():  # new objects each time: translations reuse results per object
        return ingress("ext", rules=[rule("ext.example", path("/", "ext", 80))]), external("ext", "10.0.0.5", 80)

    assert [e.address for b in translate(*objects()).configuration.backends for e in b.endpoints] == ["10.0.0.5"]
    off = translate(*objects(), external_name_services=False)
    assert "ExternalNameDisabled" in reasons(off)
    assert all(not b.endpoints for b in off.configuration.backends)


def test_the_flag_is_ingress_nginx_s():
    from platformd.ingress import main

    args = main.build_parser().parse_args(["--disable-svc-external-name"])
    assert main.translate_options(args).external_name_services is False
    assert main.translate_options(main.build_parser().parse_args([])).external_name_services is True


def test_the_controllers_own_addresses_are_refused():
    """The health server binds every address: the pod IP reaches 10254 as well as 127.0.0.1 did."""
    own = frozenset({"10.244.1.7"})
    result = endpoints.resolve("default/x", external("x", "10.244.1.7", 10254), (), 10254, local_addresses=own)
    assert [i.reason for i in result.issues] == ["ExternalNameRefused"]
    assert "own addresses" in result.issues[0].message
    other = endpoints.resolve("default/x", external("x", "10.244.1.8", 10254), (), 10254, local_addresses=own)
    assert [e.address for e in other.endpoints] == ["10.244.1.8"]


def test_local_addresses_are_read_from_proc(tmp_path):
    from platformd.ingress import hostaddrs

    (tmp_path / "fib_trie").write_text(
        "Main:\n  +-- 0.0.0.0/0 3 0 5\n        |-- 10.244.1.7\n           /32 host LOCAL\n"
        "        |-- 10.244.1.0\n           /24 link UNICAST\n")
    (tmp_path / "if_inet6").write_text("fd000000000000000000000000000002 04 40 00 82     eth0\n")
    assert hostaddrs.read(tmp_path) == {"10.244.1.7", "fd00::2"}
    assert hostaddrs.read(tmp_path / "missing") == frozenset()
    assert "127.0.0.1" in hostaddrs.read()  # this machine's own table
