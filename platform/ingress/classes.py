"""Which Ingresses this controller serves (IngressClass semantics).

An Ingress is ours when, in this order of precedence:

1. ``spec.ingressClassName`` is set: it names an IngressClass whose
   ``spec.controller`` is our controller class. A name that matches no
   IngressClass is *not* ours (the class may be created later; then it is).
2. else the legacy ``kubernetes.io/ingress.class`` annotation is set: its value
   equals our ingress class name (``--ingress-class``).
3. else (class-less): one of our IngressClasses carries
   ``ingressclass.kubernetes.io/is-default-class: "true"``, or the controller
   runs with ``--watch-ingress-without-class``.

Ingresses that are not ours are ignored entirely (no routes, no status, no
events). Pure functions on plain API dicts.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["DEFAULT_CLASS_ANNOTATION", "LEGACY_CLASS_ANNOTATION", "is_ours", "our_class_names"]

LEGACY_CLASS_ANNOTATION = "kubernetes.io/ingress.class"
DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"


def our_class_names(ingress_classes: Iterable[dict], controller_class: str) -> frozenset[str]:
    """Names of the IngressClasses whose ``spec.controller`` is ours."""
    return frozenset(
        (c.get("metadata") or {}).get("name", "")
        for c in ingress_classes
        if (c.get("spec") or {}).get("controller") == controller_class
    )


def _has_default_class(ingress_classes: Iterable[dict], controller_class: str) -> bool:
    for c in ingress_classes:
        if (c.get("spec") or {}).get("controller") != controller_class:
            continue
        annotations = (c.get("metadata") or {}).get("annotations") or {}
        if str(annotations.get(DEFAULT_CLASS_ANNOTATION, "")).lower() == "true":
            return True
    return False


def is_ours(ingress: dict, ingress_classes: Iterable[dict], options) -> bool:
    """Whether ``ingress`` belongs to this controller (see module docstring).

    ``options`` is a ``translate.TranslateOptions`` (``controller_class``,
    ``ingress_class``, ``watch_ingress_without_class`` are read).
    """
    classes = tuple(ingress_classes)
    class_name = (ingress.get("spec") or {}).get("ingressClassName")
    if class_name:
        return class_name in our_class_names(classes, options.controller_class)
    annotations = (ingress.get("metadata") or {}).get("annotations") or {}
    legacy = annotations.get(LEGACY_CLASS_ANNOTATION)
    if legacy:
        return legacy == options.ingress_class
    return bool(options.watch_ingress_without_class) or _has_default_class(classes, options.controller_class)
