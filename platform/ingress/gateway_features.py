"""The Gateway API features this implementation serves (GatewayClass
``status.supportedFeatures``, Gateway API v1.6 ``pkg/features`` names).

Exactly what the data plane serves whole, no more: a feature whose forms are
only partly lowered (gateway_lowering leaves the rest out) is not listed.
RequestRedirect is served whole (scheme, hostname, port, ReplaceFullPath /
ReplacePrefixMatch, 301/302/303/307/308; lua/redirect.lua), so its features
are. ``GatewayPort8080`` is claimed only when ``--gateway-listener-port``
maps listener port 8080 to a plain-HTTP local port (``supported``).
RequestMirror is served whole: percent / fraction, and several per rule
(one copy each, gateway_filters). URLRewrite paths are served whole
(ReplaceFullPath on any match, ReplacePrefixMatch on PathPrefix as the spec's
table says; a "$" in the value leaves the host out). Not listed (yet): request
header modifiers (Host and the framing headers cannot be set), CORS (experimental channel), h2c / WebSocket backends.
Timeouts are claimed: milliseconds, each attempt bounded by
``backendRequest`` and by the time left of ``request`` (deadline.py; an
answer that has begun streaming is not cut off at the deadline, see
docs/gateway-api.md). ``GatewayHTTPListenerIsolation``: a request
reaches only the most specific listener's routes (gateway_hostnames.isolated),
Gateway wildcards cover more labels in the shared table too (gateway_wildcards).
``GatewayStaticAddresses``: an
address asked for is honoured only whole (gateway_addresses: one usable pool
address, else ``AddressNotUsable``; other types ``UnsupportedAddress``).
"""

from __future__ import annotations

from collections.abc import Container

__all__ = ["SUPPORTED", "supported"]

# Sorted, one per line: each helper adds its own.
SUPPORTED: tuple[str, ...] = (
    "GRPCRoute",
    "Gateway",
    "GatewayHTTPListenerIsolation",
    "GatewayStaticAddresses",
    "HTTPRoute",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteBackendTimeout",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteParentRefPort",
    "HTTPRoutePathRedirect",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestMultipleMirrors",
    "HTTPRouteRequestPercentageMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    "HTTPRouteSchemeRedirect",
    "ReferenceGrant",
)


def supported(plain_listener_ports: Container[int]) -> tuple[str, ...]:
    """``SUPPORTED`` plus ``GatewayPort8080`` when listener port 8080 is
    among ``plain_listener_ports`` (mapped, served without TLS); sorted."""
    if 8080 in plain_listener_ports:
        return tuple(sorted((*SUPPORTED, "GatewayPort8080")))
    return SUPPORTED
