"""Gateway API header and mirror filters → the router's header program and mirror.

``RequestHeaderModifier`` and ``ResponseHeaderModifier`` (set, add, remove;
values literal, names case-insensitive) become the same ``headers.Program``
the Ingress annotations make, applied per request by lua/headers.lua: set
replaces every value, add appends one, remove deletes; set, then add, then
remove, as the filter lists them. ``RequestMirror`` becomes a ``Mirror`` to
its backendRef's Service port, reached through the Backend the routes use
for that port (``gateway_lowering.backend_name``: ``ns-svc-port.route``,
the balancer picks an endpoint per copy), with its ``percent`` or
``fraction`` as the share of requests copied.

Several RequestMirror filters in a rule (the CRD allows up to 16 filters)
each send their own copy, with their own share decided per request: the
first is the ``Mirror``, the others its ``also``; the lane says ``mirror``
once per copy (mirror.lane_directives). A GRPCRoute's copy is a gRPC call
(h2c) to the Service, from its own fixed location.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from platformd.ingress import headers as headers_mod
from platformd.ingress.gateway_model import HeaderModifier, RouteAction
from platformd.ingress.mirror import Mirror

__all__ = ["gateway_filters"]


def _program(side: str, modifier: HeaderModifier | None) -> tuple:
    if modifier is None:
        return ()
    return headers_mod.from_modifier(side, set=modifier.set, add=modifier.add, remove=modifier.remove)


def gateway_filters(action: RouteAction, backend_name: Callable[[str, int], str]) -> tuple[tuple, Mirror | None]:
    """(header program, mirror) of a rule's filters. Raises ValidationError for
    a header the data plane refuses (CR/LF, framing headers, Host) or more
    copies than a lane can say (mirror.MAX_COPIES)."""
    program = _program("request", action.request_headers) + _program("response", action.response_headers)
    copies = [Mirror(backend=backend_name(m.service, m.port), numerator=m.numerator, denominator=m.denominator)
              for m in action.mirrors]
    mirror = replace(copies[0], also=tuple(copies[1:])) if copies else None
    return program, mirror
