"""Service + EndpointSlices -> what one Service asks of the kernel.

Pure functions over plain parsed JSON. Three stages, each testable alone:

1. :func:`parse_service` / :func:`parse_slice` reduce API objects to the few
   fields the node proxy reads (frozen, comparable: the change trackers use
   equality of these to drop changes that cancel out).
2. :func:`select_endpoints` applies Kubernetes' endpoint rules: ready
   endpoints, else serving-but-terminating ones; ``internalTrafficPolicy:
   Local`` limits ClusterIP traffic, ``externalTrafficPolicy: Local`` limits
   external traffic (node ports, external IPs, load-balancer IPs) to endpoints
   on this node.
3. :func:`service_state` builds the :class:`ServiceState`: virtual servers
   with their real servers, the addresses for the dummy link and the ipset
   members, following kube-proxy's IPVS mode.

Stages 1 and 2 are dual-stack: a Service keeps its cluster, external and
load-balancer IPs of both families, a slice its address family. Stage 3 is
the IPVS mode's and takes the families in :attr:`Options.families`: each
family on its own, as kube-proxy runs one IPVS proxier per family (an IPv4
virtual server gets the IPv4 endpoints, IPv6 members go to the ``KUBE-6-``
sets). The nftables mode builds its rules per family in ``nftrules``. FQDN
slices are ignored.
"""

from __future__ import annotations

import ipaddress
import operator
import socket
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

from platformd.common.store import key_of

from . import ipsets
from .kernel import PROTOCOLS, SCTP, IPSetEntry, RealServer, VirtualServer

#: ``_new(Cls, (every field...))`` builds a named tuple in C, without the
#: Python-level ``__new__`` that ``Cls(...)`` runs (three times faster; no
#: defaults). For the loops below that run once per endpoint: ~50,000 times
#: for 10,000 Services, where each Python call costs ~25 times more under
#: the test VM's emulation than on the host.
_new = tuple.__new__
_ADDRESS = operator.itemgetter(0)  # SliceEndpoint.address, as a C sort key

DEFAULT_AFFINITY_TIMEOUT = 10800  # seconds; Kubernetes' default for ClientIP
SERVICE_PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
TRIGGER_TIME_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time"


@dataclass(frozen=True)
class Options:
    """What translation needs to know about this node and its flags."""

    hostname: str
    node_ips: tuple[str, ...] = ()  # of either family; each family's node ports use its own
    scheduler: str = "rr"
    families: tuple[int, ...] = (4,)  # what the IPVS mode serves: (4,), or (4, 6) dual-stack


# --- stage 1: parsing --------------------------------------------------------


@dataclass(frozen=True)
class ServicePort:
    """One port of a Service, as the node proxy sees it."""

    service: str  # "namespace/name"
    name: str  # port name ("" when unnamed)
    protocol: str
    port: int
    node_port: int = 0
    cluster_ips: tuple[str, ...] = ()
    external_ips: tuple[str, ...] = ()
    load_balancer_ips: tuple[str, ...] = ()
    affinity_timeout: int = 0  # 0: no session affinity
    external_local: bool = False
    internal_local: bool = False
    source_ranges: tuple[str, ...] = ()  # loadBalancerSourceRanges (CIDRs); () allows all
    health_check_node_port: int = 0  # LoadBalancer with externalTrafficPolicy Local


def _is_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True


def _is_ipv4(value: object) -> bool:
    """A dotted quad, strictly (no leading zeros, exactly four parts).

    ``inet_pton`` accepts exactly what ``ipaddress.ip_address`` accepts as
    IPv4 but in C: ~40 times faster, and every endpoint address passes here.
    """
    if not isinstance(value, str):
        return False
    try:
        socket.inet_pton(socket.AF_INET, value)
    except (OSError, ValueError):  # ValueError: an embedded NUL
        return False
    return True


def _is_ipv6(value: object) -> bool:
    if not isinstance(value, str) or ":" not in value:
        return False
    try:
        socket.inet_pton(socket.AF_INET6, value)
    except (OSError, ValueError):
        return False
    return True


def is_ip(value: object) -> bool:
    """An IPv4 or IPv6 address, strictly."""
    return _is_ipv4(value) or _is_ipv6(value)


