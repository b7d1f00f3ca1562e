"""Which Secrets an Ingress depends on: ``spec.tls`` and the annotations
that name one (``auth-tls-secret``, ``proxy-ssl-secret``).

The controller indexes Ingresses by it, so that a change of such a Secret
(a CA bundle rotated, a missing Secret created) translates again, and the
admission webhook's partial snapshot includes them (it would otherwise
report a present CA Secret as missing). Only Secrets of the Ingress's own
namespace count: the annotations refuse any other (client_tls, backend_tls).
"""

from __future__ import annotations

from collections.abc import Mapping

from platformd.common.store import index_ingress_by_secret

__all__ = ["SECRET_ANNOTATIONS", "index_ingress_by_any_secret"]

PREFIX = "nginx.ingress.kubernetes.io/"
# Annotations whose value is "<namespace>/<name>" or "<name>" of a Secret.
SECRET_ANNOTATIONS = ("auth-tls-secret", "proxy-ssl-secret")


def index_ingress_by_any_secret(obj: Mapping) -> list[str]:
    """``ns/name`` of every Secret ``obj`` names (``spec.tls`` and annotations)."""
    keys = set(index_ingress_by_secret(obj))
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace", "")
    annotations = meta.get("annotations") or {}
    for name in SECRET_ANNOTATIONS:
        value = annotations.get(PREFIX + name)
        if not isinstance(value, str) or not value.strip():
            continue
        ref_namespace, _, secret = value.strip().rpartition("/")
        if ref_namespace in ("", namespace) and secret:
            keys.add(f"{namespace}/{secret}")
    return sorted(keys)
