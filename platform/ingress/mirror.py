"""Request mirroring: a copy of each request (or of a share of them) sent
to another target whose answer is ignored.

Sources: the Ingress annotations ``mirror-target``, ``mirror-request-body``
and ``mirror-host`` (ingress-nginx's names and defaults), and the Gateway
API filter ``RequestMirror`` (``backendRef``, ``percent`` / ``fraction``).

How the data plane does it (docs/architecture.md, "Mirroring"): nginx's
``mirror`` directive takes a fixed URI and ``mirror_request_body`` takes no
variable, so a mirrored route is proxied by a directive lane (lanes.py)
carrying ``mirror /_platform_mirror`` and ``mirror_request_body on|off``:
at most two lanes per base lane, whatever the number of mirrored routes and
targets. The one fixed internal location ``/_platform_mirror`` proxies the
copy to where the route's policy says, through variables set per request
by lua/mirror.lua: the target's scheme, its upstream (an IP literal with
port, or ``upstream_mirror``, whose balancer picks an endpoint of a Backend
by name: how a Gateway ``backendRef`` Service is reached, under the
``ns-svc-port.route`` Backend name of the routes), the URI and the Host
header. The share (``percent``) is decided per request in Lua: a request
not chosen makes the mirror subrequest return at once, before any
connection is opened.

Targets are validated: scheme http or https, host an IP literal or a
Service's cluster name ``<service>.<namespace>.svc[.cluster.local]`` (reached
through the Backend of that Service port, ``ns.svc.port``, which the
translator creates; any other DNS name would need a resolver in nginx.conf),
optional port (the Service port for a Service), and a path of URL characters in which only
``$request_uri`` may appear as a variable (as ingress-nginx allows it).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from platformd.ingress import headers as headers_mod
from platformd.ingress import validate as v

__all__ = ["LOCATION", "MAX_COPIES", "Mirror", "lane_directives", "location_uri", "parse_target", "payload"]

# The fixed internal locations of templates/nginx.conf.j2 the copies go
# through: LOCATION (+ "_nobody" / "_grpc") for the first copy, that + "/<i>"
# for copy i >= 2 (one `^~` prefix location per kind: no regex location,
# which every request would pay for). The CRD allows 16 filters per rule.
LOCATION = "/_platform_mirror"
MAX_COPIES = 16
_PATH = re.compile(r"^/[A-Za-z0-9._~!&()*+,=:@%/?-]*$")
_REQUEST_URI = "$request_uri"


@dataclass(frozen=True, slots=True)
class Mirror:
    """Where copies go. ``address`` ("ip:port", "[v6]:port") or ``backend``
    (a Backend name the balancer serves), exactly one. ``uri``: a
    headers.Value, literal parts and ``Var("request_uri")``; empty sends the
    request's own URI. ``host``: the Host header ("" = the target's
    host for an address, the request's host for a backend)."""

    scheme: str = "http"
    address: str | None = None
    backend: str | None = None
    uri: tuple = ()
    host: str = ""
    request_body: bool = True
    numerator: int = 100
    denominator: int = 100
    # The Service behind ``backend`` when the translator must create that
    # Backend (an Ingress's mirror-target naming a cluster Service): (ns, name, port).
    service: tuple[str, str, int] | None = None
    # Further copies of the same request (Gateway API: a rule may repeat
    # RequestMirror), each with its own target and share; they go with this
    # one's scheme, URI, Host header and body (one set of per-request variables).
    also: tuple["Mirror", ...] = ()

    def __post_init__(self) -> None:
        if self.scheme not in ("http", "https"):
            raise v.ValidationError("mirror.scheme", self.scheme, "must be http or https")
        if (self.address is None) == (self.backend is None):
            raise v.ValidationError("mirror", self.address, "needs exactly one of an address and a backend")
        if self.backend is not None:
            v.backend_name("mirror.backend", self.backend)
        if self.address is not None:
            _address("mirror.address", self.address)
        for part in self.uri:
            if isinstance(part, headers_mod.Var):
                if part.name != "request_uri":
                    raise v.ValidationError("mirror.uri", "$" + part.name, "only $request_uri may be used")
            elif not isinstance(part, str) or not re.fullmatch(r"[A-Za-z0-9._~!&()*+,=:@%/?-]*", part):
                raise v.ValidationError("mirror.uri", part, "must be URL path characters")
        if self.host:
            v.upstream_vhost("mirror.host", self.host)
        if not (0 <= self.numerator <= self.denominator and 0 < self.denominator <= 1_000_000):
            raise v.ValidationError("mirror.fraction", f"{self.numerator}/{self.denominator}",
                                    "must be 0 <= numerator <= denominator, denominator 1-1000000")
        if len(self.also) >= MAX_COPIES:
            raise v.ValidationError("mirror.also", len(self.also) + 1, f"at most {MAX_COPIES} copies of a request")
        for other in self.also:
            if not isinstance(other, Mirror) or other.also:
                raise v.ValidationError("mirror.also", other, "must be Mirrors without further copies")
            if (other.scheme, other.uri, other.host, other.request_body) != (
                    self.scheme, self.uri, self.host, self.request_body):
                raise v.ValidationError("mirror.also", other.backend or other.address,
                                        "copies of one request share scheme, URI, Host and body")

    @property
    def copies(self) -> tuple["Mirror", ...]:
        """Every copy of a request: this one, then ``also``."""
        return (self, *self.also)


