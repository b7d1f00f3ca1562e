"""Service + EndpointSlices -> the nftables rules of one Service (pure).

The semantics are kube-proxy's nftables mode; the layout is ours, chosen by
measurement on this machine's kernel (6.18) with ``nft`` 1.0.6:

* One ``inet`` table for both families (kube-proxy keeps one ``ip`` and one
  ``ip6`` table): the dispatch maps and chains are per family inside it.
* Dispatch by verdict maps: ``service-ips4|6`` (destination . protocol .
  port -> goto the Service's chain), ``service-nodeports4|6``, and the
  ``no-endpoint-*`` maps that reject (ICMP port unreachable) at once in the
  filter hooks, where ``reject`` is allowed.
* Per Service port and family one ``service-`` chain (the choice of
  endpoint; masquerading of cluster-IP traffic is one rule per family in
  ``services``), one ``external-`` chain when node ports, external or
  load-balancer IPs exist, one ``firewall-`` chain for
  ``loadBalancerSourceRanges``. Chain names carry a hash of the Service
  port, so they are unique and stable whatever the names' lengths.
* The endpoint is chosen by one rule per chain, ``dnat ... to daddr . dport
  . numgen random mod N map @endpoints-tcp4``: the shared ``endpoints-*`` maps
  holds (destination, port, slot) -> endpoint, so replacing an endpoint
  changes map elements only (see :meth:`_Builder.dispatch` for why that
  matters), not kube-proxy's anonymous ``numgen ... vmap`` per Service plus
  one chain per endpoint. Measured when loading 10,000 Services x 5
  endpoints: 52 s with chains per endpoint and anonymous maps, 15 s with
  anonymous maps alone (the kernel scans every set of the table to name
  each anonymous one: quadratic), 2.1 s with ``numgen random mod N 0``
  rules doing their DNAT inline (five rules per Service), less with the
  shared map (one rule). The rule runs only for a connection's first
  packet (NAT chains).
* Session affinity needs state per endpoint, so only Services with
  ``sessionAffinity: ClientIP`` get one ``endpoint-`` chain and one dynamic
  ``affinity-`` set (with the timeout) per endpoint, as in kube-proxy.
* Hairpin (a pod reaching itself through its Service) is masqueraded by one
  rule in postrouting matching ``source . destination`` against the
  ``hairpin4|6`` set of endpoint pairs, instead of a rule per endpoint.

Rules are compared by the id each carries as its comment (see ``nftmodel``).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from dataclasses import dataclass, field
from typing import Iterable

from .nftmodel import Chain, SetSpec, Table
from .translate import Endpoint, ServicePort, SliceInfo, endpoints_for, family_of, select_endpoints, usable

MASQ_MARK = "0x00004000"
REJECT_CHAIN = "reject-chain"
MARK_FOR_MASQUERADE = "mark-for-masquerade"
FAMILIES = (4, 6)
_KW = {4: "ip", 6: "ip6"}  # nft's payload keyword per family
_ADDR_TYPE = {4: "ipv4_addr", 6: "ipv6_addr"}


@dataclass(frozen=True)
class Options:
    hostname: str
    node_ips: tuple[str, ...] = ()
    cluster_cidrs: tuple[str, ...] = ()  # of either family; "" or () when not known
    masquerade_all: bool = False
    families: tuple[int, ...] = FAMILIES  # the families whose Service rules are written (--dual-stack)


def cidr_of(cidrs: Iterable[str], family: int) -> str:
    """The first CIDR of ``family`` in ``cidrs`` (``--cluster-cidr`` takes a
    comma-separated pair), "" when none."""
    for c in cidrs:
        if c and family_of(c.split("/")[0]) == family:
            return c
    return ""


# -- the fixed part ----------------------------------------------------------------


def _maps(family: int) -> list[SetSpec]:
    a = _ADDR_TYPE[family]
    f = str(family)
    return [
        SetSpec(f"service-ips{f}", f"{a} . inet_proto . inet_service", verdict=True),
        SetSpec(f"service-nodeports{f}", "inet_proto . inet_service", verdict=True),
        SetSpec(f"no-endpoint-services{f}", f"{a} . inet_proto . inet_service", verdict=True),
        SetSpec(f"no-endpoint-nodeports{f}", "inet_proto . inet_service", verdict=True),
        SetSpec(f"firewall-ips{f}", f"{a} . inet_proto . inet_service", verdict=True),
        SetSpec(f"cluster-ips{f}", a),
        SetSpec(f"nodeport-ips{f}", a),
        SetSpec(f"hairpin{f}", f"{a} . {a}"),
    ] + [SetSpec(f"{slots}-{proto}{f}-{shard}", _slots_type(family, proto))
         for slots in ("endpoints", "local-endpoints") for proto in ("tcp", "udp", "sctp")
         for shard in range(SLOT_SHARDS)]


#: Services spread over this many maps per kind, protocol and family. The
#: kernel checks every element of a map against every rule that looks it up
#: (when an element is added, and when a rule is), so one map for 10,000
#: Services made the initial load take 10 s instead of ~1 s on this host;
#: split in 32, each map has ~300 rules and ~1,500 elements at that size.
SLOT_SHARDS = 32


def _slots_type(family: int, proto: str) -> str:
    """destination . port . slot -> endpoint . port (numgen's value is the
    slot). One map per protocol: with ``th dport`` in a shared map's typeof,
    nft 1.0.6 rejects any later rule using the map ("conflicting protocols
    specified: udp vs. th")."""
    kw = _KW[family]
    return f"typeof {kw} daddr . {proto} dport . numgen random mod 1 : {kw} daddr . {proto} dport"


def _hook(kind: str, hook: str, priority: int) -> str:
    return f"type {kind} hook {hook} priority {priority}; policy accept;"


def fixed_table(opts: Options) -> Table:
    """The base chains, dispatch chains and maps every node has, with this
    node's IPs in ``nodeport-ips4|6`` (node ports answer there only, never
    on 127.0.0.1)."""
    t = Table()
    for family in FAMILIES:
        for spec in _maps(family):
            t.sets[spec.name] = spec
            t.elements[spec.name] = {}
    for ip in opts.node_ips:
        t.elements[f"nodeport-ips{family_of(ip)}"][ip] = ""

    def per_family(rule: str) -> tuple[str, ...]:
        return tuple(rule.format(kw=_KW[f], f=f) for f in FAMILIES)

    # Priorities as kube-proxy has them: the filter checks run just before
    # DNAT (-100), the post-DNAT output check just after it.
    c = t.chains
    c["filter-prerouting"] = Chain(("ct state new jump firewall-check",), _hook("filter", "prerouting", -110))
    c["filter-input"] = Chain(("ct state new jump nodeport-endpoints-check",
                               "ct state new jump service-endpoints-check"), _hook("filter", "input", -110))
    c["filter-forward"] = Chain(("ct state new jump service-endpoints-check",
                                 "ct state new jump cluster-ips-check"), _hook("filter", "forward", -110))
    c["filter-output"] = Chain(("ct state new jump service-endpoints-check",
                                "ct state new jump firewall-check"), _hook("filter", "output", -110))
    c["filter-output-post-dnat"] = Chain(("ct state new jump cluster-ips-check",), _hook("filter", "output", -90))
    c["nat-prerouting"] = Chain(("jump services",), _hook("nat", "prerouting", -100))
    c["nat-output"] = Chain(("jump services",), _hook("nat", "output", -100))
    c["nat-postrouting"] = Chain(
        per_family("ct status dnat {kw} saddr . {kw} daddr @hairpin{f} jump " + MARK_FOR_MASQUERADE)
        + ("jump masquerading",), _hook("nat", "postrouting", 100))
    c["masquerading"] = Chain((f"meta mark & {MASQ_MARK} == 0x00000000 return",
                               f"meta mark set meta mark ^ {MASQ_MARK}",
                               "masquerade fully-random"))
    c[MARK_FOR_MASQUERADE] = Chain((f"meta mark set meta mark | {MASQ_MARK}",))
    c[REJECT_CHAIN] = Chain(("reject",))
    # Masquerading of cluster-IP traffic from outside the pod network (or
    # of all of it): one rule per family here rather than one per Service
    # chain as in kube-proxy. Equivalent, since traffic to a cluster IP on a
    # port no Service has is rejected anyway, and 10,000 fewer rules cut
    # the initial load at 10,000 Services by 0.4 s (of 2.0 s) on this host.
    masq = []
    for family in FAMILIES:
        kw, cidr = _KW[family], cidr_of(opts.cluster_cidrs, family)
        if opts.masquerade_all:
            masq.append(f"{kw} daddr @cluster-ips{family} jump {MARK_FOR_MASQUERADE}")
        elif cidr:
            masq.append(f"{kw} daddr @cluster-ips{family} {kw} saddr != {cidr} jump {MARK_FOR_MASQUERADE}")
    c["services"] = Chain(tuple(masq)
                          + per_family("{kw} daddr . meta l4proto . th dport vmap @service-ips{f}")
                          + per_family("{kw} daddr @nodeport-ips{f} meta l4proto . th dport vmap @service-nodeports{f}"))
    c["firewall-check"] = Chain(per_family("{kw} daddr . meta l4proto . th dport vmap @firewall-ips{f}"))
    c["service-endpoints-check"] = Chain(
        per_family("{kw} daddr . meta l4proto . th dport vmap @no-endpoint-services{f}"))
    c["nodeport-endpoints-check"] = Chain(
        per_family("{kw} daddr @nodeport-ips{f} meta l4proto . th dport vmap @no-endpoint-nodeports{f}"))
    c["cluster-ips-check"] = Chain(("ip daddr @cluster-ips4 reject with icmp port-unreachable",
                                    "ip6 daddr @cluster-ips6 reject with icmpv6 port-unreachable"))
    return t


# -- one Service -------------------------------------------------------------------


@dataclass(frozen=True)
class ServiceRules:
    """What one Service adds to the table, plus what the proxier needs
    beside the rules. Empty for a deleted or ignored Service."""

    chains: dict[str, Chain] = field(default_factory=dict)
    sets: dict[str, SetSpec] = field(default_factory=dict)
    elements: frozenset[tuple[str, str, str]] = frozenset()  # (set, key, value)
    #: UDP destinations ("address", port) -> the endpoint addresses they lead
    #: to: conntrack entries to endpoints that went are cleared.
    udp: dict[tuple[str, int], frozenset[str]] = field(default_factory=dict)
    #: healthCheckNodePort -> local endpoints (Local LoadBalancer Services).
    health: dict[int, int] = field(default_factory=dict)
    #: (map, Service port) -> the endpoints ("address . port") by slot, so
    #: the next translation keeps each remaining endpoint in its slot.
    slots: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)


