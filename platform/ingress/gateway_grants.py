"""ReferenceGrant: which cross-namespace references are allowed.

A reference from an object in namespace A to an object in namespace B is
allowed only when a ReferenceGrant *in B* lists A's (group, kind, namespace)
in ``from`` and the target's (group, kind, and name if given) in ``to``.
References within one namespace need no grant.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from platformd.ingress import gateway_fields as fields

__all__ = ["Grants", "Ref"]


@dataclass(frozen=True, slots=True)
class Ref:
    group: str
    kind: str
    namespace: str
    name: str = ""


class Grants:
    """An index of ReferenceGrants; built once per translation, read-only after."""

    def __init__(self, grants: Iterable[dict]) -> None:
        # target namespace -> [(from (group, kind, ns) set, to [(group, kind, name or "")])]
        self._by_namespace: dict[str, list[tuple[frozenset, tuple]]] = {}
        for grant in grants:
            if not isinstance(grant, Mapping):
                continue
            namespace = fields.string(fields.mapping(grant.get("metadata")).get("namespace"))
            spec = fields.mapping(grant.get("spec"))
            sources = frozenset((fields.string(s.get("group")), fields.string(s.get("kind")),
                                 fields.string(s.get("namespace"))) for s in fields.items(spec.get("from")))
            targets = tuple((fields.string(t.get("group")), fields.string(t.get("kind")), fields.string(t.get("name")))
                            for t in fields.items(spec.get("to")))
            self._by_namespace.setdefault(namespace, []).append((sources, targets))

    def permits(self, source: Ref, target: Ref) -> bool:
        """Whether ``source`` may refer to ``target`` (same namespace: always)."""
        if source.namespace == target.namespace:
            return True
        key = (source.group, source.kind, source.namespace)
        for sources, targets in self._by_namespace.get(target.namespace, ()):
            if key not in sources:
                continue
            for group, kind, name in targets:
                if group == target.group and kind == target.kind and name in ("", target.name):
                    return True
        return False
