"""GatewayClasses: which are ours, and whether we accept them.

A GatewayClass is ours when ``spec.controllerName`` equals
``--gateway-controller-name``. We accept it unless it has a
``parametersRef`` (we take no parameters: ``InvalidParameters``) or the
installed CRDs are of a bundle version we do not implement
(``UnsupportedVersion``; only checked when the version is known).
"""

from __future__ import annotations

from collections.abc import Mapping

from platformd.ingress import gateway_features
from platformd.ingress import gateway_fields as f
from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_input import SUPPORTED_VERSION

__all__ = ["class_status", "is_ours"]


def is_ours(gateway_class: Mapping, controller_name: str) -> bool:
    return f.mapping(gateway_class.get("spec")).get("controllerName") == controller_name


def _same_minor(a: str, b: str) -> bool:
    return a.lstrip("v").split(".")[:2] == b.lstrip("v").split(".")[:2]


def class_status(gateway_class: Mapping, crd_version: str | None,
                 features: tuple[str, ...] = gateway_features.SUPPORTED) -> st.ClassStatus:
    """``features``: the supportedFeatures an accepted class lists (gateway_features.supported)."""
    generation = f.integer(f.mapping(gateway_class.get("metadata")).get("generation"))
    if crd_version and not _same_minor(crd_version, SUPPORTED_VERSION):
        message = f"Gateway API CRDs {crd_version} are installed; this controller implements {SUPPORTED_VERSION}"
        return st.ClassStatus(generation, (
            st.Condition(st.ACCEPTED, False, st.R_UNSUPPORTED_VERSION, message),
            st.Condition(st.SUPPORTED_VERSION, False, st.R_UNSUPPORTED_VERSION, message)))
    version = st.Condition(st.SUPPORTED_VERSION, True, st.R_SUPPORTED_VERSION,
                           f"Gateway API {crd_version or SUPPORTED_VERSION} is supported")
    if f.mapping(gateway_class.get("spec")).get("parametersRef"):
        return st.ClassStatus(generation, (
            st.Condition(st.ACCEPTED, False, st.R_INVALID_PARAMETERS,
                         "parametersRef is not supported: this controller takes no parameters"), version))
    return st.ClassStatus(generation, (st.Condition(st.ACCEPTED, True, st.R_ACCEPTED, "GatewayClass is accepted"),
                                       version), features)