def _address(field: str, text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise v.ValidationError(field, text, "must be an IP address with a port")
    v.port(field, int(port))
    try:
        ipaddress.ip_address(host[1:-1] if host.startswith("[") and host.endswith("]") else host)
    except ValueError:
        raise v.ValidationError(field, text, "must be an IP address with a port") from None
    return text


_SERVICE = re.compile(r"([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)\.([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)\.svc(?:\.cluster\.local)?")


def parse_target(field: str, url: str) -> tuple[str, str | tuple[str, str, int], str, tuple]:
    """``mirror-target`` → (scheme, "ip:port" or (namespace, service, port), host header, uri Value).

    ``$request_uri`` may appear in the path (``http://10.0.0.5/$request_uri``
    sends ``/`` + the request's URI, as ingress-nginx does); nothing else with
    ``$``, no user info, no fragment."""
    if not isinstance(url, str) or len(url) > 2048 or any(ord(c) < 0x21 or ord(c) == 0x7f for c in url):
        raise v.ValidationError(field, url, "must be a URL without spaces or control characters")
    if any(c in url for c in "\"'`\\;{}"):
        raise v.ValidationError(field, url, "must not contain quotes, backslashes, ';' or braces")
    if url.replace(_REQUEST_URI, "").find("$") >= 0:
        raise v.ValidationError(field, url, "may use no variable but $request_uri")
    m = re.fullmatch(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#\x00]*)([^#]*)", url.replace(_REQUEST_URI, "\x00"))
    if m is None or m.group(1).lower() not in ("http", "https"):
        raise v.ValidationError(field, url, "must be an http:// or https:// URL")
    scheme, netloc, rest = m.group(1).lower(), m.group(2), m.group(3)
    if "@" in netloc:
        raise v.ValidationError(field, url, "must have no user info")
    hm = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^:\[\]]+)(?::([0-9]{1,5}))?", netloc)
    if hm is None:
        raise v.ValidationError(field, url, "has an invalid host or port")
    host = hm.group(1).strip("[]")
    port = int(hm.group(2)) if hm.group(2) else (443 if scheme == "https" else 80)
    v.port(field, port)
    service = _SERVICE.fullmatch(host.lower())
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        if service is None:
            raise v.ValidationError(field, url, "host must be an IP address or a Service's cluster name "
                                    "(<service>.<namespace>.svc[.cluster.local]): other DNS names would "
                                    "need a resolver in nginx.conf") from None
        ip = None
    if ip is not None:
        address: str | tuple = f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"
    else:
        address = (service.group(3), service.group(1), port)
    uri: list = []
    if rest:
        if not _PATH.fullmatch("/" + rest.replace("\x00", "")):
            raise v.ValidationError(field, url, "path must be URL characters")
        for i, piece in enumerate(rest.split("\x00")):
            if i:
                uri.append(headers_mod.Var("request_uri"))
            if piece:
                uri.append(piece)
        if isinstance(uri[0], str) and not uri[0].startswith("/") or uri[0] == "?":
            uri.insert(0, "/")
    default_port = (scheme == "https" and port == 443) or (scheme == "http" and port == 80)
    host_header = host.lower() if ip is None else str(ip) if ip.version == 4 else f"[{ip}]"
    if not default_port:
        host_header += f":{port}"
    return scheme, address, host_header, tuple(uri)


def lane_directives(mirror: Mirror | None, protocol: str = "HTTP") -> tuple[tuple[str, str], ...]:
    """The directives of the lane proxying a mirrored route (lanes.py) whose
    backend protocol is ``protocol`` (a model.BackendProtocol value): one
    ``mirror`` per copy, so a lane is per (kind, number of copies) and a
    reload happens only when such a pair first appears."""
    if mirror is None:
        return ()
    if protocol == "GRPC":
        # The copy of a gRPC call is a gRPC call (h2c): its own location, and
        # always with the body (a call without its message is no call).
        if not mirror.request_body:
            raise v.ValidationError("mirror.request_body", False, "a gRPC copy needs the request body")
        location, body = LOCATION + "_grpc", "on"
    elif protocol == "GRPCS":
        raise v.ValidationError("mirror", mirror.backend or mirror.address,
                                "mirroring a gRPC route over TLS (GRPCS) is not supported")
    elif mirror.request_body:
        location, body = LOCATION, "on"
    else:
        # Without the body the copy must not announce one (Content-Length of
        # the original): the second location drops it.
        location, body = LOCATION + "_nobody", "off"
    uris = [location] + [f"{location}/{i}" for i in range(2, len(mirror.copies) + 1)]
    return (*(("mirror", uri) for uri in uris), ("mirror_request_body", body))


def location_uri(text: str) -> bool:
    """Whether ``text`` is one of the fixed mirror locations (a copy's index
    at most MAX_COPIES)."""
    m = re.fullmatch(re.escape(LOCATION) + r"(_nobody|_grpc)?(?:/([2-9]|1[0-9]))?", text)
    return m is not None and int(m.group(2) or 1) <= MAX_COPIES


def payload(mirror: Mirror | None) -> dict[str, Any] | None:
    """The policy's "mirror" (lua/mirror.lua); further copies under "also"
    (their own target and share), left out when there are none."""
    if mirror is None:
        return None
    out = _one(mirror)
    if mirror.also:
        out["also"] = [{"address": m.address, "backend": m.backend, "numerator": m.numerator,
                        "denominator": m.denominator} for m in mirror.also]
    return out


def _one(mirror: Mirror) -> dict[str, Any]:
    return {
        "scheme": mirror.scheme,
        "address": mirror.address,
        "backend": mirror.backend,
        "uri": [{"v": p.name} if isinstance(p, headers_mod.Var) else p for p in mirror.uri],
        "host": mirror.host,
        "numerator": mirror.numerator,
        "denominator": mirror.denominator,
    }
