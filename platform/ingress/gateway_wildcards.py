"""Gateway wildcard host names on the shared ports, matched for one or more labels.

In the shared (Ingress) table the router matches ``*.example.com`` for one
label, as ingress-nginx does for an Ingress host; a Gateway listener's (or
route's) ``*.example.com`` covers one *or more* labels (Gateway API,
``Listener.hostname``). Listener isolation needs the latter: with listeners
``*.example.com`` and ``*.foo.example.com``, ``a.b.example.com`` belongs to
the first and ``a.b.foo.example.com`` to the second.

So the lowering hands these hosts over a second time, as
``Configuration.gateway_wildcards``: the Gateway's own Servers (its
locations only, before any Ingress paths of the same name are joined), and
the routes meta section carries them as "wildcards" ({"*.<domain>": host}).
lua/wildcards.lua looks there only when the exact name and the one-label
wildcard both missed, longest suffix first: a request for a name the table
has (every plain Ingress request) does no more work than before, and an
Ingress wildcard still covers exactly one label.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from platformd.ingress.model import Server

__all__ = ["of", "payload"]


def of(servers: Iterable[Server]) -> tuple[Server, ...]:
    """The wildcard Servers among lowered shared-table ``servers``."""
    return tuple(s for s in servers if s.hostname.startswith("*."))


def payload(servers: tuple[Server, ...], server_entry: Callable[[Server], tuple[dict, dict]]
            ) -> tuple[dict[str, Any], dict[str, dict]]:
    """The meta section's "wildcards" ({name: host entry}) and the policies
    they use; ``server_entry(server)``: routes.py's host entry."""
    hosts: dict[str, Any] = {}
    policies: dict[str, dict] = {}
    for server in servers:
        entry, used = server_entry(server)
        policies.update(used)
        hosts[server.hostname] = entry
    return hosts, policies
