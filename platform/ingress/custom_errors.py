"""``custom-http-errors``: answers of the listed status codes come from an
error backend, with ingress-nginx's headers.

As ingress-nginx does it: the route's lane intercepts the listed codes
(``proxy_intercept_errors on`` + ``error_page <codes> = @platform_custom_error``,
directives without variables, so a generated lane: ``lanes.py``), and the
fixed location ``@platform_custom_error`` (templates/nginx.conf.j2,
lua/custom_errors.lua) proxies the request to the error backend with
``X-Code``, ``X-Format``, ``X-Original-URI``, ``X-Namespace``,
``X-Ingress-Name``, ``X-Service-Name``, ``X-Service-Port`` and
``X-Request-ID``; the client gets the error backend's answer. Codes not
listed pass through untouched.

The error backend is the Ingress's ``default-backend`` Service, else the
controller's ``--default-backend-service``; with neither, the annotation
cannot be honoured and the Ingress gets a ``CustomErrorsWithoutBackend``
problem (it is served without custom error pages: nothing it protects).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from platformd.ingress import validate as v

__all__ = ["LOCATION", "CustomErrors", "error_code", "lane_pairs", "policy"]

LOCATION = "@platform_custom_error"


def error_code(field: str, text: str) -> int:
    """One status code nginx's error_page takes (300..599)."""
    text = text.strip()
    if not text.isdigit() or len(text) != 3 or not 300 <= int(text) <= 599:
        raise v.ValidationError(field, text, "must be HTTP status codes from 300 to 599")
    return int(text)


@dataclass(frozen=True, slots=True)
class CustomErrors:
    """Which codes go to which error backend, and the route they came from (for the headers)."""

    codes: tuple[int, ...]
    backend: str
    namespace: str
    ingress: str
    service: str
    port: str

    def __post_init__(self) -> None:
        codes = tuple(sorted({error_code("custom_errors.codes", str(c)) for c in self.codes}))
        if not codes:
            raise v.ValidationError("custom_errors.codes", self.codes, "must not be empty")
        object.__setattr__(self, "codes", codes)
        v.backend_name("custom_errors.backend", self.backend)
        for name in ("namespace", "ingress", "service", "port"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or len(value) > 253 or not all(
                    c.isalnum() or c in ".-" for c in value):
                raise v.ValidationError(f"custom_errors.{name}", value, "must be a Kubernetes name")


def lane_pairs(codes: tuple[int, ...]) -> tuple[tuple[str, str], ...]:
    return (("error_page", " ".join(map(str, codes)) + " = " + LOCATION), ("proxy_intercept_errors", "on"))


def error_page_directive(field: str, text: str) -> str:
    """lanes.DIRECTIVES: ``<codes> = @platform_custom_error`` only."""
    codes, sep, target = text.rpartition(" = ")
    if not sep or target != LOCATION or not codes:
        raise v.ValidationError(field, text, f"must be '<codes> = {LOCATION}'")
    return " ".join(str(error_code(field, c)) for c in codes.split(" ")) + " = " + LOCATION


def intercept_directive(field: str, text: str) -> str:
    if text != "on":
        raise v.ValidationError(field, text, "must be on")
    return text


LANE_DIRECTIVES = {"error_page": error_page_directive, "proxy_intercept_errors": intercept_directive}


def policy(errors: CustomErrors) -> dict[str, Any]:
    return {"backend": errors.backend, "namespace": errors.namespace, "ingress": errors.ingress,
            "service": errors.service, "port": errors.port}