EMPTY = ServiceRules()


def _hash(text: str) -> str:
    return base64.b32encode(hashlib.sha256(text.encode()).digest())[:8].decode()


def _shard(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") % SLOT_SHARDS


def _port_id(sp: ServicePort) -> str:
    return f"{sp.service}/{sp.protocol.lower()}/{sp.name or sp.port}"


def _endpoint_id(sp: ServicePort, ep: Endpoint) -> str:
    return f"{_port_id(sp)}__{ep.address.replace(':', '.')}/{ep.port}"


def _target(family: int, ep: Endpoint) -> str:
    return f"[{ep.address}]:{ep.port}" if family == 6 else f"{ep.address}:{ep.port}"


def _normal_ranges(ranges: Iterable[str], family: int) -> list[str]:
    """CIDRs of ``family`` as nft prints them: host bits cleared, /32 and
    /128 bare, sorted by address."""
    nets = sorted({ipaddress.ip_network(r, strict=False) for r in ranges
                   if family_of(r.split("/")[0]) == family})
    return [str(n.network_address) if n.prefixlen == n.max_prefixlen else str(n) for n in nets]


def keep_slots(previous: tuple[str, ...], wanted: list[str]) -> list[str]:
    """``wanted`` in slots: each one that was in ``previous`` keeps its slot
    while that slot still exists; the others fill the free slots in order.
    So replacing one endpoint changes one slot, not every slot after it."""
    n = len(wanted)
    present = set(wanted)
    result: list[str | None] = [None] * n
    placed = set()
    for i, ep in enumerate(previous[:n]):
        if ep in present:
            result[i] = ep
            placed.add(ep)
    rest = iter(ep for ep in wanted if ep not in placed)
    return [ep if ep is not None else next(rest) for ep in result]


class _Builder:
    def __init__(self, opts: Options, previous: "ServiceRules") -> None:
        self.previous = previous.slots
        self.slots: dict[tuple[str, str], tuple[str, ...]] = {}
        self.opts = opts
        self.chains: dict[str, Chain] = {}
        self.sets: dict[str, SetSpec] = {}
        self.elements: set[tuple[str, str, str]] = set()
        self.udp: dict[tuple[str, int], frozenset[str]] = {}
        self.health: dict[int, int] = {}

    def build(self) -> ServiceRules:
        return ServiceRules(self.chains, self.sets, frozenset(self.elements), self.udp, self.health, self.slots)

    def dispatch(self, sp: ServicePort, family: int, eps: list[Endpoint],
                 dests: list[tuple[str, int]], slots: str) -> list[str]:
        """Rules choosing one of ``eps`` uniformly for traffic to ``dests``.

        Without affinity, one rule: ``numgen random mod N`` picks a slot and
        the ``slots`` map (``endpoints-tcp4``..., ``local-endpoints-tcp4``...) gives
        the endpoint of (destination, port, slot). Replacing an endpoint then
        changes map elements only, never a rule: a rule change makes the
        kernel validate the whole table at commit (15-45 ms at 10,000
        Services on this host, whatever the rule), an element change does
        not (0.02 ms). A new endpoint count changes the one rule.

        With affinity, ``numgen random mod N 0`` rules (N = len, ..., 2, then
        the last endpoint unconditionally) go to per-endpoint chains that
        remember the client, and a client seen recently goes back to its
        endpoint."""
        kw, proto = _KW[family], sp.protocol.lower()
        if not sp.affinity_timeout:
            add = self.elements.add
            name = f"{slots}-{proto}{family}-{_shard(_port_id(sp))}"
            key = (name, _port_id(sp))
            order = keep_slots(self.previous.get(key, ()), [f"{ep.address} . {ep.port}" for ep in eps])
            self.slots[key] = tuple(order)
            for dest, port in dests:
                for slot, ep in enumerate(order):
                    add((name, f"{dest} . {port} . {slot}", ep))
            return [f"meta l4proto {proto} dnat {kw} addr . port to {kw} daddr . {proto} dport . "
                    f"numgen random mod {len(eps)} map @{name}"]
        targets = [f"goto {self._endpoint_chain(sp, family, ep)}" for ep in eps]
        rules = [f"{kw} saddr @affinity-{_hash(f'{family}|{_endpoint_id(sp, ep)}')}-{_endpoint_id(sp, ep)} {t}"
                 for ep, t in zip(eps, targets)]
        n = len(targets)
        for i, t in enumerate(targets):
            left = n - i
            rules.append(f"numgen random mod {left} 0 {t}" if left > 1 else t)
        return rules

    def _endpoint_chain(self, sp: ServicePort, family: int, ep: Endpoint) -> str:
        eid = _endpoint_id(sp, ep)
        h = _hash(f"{family}|{eid}")
        chain, aff = f"endpoint-{h}-{eid}", f"affinity-{h}-{eid}"
        if chain not in self.chains:
            kw = _KW[family]
            self.sets[aff] = SetSpec(aff, _ADDR_TYPE[family], flags="dynamic,timeout", timeout=sp.affinity_timeout)
            self.chains[chain] = Chain((f"update @{aff} {{ {kw} saddr }} meta l4proto {sp.protocol.lower()} "
                                        f"dnat {kw} to {_target(family, ep)}",))
        return chain

    def port(self, sp: ServicePort, family: int, eps: list[Endpoint]) -> None:
        opts, kw, f = self.opts, _KW[family], str(family)
        proto = sp.protocol.lower()
        cluster_ips = [ip for ip in sp.cluster_ips if family_of(ip) == family]
        if not cluster_ips:
            return
        external_ips = [ip for ip in sp.external_ips if family_of(ip) == family]
        lb_ips = [ip for ip in sp.load_balancer_ips if family_of(ip) == family]
        cluster_eps, external_eps = select_endpoints(sp, eps)
        pid = _port_id(sp)
        h = _hash(f"{family}|{pid}")
        svc_chain = f"service-{h}-{pid}"
        ext_chain = f"external-{h}-{pid}"
        add = self.elements.add

        # No endpoint at all: refused at once (ICMP). Endpoints, but none on
        # this node for internalTrafficPolicy Local: dropped, as kube-proxy does.
        no_endpoint = "drop" if usable(eps) else f"goto {REJECT_CHAIN}"
        for ip in cluster_ips:
            add((f"cluster-ips{f}", ip, ""))
            if cluster_eps:
                add((f"service-ips{f}", f"{ip} . {proto} . {sp.port}", f"goto {svc_chain}"))
            else:
                add((f"no-endpoint-services{f}", f"{ip} . {proto} . {sp.port}", no_endpoint))
        reachable = bool(cluster_eps or external_eps)
        externals = [(ip, sp.port) for ip in external_ips + lb_ips]
        node_ports = [(ip, sp.node_port) for ip in opts.node_ips if sp.node_port and family_of(ip) == family]
        if cluster_eps:
            # Every destination may reach this chain: cluster IPs, and the
            # external ones through the external chain (all of them with
            # Cluster policy, the short-circuited pod and node traffic with Local).
            dests = [(ip, sp.port) for ip in cluster_ips] + externals + node_ports
            self.chains[svc_chain] = Chain(tuple(self.dispatch(sp, family, cluster_eps, dests, "endpoints")))
        if externals or sp.node_port:
            target = f"goto {ext_chain}" if reachable else f"goto {REJECT_CHAIN}"
            dest_map = f"service-ips{f}" if reachable else f"no-endpoint-services{f}"
            for ip, port in externals:
                add((dest_map, f"{ip} . {proto} . {port}", target))
            if sp.node_port:
                add((f"service-nodeports{f}" if reachable else f"no-endpoint-nodeports{f}",
                     f"{proto} . {sp.node_port}", target))
            if reachable:
                self.chains[ext_chain] = Chain(tuple(self._external_rules(sp, family, svc_chain, cluster_eps,
                                                                          external_eps, externals + node_ports)))
        if sp.source_ranges and lb_ips:
            fw_chain = f"firewall-{h}-{pid}"
            ranges = _normal_ranges(sp.source_ranges, family)
            if not ranges:
                rule = "drop"
            elif len(ranges) == 1:
                rule = f"{kw} saddr != {ranges[0]} drop"
            else:
                rule = f"{kw} saddr != {{ {', '.join(ranges)} }} drop"
            self.chains[fw_chain] = Chain((rule,))
            for ip in lb_ips:
                add((f"firewall-ips{f}", f"{ip} . {proto} . {sp.port}", f"goto {fw_chain}"))

        # Hairpin: a pod reaching itself through the Service. Only a pod on
        # this node can, so endpoints on other nodes (by nodeName) are left
        # out: in a cluster most are, and at 10,000 Services x 5 endpoints
        # elsewhere that is 50,000 elements fewer to load.
        for ep in {*cluster_eps, *external_eps}:
            if not ep.elsewhere:
                add((f"hairpin{f}", f"{ep.address} . {ep.address}", ""))
        if sp.protocol == "UDP":
            for ip in cluster_ips:
                self.udp[(ip, sp.port)] = frozenset(e.address for e in cluster_eps)
            for ip, port in externals:
                self.udp[(ip, port)] = frozenset(e.address for e in external_eps)
            for dest in node_ports:
                self.udp[dest] = frozenset(e.address for e in external_eps)
        if sp.health_check_node_port:
            # Per family and port the same pods: the largest count, not the sum
            # (a dual-stack pod is one endpoint with two addresses).
            local = sum(1 for e in external_eps if e.local)
            self.health[sp.health_check_node_port] = max(self.health.get(sp.health_check_node_port, 0), local)

    def _external_rules(self, sp: ServicePort, family: int, svc_chain: str, cluster_eps: list[Endpoint],
                        external_eps: list[Endpoint], dests: list[tuple[str, int]]) -> list[str]:
        """External traffic (node ports, external and load-balancer IPs).
        Cluster policy: masquerade, then the Service's chain. Local policy:
        keep the client's address and use local endpoints only, except for
        traffic from pods and from the node itself, which any endpoint may
        serve (kube-proxy's short-circuit); no local endpoint: drop."""
        if not sp.external_local:
            return [f"jump {MARK_FOR_MASQUERADE}", f"goto {svc_chain}"]
        kw = _KW[family]
        rules = []
        if cluster_eps:
            cidr = cidr_of(self.opts.cluster_cidrs, family)
            if cidr:
                rules.append(f"{kw} saddr {cidr} goto {svc_chain}")
            rules += [f"fib saddr type local jump {MARK_FOR_MASQUERADE}", f"fib saddr type local goto {svc_chain}"]
        return rules + (self.dispatch(sp, family, external_eps, dests, "local-endpoints") if external_eps
                        else ["drop"])


def service_rules(ports: tuple[ServicePort, ...], slices: Iterable[SliceInfo], opts: Options,
                  previous: ServiceRules = EMPTY) -> ServiceRules:
    """One Service's rules, both families; ``previous`` (its last rules)
    only decides which slot each endpoint keeps."""
    if not ports:
        return EMPTY
    slices = list(slices)
    b = _Builder(opts, previous)
    for family in opts.families:
        fam_slices = [s for s in slices if s.family == family]
        for sp in ports:
            b.port(sp, family, endpoints_for(sp, fam_slices, opts.hostname))
    return b.build()