def canonical(address: str) -> str:
    """IPv6 addresses in their one canonical text (RFC 5952, as the kernel
    and nft print them); IPv4 ones as they are (``inet_pton`` accepts only
    the canonical dotted quad)."""
    return str(ipaddress.IPv6Address(address)) if ":" in address else address


def family_of(address: str) -> int:
    """4 or 6 (for addresses that passed :func:`is_ip`)."""
    return 6 if ":" in address else 4


def parse_service(svc: dict | None) -> tuple[ServicePort, ...]:
    """The ports of ``svc`` the node proxy serves; () for anything it ignores
    (None, ExternalName, headless, another proxy's Service, no cluster IP).
    Addresses of both families are kept, in the order the API gives them
    (``clusterIPs[0]`` is the primary family)."""
    if not svc:
        return ()
    meta = svc.get("metadata") or {}
    spec = svc.get("spec") or {}
    if (meta.get("labels") or {}).get(SERVICE_PROXY_NAME_LABEL):
        return ()
    svc_type = spec.get("type") or "ClusterIP"
    if svc_type == "ExternalName":
        return ()
    ips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    cluster_ips = tuple(canonical(ip) for ip in ips if is_ip(ip))
    if not cluster_ips:
        return ()  # headless ("None")
    external_ips = tuple(sorted({canonical(ip) for ip in spec.get("externalIPs") or () if is_ip(ip)}))
    lb_ips: tuple[str, ...] = ()
    if svc_type == "LoadBalancer":
        ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or ()
        # ipMode Proxy means the load balancer delivers to the node, not to the
        # IP: kube-proxy does not bind such IPs (KEP-1860).
        lb_ips = tuple(sorted({canonical(i["ip"]) for i in ingress
                               if is_ip(i.get("ip")) and i.get("ipMode", "VIP") != "Proxy"}))
    source_ranges = tuple(sorted({r.strip() for r in spec.get("loadBalancerSourceRanges") or ()
                                  if isinstance(r, str) and _is_cidr(r.strip())}))
    affinity = 0
    if spec.get("sessionAffinity") == "ClientIP":
        cfg = ((spec.get("sessionAffinityConfig") or {}).get("clientIP") or {})
        affinity = int(cfg.get("timeoutSeconds") or DEFAULT_AFFINITY_TIMEOUT)
    externally_reachable = svc_type in ("NodePort", "LoadBalancer") or bool(external_ips)
    external_local = externally_reachable and spec.get("externalTrafficPolicy") == "Local"
    internal_local = spec.get("internalTrafficPolicy") == "Local"
    health_port = int(spec.get("healthCheckNodePort") or 0) if svc_type == "LoadBalancer" and external_local else 0
    key = key_of(svc)
    result = []
    for p in spec.get("ports") or ():
        protocol = p.get("protocol") or "TCP"
        if protocol not in PROTOCOLS or not p.get("port"):
            continue
        node_port = int(p.get("nodePort") or 0) if svc_type in ("NodePort", "LoadBalancer") else 0
        result.append(ServicePort(
            service=key, name=p.get("name") or "", protocol=protocol, port=int(p["port"]),
            node_port=node_port, cluster_ips=cluster_ips, external_ips=external_ips,
            load_balancer_ips=lb_ips, affinity_timeout=affinity,
            external_local=external_local, internal_local=internal_local,
            source_ranges=source_ranges if lb_ips else (),
            health_check_node_port=health_port if node_port or lb_ips else 0))
    return tuple(sorted(result, key=lambda sp: (sp.name, sp.protocol, sp.port)))


class SliceEndpoint(NamedTuple):
    """One address of a slice endpoint. A named tuple, like :class:`Endpoint`:
    one per endpoint, made by the ten thousand (see ``kernel.py``'s values)."""

    address: str
    ready: bool
    serving: bool
    terminating: bool
    node_name: str


@dataclass(frozen=True)
class SliceInfo:
    """The parts of an EndpointSlice the node proxy reads."""

    service: str  # "namespace/service-name"
    ports: tuple[tuple[str, str, int], ...]  # (name, protocol, port)
    endpoints: tuple[SliceEndpoint, ...]
    family: int = 4  # addressType IPv4 or IPv6


