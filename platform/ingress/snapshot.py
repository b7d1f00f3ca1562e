"""The read-only input of the translation: everything ``translate.build`` reads.

The controller loop fills a ``Snapshot`` from its informer stores and hands it
over whole; the translator never talks to the API. Objects are the plain
parsed JSON the API returns (see docs/architecture.md) and are never mutated
by anyone holding a snapshot.

Keys follow the store convention ``namespace/name``; ``endpoint_slices`` is
keyed by the owning Service (the ``kubernetes.io/service-name`` label), which is
what ``store.index_endpointslice_by_service`` yields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from platformd.common.store import key_of  # the one key function; re-exported for the translator

__all__ = ["Issue", "Snapshot", "key_of"]


@dataclass(frozen=True)
class Snapshot:
    """One consistent view of the objects the ingress translation depends on.

    Order of ``ingresses`` and ``ingress_classes`` carries no meaning: the
    translation sorts what it needs, so equal contents give equal results.
    """

    ingresses: tuple[dict, ...] = ()
    ingress_classes: tuple[dict, ...] = ()
    services: Mapping[str, dict] = field(default_factory=dict)  # "ns/name" -> Service
    endpoint_slices: Mapping[str, tuple[dict, ...]] = field(default_factory=dict)  # "ns/service" -> slices
    secrets: Mapping[str, dict] = field(default_factory=dict)  # "ns/name" -> Secret
    configmap: dict | None = None  # the --configmap ConfigMap, if any
    configmaps: Mapping[str, dict] = field(default_factory=dict)  # "ns/name" -> ConfigMap (auth-proxy-set-headers)

    def __post_init__(self) -> None:
        # Read-only views, so a holder cannot change what another one sees.
        object.__setattr__(self, "ingresses", tuple(self.ingresses))
        object.__setattr__(self, "ingress_classes", tuple(self.ingress_classes))
        for name in ("services", "endpoint_slices", "secrets"):
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, MappingProxyType(dict(value)))


@dataclass(frozen=True)
class Issue:
    """Something wrong with one input object, before the translator attaches
    it to that object as a ``translate.Problem``. ``reason`` is a CamelCase
    Event reason; ``message`` is one human sentence naming the bad value."""

    reason: str
    message: str
