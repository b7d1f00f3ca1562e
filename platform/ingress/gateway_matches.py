"""A route entry's matches and backends, as the router's per-request choice.

``gateway_lowering`` lowers each ``RouteEntry`` to a ``Location``; this
module gives the two parts the router chooses per request
(``route_choice``): the ``Conditions`` of a match beyond its path (header,
query parameter and method matches; all must hold), and the backends of a
rule: one backend (the plain case, served like an Ingress path) or a
weighted ``split`` in which an invalid backendRef keeps its weight and that
share is answered with 500 (Gateway API: "requests that would have been
sent to an invalid backend MUST receive a 500"). Weight 0 gets no requests;
a rule with no backend that can take any (none, all weight 0) answers 500.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from platformd.ingress.gateway_model import HeaderMatch, WeightedBackend
from platformd.ingress.route_choice import Conditions, ValueMatch

__all__ = ["ANSWER_500", "backends", "conditions"]

# The split of a rule that answers 500 to every request.
ANSWER_500: tuple[tuple[str | None, int], ...] = ((None, 1),)


def _values(matches: Iterable[HeaderMatch]) -> tuple[ValueMatch, ...]:
    return tuple(ValueMatch(m.name, m.value, m.regex) for m in matches)


def conditions(headers: Iterable[HeaderMatch], query: Iterable[HeaderMatch], method: str | None) -> Conditions | None:
    """The conditions of a match besides its path; None when it has none."""
    headers, query = _values(headers), _values(query)
    if not (headers or query or method):
        return None
    return Conditions(headers=headers, query=query, method=method)


def backends(weighted: Iterable[WeightedBackend], name: Callable[[str, int], str]
             ) -> tuple[str | None, tuple[tuple[str | None, int], ...], tuple[tuple[str, int], ...]]:
    """(backend, split, targets) of a rule: ``backend`` set when one valid
    backend takes every request, else ``split``; ``targets``: the valid
    (service, port)s that take requests. ``name(service, port)`` names a Backend."""
    taking = [b for b in weighted if b.weight > 0]
    if not taking:
        return None, ANSWER_500, ()
    targets = tuple(sorted({(b.service, b.port) for b in taking if b.service is not None}))
    if len(taking) == 1 and taking[0].service is not None:
        return name(taking[0].service, taking[0].port), (), targets
    split = tuple((name(b.service, b.port) if b.service is not None else None, b.weight) for b in taking)
    return None, split, targets