def parse_slice(obj: dict | None) -> SliceInfo | None:
    """None for slices the node proxy ignores (FQDN, no service label)."""
    if not obj:
        return None
    address_type = obj.get("addressType", "IPv4")
    if address_type not in ("IPv4", "IPv6"):
        return None
    family = 6 if address_type == "IPv6" else 4
    valid = _is_ipv6 if family == 6 else _is_ipv4
    meta = obj.get("metadata") or {}
    svc_name = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    if not svc_name:
        return None
    ports = tuple(sorted(
        (p.get("name") or "", p.get("protocol") or "TCP", int(p["port"]))
        for p in obj.get("ports") or () if p.get("port")))
    eps = []
    for ep in obj.get("endpoints") or ():
        cond = ep.get("conditions") or {}
        ready = cond.get("ready") is not False  # unset means ready
        serving = ready if cond.get("serving") is None else bool(cond["serving"])
        terminating = bool(cond.get("terminating"))
        for addr in ep.get("addresses") or ():
            if valid(addr):
                if family == 6:
                    addr = canonical(addr)
                eps.append(_new(SliceEndpoint, (addr, ready, serving, terminating, ep.get("nodeName") or "")))
    return SliceInfo(f"{meta.get('namespace')}/{svc_name}", ports, tuple(sorted(eps, key=_ADDRESS)), family)


# --- stage 2: endpoint selection ---------------------------------------------


class Endpoint(NamedTuple):
    """One endpoint of one Service port; ordered by address, then port."""

    address: str
    port: int
    ready: bool = True
    serving: bool = True
    terminating: bool = False
    local: bool = False
    elsewhere: bool = False  # on another node by its nodeName (False when nodeName is unset)


def endpoints_for(sp: ServicePort, slices: Iterable[SliceInfo], hostname: str) -> list[Endpoint]:
    """Endpoints of ``sp`` across slices (matched by port name and protocol),
    one per address:port, sorted."""
    found: dict[tuple[str, int], Endpoint] = {}
    for sl in slices:
        for name, protocol, port in sl.ports:
            if name != sp.name or protocol != sp.protocol:
                continue
            for e in sl.endpoints:
                address, ready, serving, terminating, node_name = e
                key = (address, port)
                old = found.get(key)
                if old is None or (ready and not old.ready):
                    found[key] = _new(Endpoint, (address, port, ready, serving, terminating,
                                                 node_name == hostname, bool(node_name) and node_name != hostname))
    return sorted(found.values())


def usable(eps: list[Endpoint]) -> list[Endpoint]:
    """Ready endpoints, else the serving-but-terminating ones."""
    return _usable(eps)


def _usable(eps: list[Endpoint]) -> list[Endpoint]:
    ready = [e for e in eps if e.ready]
    return ready or [e for e in eps if e.serving and e.terminating]


def select_endpoints(sp: ServicePort, eps: list[Endpoint]) -> tuple[list[Endpoint], list[Endpoint]]:
    """(endpoints for cluster traffic, endpoints for external traffic)."""
    everywhere = _usable(eps)
    if not (sp.internal_local or sp.external_local):
        return everywhere, everywhere
    local = _usable([e for e in eps if e.local])
    return (local if sp.internal_local else everywhere,
            local if sp.external_local else everywhere)


# --- stage 3: kernel state of one Service -------------------------------------


@dataclass(frozen=True)
class ServiceState:
    """What one Service asks of the kernel. Empty for a deleted Service."""

    virtual: dict[tuple[str, str, int], tuple[VirtualServer, frozenset[RealServer]]] = field(default_factory=dict)
    addresses: frozenset[str] = frozenset()
    entries: frozenset[tuple[str, IPSetEntry]] = frozenset()


EMPTY = ServiceState()


def _reals(eps: list[Endpoint]) -> frozenset[RealServer]:
    return frozenset([_new(RealServer, (e[0], e[1], 1)) for e in eps])  # (address, port, weight 1)


