"""The Gateway API features this implementation serves (GatewayClass
``status.supportedFeatures``, Gateway API v1.6 ``pkg/features`` names).

Exactly what the data plane serves whole, no more: a feature whose forms are
only partly lowered (gateway_lowering leaves the rest out) is not listed.
Not listed (yet): redirects (scheme, path, port, 303/307/308: only fixed
redirects are lowered), path rewrites (only some forms are lowered),
header modifiers, mirrors, timeouts, CORS, h2c / WebSocket backends,
listener ports other than 80/443 (GatewayPort8080), listener isolation
for hostname-less listeners, static addresses.
"""

from __future__ import annotations

__all__ = ["SUPPORTED"]

# Sorted, one per line: each helper adds its own.
SUPPORTED: tuple[str, ...] = (
    "GRPCRoute",
    "Gateway",
    "HTTPRoute",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteParentRefPort",
    "HTTPRouteQueryParamMatching",
    "ReferenceGrant",
)
