"""host_claims: the oldest Ingress decides a host's handshake settings; the table the handshake reads."""

from __future__ import annotations

from types import SimpleNamespace

from platformd.ingress.host_claims import HostClaims, sni_table


def test_the_first_claim_of_a_host_wins_and_a_different_later_one_is_a_conflict():
    claims: HostClaims[str] = HostClaims()
    assert claims.claim("old", ["a.com", "b.com"], "x") == []
    assert claims.claim("same", ["a.com"], "x") == []  # equal settings: no conflict
    assert claims.claim("new", ["b.com", "c.com", "a.com"], "y") == [("b.com", "old"), ("a.com", "old")]
    assert claims.hosts == {"a.com": "x", "b.com": "x", "c.com": "y"}


def test_sni_table_maps_every_name_to_its_settings_key():
    servers = [
        SimpleNamespace(names=("a.com", "www.a.com"), tls=("k1", 1)),
        SimpleNamespace(names=("b.com",), tls=None),
        SimpleNamespace(names=("*.c.com",), tls=("k1", 1)),
        SimpleNamespace(names=("d.com",), tls=("k2", 2)),
    ]
    table = sni_table(servers, lambda s: s.tls, "things", lambda t: t[0], lambda t: {"n": t[1]})
    assert table == {"names": {"a.com": "k1", "www.a.com": "k1", "*.c.com": "k1", "d.com": "k2"},
                     "things": {"k1": {"n": 1}, "k2": {"n": 2}}}
    assert sni_table(servers[1:2], lambda s: s.tls, "things", str, dict) == {}
