"""Service + EndpointSlices → the endpoints of one backend (pure).

Rules (Kubernetes API reference for Service and EndpointSlice):

* The Ingress names a Service port by number (``port.number`` = the Service
  port's ``port``) or by name (``port.name`` = the Service port's ``name``).
* The target port comes from the EndpointSlices, never from ``targetPort``
  (a named targetPort can differ per pod): a slice port serves our Service
  port when its ``name`` equals the Service port's name (both may be empty)
  and its protocol is TCP. A slice without such a port contributes nothing.
* Endpoints are the ready addresses of all slices of the Service
  (``conditions.ready`` true or unset). When there are none, the ones that are
  serving while terminating (``serving: true, terminating: true``) are used,
  so a rolling restart drains instead of failing. Only the first address of
  an endpoint is used (they are fungible, says the API), FQDN slices are
  skipped (as is an address that is not an IP, or a port that is not a
  port number), and duplicates across slices collapse (the model dedupes).
* ``service-upstream``: the ClusterIP and Service port are the one endpoint
  (kube-proxy balances); a headless Service falls back to the slices.
* ``ExternalName``: the model's ``Endpoint`` holds an IP, so an external name
  that is an IP literal becomes one endpoint (on the Service port) and a DNS
  name is refused with an ``Issue`` until the model can carry DNS-name
  endpoints (resolved by Lua). An address EndpointSlice validation would
  refuse (``special_address``: unspecified, loopback, link-local unicast or
  multicast, also as IPv4-mapped IPv6) is refused: ``externalName:
  127.0.0.1`` let any namespace publish the controller's loopback-only
  ``/status`` and ``/metrics``, and 169.254.169.254 the cloud metadata
  service. So is one of ``local_addresses`` (this network namespace's own
  addresses, ``hostaddrs.read()``: the pod's, or the node's with
  hostNetwork), which reach the controller's ports just the same. Whoever
  resolves a DNS name later must apply the same checks to each resolved
  address. ``external_name=False`` (``--disable-svc-external-name``)
  refuses every ExternalName Service.

A missing Service or port is an ``Issue`` and no endpoints: the backend still
exists, so its locations answer 503 instead of disappearing.
"""

from __future__ import annotations


import ipaddress
from dataclasses import dataclass

from platformd.ingress import validate as v
from platformd.ingress.model import Endpoint
from platformd.ingress.snapshot import Issue

__all__ = ["Resolved", "resolve", "service_port", "special_address"]


@dataclass(frozen=True)
class Resolved:
    endpoints: tuple[Endpoint, ...] = ()
    issues: tuple[Issue, ...] = ()


def service_port(service: dict, port: int | str) -> dict | None:
    """The Service's port entry the Ingress means (by number or by name)."""
    for entry in (service.get("spec") or {}).get("ports") or ():
        if isinstance(port, int) and not isinstance(port, bool):
            if entry.get("port") == port:
                return entry
        elif entry.get("name") == port:
            return entry
    return None


def _is_ip(text: object) -> bool:
    return v.canonical_ip(str(text)) is not None


_LINK_LOCAL_MULTICAST = (ipaddress.ip_network("224.0.0.0/24"), ipaddress.ip_network("ff02::/16"))


def special_address(text: str) -> str | None:
    """Why ``text`` (an IP address) may not be a backend, or None.

    The addresses Kubernetes' EndpointSlice validation refuses
    (``ValidateNonSpecialIP``): unspecified, loopback, link-local unicast
    and link-local multicast; an IPv4-mapped IPv6 address counts as its IPv4.
    """
    ip = ipaddress.ip_address(text)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if any(ip in net for net in _LINK_LOCAL_MULTICAST if net.version == ip.version):
        return "a link-local multicast address"
    return None


