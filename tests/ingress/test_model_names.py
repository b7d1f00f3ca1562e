"""Configuration refuses a name served by two Servers (model._check_names),
with the fast path (only aliases can clash) giving the same verdict and
message as a walk over every name."""

from __future__ import annotations

import random

import pytest

from platformd.ingress.model import BoundHosts, Configuration, Server
from platformd.ingress.validate import ValidationError


def _reference(servers: list[Server]) -> str | None:
    """The first clash in hostname order, as a full walk finds it."""
    names: dict[str, str] = {}
    for server in sorted(servers, key=lambda s: s.hostname):
        for name in server.names:
            if name in names:
                return f"server[{server.hostname}].aliases: already served by server[{names[name]}] (got {name!r})"
            names[name] = server.hostname
    return None


@pytest.mark.parametrize("seed", range(40))
def test_name_clashes_are_refused_exactly_as_a_full_walk_finds_them(seed):
    rng = random.Random(seed)
    pool = [f"h{i}.example" for i in range(200)]
    hosts = rng.sample(pool[:40], 10)
    servers = [Server(h, aliases=tuple(rng.sample(pool, rng.choice((0, 0, 0, 0, 1, 2))))) for h in hosts]
    expected = _reference(servers)
    for make in (lambda: Configuration(servers=tuple(servers)),
                 lambda: BoundHosts(None, 8080, servers=tuple(servers))):
        if expected is None:
            make()
            continue
        with pytest.raises(ValidationError) as err:
            make()
        assert str(err.value) == expected


def test_an_alias_served_twice_is_refused():
    with pytest.raises(ValidationError, match=r"already served by server\[a.com\]"):
        Configuration(servers=(Server("a.com", aliases=("x.com",)), Server("b.com", aliases=("x.com",))))
