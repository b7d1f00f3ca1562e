"""The model: validated on construction, canonically ordered, comparable."""

from __future__ import annotations

import dataclasses

import pytest

from platformd.ingress.model import (
    AccessControl,
    AffinityMode,
    Backend,
    Certificate,
    Configuration,
    Cors,
    Endpoint,
    GlobalSettings,
    LoadBalance,
    Location,
    PathMatch,
    RateLimit,
    Redirect,
    Server,
    SessionAffinity,
    TrafficShapingPolicy,
)
from platformd.ingress.validate import ValidationError

CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"


def test_objects_are_frozen():
    backend = Backend("svc")
    with pytest.raises(dataclasses.FrozenInstanceError):
        backend.name = "other"  # type: ignore[misc]


def test_order_of_input_does_not_matter():
    e1, e2 = Endpoint("10.0.0.2", 80), Endpoint("10.0.0.1", 8080)
    loc_a = Location("/a", backend="svc")
    loc_b = Location("/bb", backend="svc")
    loc_r = Location("/r.*", match=PathMatch.REGEX, backend="svc")
    one = Configuration(
        servers=(Server("b.com", locations=(loc_a, loc_b, loc_r)), Server("a.com", aliases=("y.com", "x.com"))),
        backends=(Backend("z", endpoints=(e1, e2)), Backend("a", alternative_backends=("c2", "c1"))),
    )
    two = Configuration(
        servers=(Server("a.com", aliases=("x.com", "y.com")), Server("b.com", locations=(loc_r, loc_b, loc_a))),
        backends=(Backend("a", alternative_backends=("c1", "c2")), Backend("z", endpoints=(e2, e1, e2))),
    )
    assert one == two
    assert hash(one) == hash(two)
    assert [s.hostname for s in one.servers] == ["a.com", "b.com"]
    assert one.backend("z").endpoints == (Endpoint("10.0.0.1", 8080), Endpoint("10.0.0.2", 80))
    # regex locations last, longer first: nginx tries regexes in order
    assert [loc.path for loc in one.servers[1].locations] == ["/bb", "/a", "/r.*"]


def test_server_normalises_names():
    server = Server("Example.COM", aliases=("WWW.example.com", "example.com"))
    assert server.hostname == "example.com"
    assert server.aliases == ("www.example.com",)
    assert server.names == ("example.com", "www.example.com")


def test_errors_name_the_field():
    with pytest.raises(ValidationError) as err:
        Server("example.com", locations=(Location("/a;b", backend="svc"),))
    assert err.value.field == "location['/a;b'].path"
    with pytest.raises(ValidationError) as err:
        Server("ok.com", aliases=("bad name",))
    assert err.value.field == "server[ok.com].aliases"
    with pytest.raises(ValidationError) as err:
        Location("/x", backend="svc", rewrite_target="/$host")
    assert err.value.field.endswith("rewrite_target")
    with pytest.raises(ValidationError, match="traffic_shaping_policy.header"):
        TrafficShapingPolicy(header="X-Canary\r\nSet-Cookie: x")


@pytest.mark.parametrize(
    "make",
    [
        lambda: Location("/", backend='svc"; }'),
        lambda: Location("/x", backend="svc", redirect=Redirect("https://a.com/;rm")),
        lambda: Location("/x", backend="svc", access=AccessControl(allow=("10.0.0.0/8 ; allow all",))),
        lambda: Location("/x", backend="svc", cors=Cors(allow_origins=("https://a.com\n",))),
        lambda: Location("/x{", match=PathMatch.REGEX, backend="svc"),
        lambda: Location("/x", match="glob", backend="svc"),
        lambda: Location("/x"),  # neither backend nor redirect
        lambda: Backend("svc", upstream_hash_by="$request_uri; }"),
        lambda: Backend("svc", load_balance="random"),
        lambda: Backend("svc", session_affinity=SessionAffinity(cookie_name="a b")),
        lambda: Endpoint("not-an-ip", 80),
        lambda: Endpoint("10.0.0.1", 0),
        lambda: TrafficShapingPolicy(weight=101),
        lambda: Certificate("ns/c", "not a pem", KEY),
        lambda: GlobalSettings(body_size="1m;"),
        lambda: RateLimit(rps=-1),
        lambda: Redirect("/x", code=200),
    ],
)
def test_hostile_or_invalid_values_are_rejected(make):
    with pytest.raises(ValidationError):
        make()


def test_duplicate_paths_and_names_are_rejected():
    with pytest.raises(ValidationError, match="duplicate prefix path"):
        Server("a.com", locations=(Location("/x", backend="s"), Location("/x/", backend="t")))
    # Exact and Prefix of the same path may coexist (Exact wins).
    Server("a.com", locations=(Location("/x", backend="s"), Location("/x", match=PathMatch.EXACT, backend="t")))
    with pytest.raises(ValidationError, match="already served"):
        Configuration(servers=(Server("a.com"), Server("b.com", aliases=("a.com",))))
    with pytest.raises(ValidationError, match="share this name"):
        Configuration(backends=(Backend("s"), Backend("s", endpoints=(Endpoint("10.0.0.1", 80),))))
    # identical duplicates collapse
    assert Configuration(backends=(Backend("s"), Backend("s"))).backends == (Backend("s"),)


def test_enums_accept_their_values():
    backend = Backend("s", load_balance="ewma", session_affinity=SessionAffinity(mode="persistent"))
    assert backend.load_balance is LoadBalance.EWMA
    assert backend.session_affinity.mode is AffinityMode.PERSISTENT


def test_certificate_keeps_pem_out_of_repr():
    cert = Certificate("ns/tls", CERT, KEY, hostnames=("B.com", "a.com"))
    assert cert.hostnames == ("a.com", "b.com")
    assert "PRIVATE" not in repr(cert)
