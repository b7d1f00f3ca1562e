"""Gateway spec.addresses (GatewayStaticAddresses), on plain data: the
conformance scenario (an address of an unsupported type, one that cannot be
used, one that can), and every way an asked-for address cannot be used."""

import pytest

from platformd.ingress.gateway_input import GatewayOptions
from tests.ingress.gateway_objects import gateway, translate
from tests.ingress.test_gateway_listeners import conditions

POOL = GatewayOptions(address_pool=("10.0.0.1", "10.0.0.2", "fd00::1"))


def _ip(value):
    return {"type": "IPAddress", "value": value}


def _status(*objects, options=POOL, key="default/gw"):
    g = translate(*objects, options=options).gateways[key]
    messages = {c.type: c.message for c in g.conditions}
    return conditions(g.conditions), g.addresses, messages


def test_the_conformance_scenario_unsupported_then_unusable_then_served():
    fake, unusable, usable = {"type": "test/fake-invalid-type", "value": "x"}, _ip("192.0.2.9"), _ip("10.0.0.2")
    found, addresses, messages = _status(gateway(addresses=[fake, unusable, usable]))
    assert found["Accepted"] == (False, "UnsupportedAddress") and addresses == ()
    assert "test/fake-invalid-type" in messages["Accepted"]

    found, addresses, messages = _status(gateway(addresses=[unusable, usable]))
    assert found["Accepted"] == (True, "Accepted")
    assert found["Programmed"] == (False, "AddressNotUsable") and addresses == ()  # never part of what it asked
    assert messages["Programmed"] == "requested address 192.0.2.9 is not in --gateway-address-pool"

    found, addresses, _ = _status(gateway(addresses=[usable]))
    assert found["Accepted"] == (True, "Accepted") and found["Programmed"] == (True, "Programmed")
    assert addresses == (("IPAddress", "10.0.0.2"),)


@pytest.mark.parametrize("asked, why", [
    ([_ip("10.0.0.9")], "10.0.0.9 is not in --gateway-address-pool"),
    ([_ip("not-an-ip")], "'not-an-ip' is not an IP address"),
    ([_ip("10.0.0.1"), _ip("10.0.0.2")], "10.0.0.2 cannot be used besides 10.0.0.1: a Gateway is served on one address"),
    ([_ip("10.0.0.9"), _ip("10.0.0.8")], "10.0.0.9 is not in --gateway-address-pool; address 10.0.0.8 is not in"),
])
def test_an_address_that_cannot_be_used_is_address_not_usable_with_the_reason(asked, why):
    found, addresses, messages = _status(gateway(addresses=asked))
    assert found["Programmed"] == (False, "AddressNotUsable") and addresses == ()
    assert why in messages["Programmed"]


@pytest.mark.parametrize("kind", ["Hostname", "NamedAddress", "example.com/custom"])
def test_other_address_types_are_unsupported(kind):
    found, _, messages = _status(gateway(addresses=[{"type": kind, "value": "v"}]))
    assert found["Accepted"] == (False, "UnsupportedAddress") and repr(kind) in messages["Accepted"]


def test_an_address_in_use_by_an_older_gateway_and_equal_spellings():
    old = gateway("old", created="2026-01-01T00:00:00Z", addresses=[_ip("10.0.0.1")])
    new = gateway("new", created="2026-02-01T00:00:00Z", addresses=[_ip("10.0.0.1")])
    found, _, messages = _status(old, new, key="default/new")
    assert found["Programmed"] == (False, "AddressNotUsable") and "in use by another (older) Gateway" in messages["Programmed"]
    assert _status(old, new, key="default/old")[1] == (("IPAddress", "10.0.0.1"),)
    # One address written twice (IPv6 spellings) is one address.
    found, addresses, _ = _status(gateway(addresses=[_ip("fd00::1"), _ip("fd00:0::1")]))
    assert found["Programmed"] == (True, "Programmed") and addresses == (("IPAddress", "fd00::1"),)


def test_without_a_pool_only_the_published_addresses_can_be_asked_for():
    options = GatewayOptions(publish_addresses=("192.0.2.1",))
    found, addresses, _ = _status(gateway(addresses=[_ip("192.0.2.1")]), options=options)
    assert found["Programmed"] == (True, "Programmed") and addresses == (("IPAddress", "192.0.2.1"),)
    found, _, messages = _status(gateway(addresses=[_ip("192.0.2.7")]), options=options)
    assert found["Programmed"] == (False, "AddressNotUsable") and "192.0.2.7" in messages["Programmed"]