def service_state(ports: tuple[ServicePort, ...], slices: Iterable[SliceInfo], opts: Options) -> ServiceState:
    """The IPVS mode's state: each family of :attr:`Options.families` that
    the Service has a cluster IP of (the IPv4 half of a dual-stack Service
    when only IPv4 is served; an IPv6-only Service is then left out)."""
    if not ports:
        return EMPTY
    present = {6 if ":" in ip else 4 for ip in ports[0].cluster_ips}
    families = [f for f in opts.families if f in present]
    if not families:
        return EMPTY
    virtual: dict = {}
    addresses: set[str] = set()
    entries: set[tuple[str, IPSetEntry]] = set()
    slices = list(slices)
    for family in families:
        _family_state(ports, [sl for sl in slices if sl.family == family], opts, family,
                      virtual, addresses, entries)
    return ServiceState(virtual, frozenset(addresses), frozenset(entries))


def _family_state(ports: tuple[ServicePort, ...], slices: list[SliceInfo], opts: Options, family: int,
                  virtual: dict, addresses: set[str], entries: set[tuple[str, IPSetEntry]]) -> None:
    """:func:`service_state` for the addresses and endpoints of one family."""
    six = family == 6

    def ours(ips: tuple[str, ...]) -> list[str] | tuple[str, ...]:
        return [ip for ip in ips if (":" in ip) is six] if ips else ips

    names = _SET_NAMES[family]
    node_ips = tuple(ours(opts.node_ips))
    for sp in ports:
        eps = endpoints_for(sp, slices, opts.hostname)
        cluster_eps, external_eps = select_endpoints(sp, eps)
        proto = sp.protocol.lower()
        cluster_reals = _reals(cluster_eps)
        external_reals = cluster_reals if external_eps is cluster_eps else _reals(external_eps)

        def serve(address: str, port: int, reals: frozenset[RealServer]) -> None:
            vs = _new(VirtualServer, (sp.protocol, address, port, opts.scheduler, sp.affinity_timeout, 0))
            virtual[(sp.protocol, address, port)] = (vs, reals)

        for ip in ours(sp.cluster_ips):
            serve(ip, sp.port, cluster_reals)
            addresses.add(ip)
            entries.add((names[ipsets.CLUSTER_IP], _new(IPSetEntry, (ip, proto, sp.port, None))))
        for ip in ours(sp.external_ips):
            serve(ip, sp.port, external_reals)
            addresses.add(ip)
            name = ipsets.EXTERNAL_IP_LOCAL if sp.external_local else ipsets.EXTERNAL_IP
            entries.add((names[name], IPSetEntry(ip, proto, sp.port)))
        for ip in ours(sp.load_balancer_ips):
            serve(ip, sp.port, external_reals)
            addresses.add(ip)
            entries.add((names[ipsets.LOAD_BALANCER], IPSetEntry(ip, proto, sp.port)))
            if sp.external_local:
                entries.add((names[ipsets.LOAD_BALANCER_LOCAL], IPSetEntry(ip, proto, sp.port)))
        if sp.node_port:
            for ip in node_ips:
                serve(ip, sp.node_port, external_reals)
            entries.update((names[n], e) for n, e in _node_port_entries(sp, node_ips))
        local = [e for e in cluster_eps if e.local]
        if external_eps is not cluster_eps:
            local += [e for e in external_eps if e.local]
        for e in local:
            # hairpin: an endpoint reaching itself through the service
            entries.add((names[ipsets.LOOP_BACK], IPSetEntry(e.address, proto, e.port, e.address)))


#: Each set's name for each family, looked up once per member rather than computed.
_SET_NAMES = {family: {name: ipsets.for_family(name, family) for name in ipsets.NAMES} for family in (4, 6)}


def _node_port_entries(sp: ServicePort, node_ips: tuple[str, ...]) -> set[tuple[str, IPSetEntry]]:
    proto = sp.protocol.lower()
    if sp.protocol == SCTP:  # bitmap:port cannot tell protocols apart; SCTP uses hash:ip,port
        wanted = [IPSetEntry(ip, proto, sp.node_port) for ip in node_ips]
    else:
        wanted = [IPSetEntry(port=sp.node_port)]
    names = [ipsets.node_port_set(sp.protocol, local=False)]
    if sp.external_local:
        names.append(ipsets.node_port_set(sp.protocol, local=True))
    return {(n, e) for n in names for e in wanted}


def trigger_time(obj: dict | None) -> str | None:
    """The EndpointSlice's last-change-trigger-time annotation, if any."""
    if not obj:
        return None
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(TRIGGER_TIME_ANNOTATION)