def _slice_endpoints(slices: tuple[dict, ...], port_name: str) -> tuple[list[Endpoint], list[Endpoint]]:
    """(ready, serving-and-terminating) endpoints for the named Service port."""
    ready: list[Endpoint] = []
    terminating: list[Endpoint] = []
    for eps in slices:
        if eps.get("addressType", "IPv4") not in ("IPv4", "IPv6"):
            continue
        target = None
        for p in eps.get("ports") or ():
            if (p.get("name") or "") == port_name and (p.get("protocol") or "TCP") == "TCP" and p.get("port"):
                target = p["port"]
                break
        if target is None:
            continue
        for endpoint in eps.get("endpoints") or ():
            conditions = endpoint.get("conditions") or {}
            state = conditions.get("ready")
            if state is None or state is True:
                into = ready
            elif conditions.get("serving") is True and conditions.get("terminating") is True:
                into = terminating
            else:
                continue
            addresses = endpoint.get("addresses")
            if not addresses:
                continue
            try:
                # Endpoint checks the address (an IP, canonical form) and the
                # port: one check per endpoint, not a test and then a check.
                into.append(Endpoint(str(addresses[0]), target))
            except v.ValidationError:
                continue  # not an IP address (or a bad port): skipped
    return ready, terminating


def resolve(
    key: str,
    service: dict | None,
    slices: tuple[dict, ...],
    port: int | str,
    *,
    service_upstream: bool = False,
    external_name: bool = True,
    local_addresses: frozenset[str] = frozenset(),
) -> Resolved:
    """Endpoints of Service ``key`` ("ns/name") port ``port`` (see module docstring)."""
    if service is None:
        return Resolved(issues=(Issue("ServiceNotFound", f"Service {key!r} not found; its paths answer 503"),))
    spec = service.get("spec") or {}
    entry = service_port(service, port)
    if spec.get("type") == "ExternalName":
        if not external_name:
            return Resolved(issues=(Issue(
                "ExternalNameDisabled",
                f"Service {key!r} is ExternalName, and ExternalName Services are disabled "
                "(--disable-svc-external-name); its paths answer 503"),))
        return _external_name(key, spec, port, entry, local_addresses)
    if entry is None:
        return Resolved(issues=(Issue("ServicePortNotFound", f"Service {key!r} has no port {port!r}; its paths answer 503"),))
    issues: list[Issue] = []
    if service_upstream:
        cluster_ip = spec.get("clusterIP")
        if cluster_ip and cluster_ip != "None" and _is_ip(cluster_ip):
            return Resolved(endpoints=(Endpoint(cluster_ip, int(entry["port"])),))
        issues.append(Issue(
            "ServiceUpstreamWithoutClusterIP",
            f"service-upstream is set but Service {key!r} has no cluster IP; using its endpoints",
        ))
    ready, terminating = _slice_endpoints(slices, entry.get("name") or "")
    return Resolved(endpoints=tuple(ready or terminating), issues=tuple(issues))


def _external_name(key: str, spec: dict, port: int | str, entry: dict | None,
                   local_addresses: frozenset[str]) -> Resolved:
    name = spec.get("externalName", "")
    if entry is not None:
        number = entry.get("port")
    elif isinstance(port, int):
        number = port  # ExternalName Services need not list ports
    else:
        number = None
    if number is None:
        return Resolved(issues=(Issue("ServicePortNotFound", f"ExternalName Service {key!r} has no port {port!r}"),))
    if _is_ip(name):
        why = special_address(str(name))
        if why is None and v.canonical_ip(str(name)) in local_addresses:
            why = "one of this controller's own addresses"
        if why is not None:
            return Resolved(issues=(Issue(
                "ExternalNameRefused",
                f"Service {key!r} is ExternalName {name!r}, {why}, which may not be a backend; its paths answer 503"),))
        return Resolved(endpoints=(Endpoint(str(name), int(number)),))
    return Resolved(issues=(Issue(
        "ExternalNameUnsupported",
        f"Service {key!r} is ExternalName {name!r}; DNS names are not supported as endpoints yet, its paths answer 503",
    ),))
