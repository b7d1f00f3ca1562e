"""Our iptables chains, as text for ``iptables-restore --noflush``.

Following kube-proxy's IPVS mode, IPVS does the load balancing and iptables
only decides what to masquerade. Every rule matches an ipset (``ipsets.py``),
so the text depends on the flags alone, never on the Services: it is written
once at start and again on every full sync (repairing hand edits), and a
Service change never rewrites it.

Masquerading happens for
* traffic to a cluster IP, with ``--masquerade-all``, or from outside
  ``--cluster-cidr`` when that is given;
* traffic to external IPs and to load-balancer IPs (unless
  ``externalTrafficPolicy: Local``, which must keep the client address);
* traffic to node ports (same exception);
* hairpin traffic, an endpoint reaching itself through its Service
  (``KUBE-LOOP-BACK``, matched in POSTROUTING).
Packets are marked in ``KUBE-MARK-MASQ`` and masqueraded in ``KUBE-POSTROUTING``.

IPv6 gets the same rules for ``ip6tables-restore`` (:func:`render` with
``family=6``): same chains, the ``KUBE-6-`` sets and the IPv6 cluster CIDR.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import ipsets
from .nftrules import cidr_of  # the same flag, read the same way in both modes

MASQ_MARK = "0x4000"

SERVICES = "KUBE-SERVICES"
POSTROUTING = "KUBE-POSTROUTING"
NODE_PORT = "KUBE-NODE-PORT"
LOAD_BALANCER = "KUBE-LOAD-BALANCER"
MARK_MASQ = "KUBE-MARK-MASQ"
FORWARD = "KUBE-FORWARD"

NAT_CHAINS = (SERVICES, POSTROUTING, NODE_PORT, LOAD_BALANCER, MARK_MASQ)
FILTER_CHAINS = (FORWARD,)


@dataclass(frozen=True)
class Jump:
    """A rule in a built-in chain that sends packets to one of ours."""

    table: str
    chain: str
    rule: tuple[str, ...]


JUMPS: tuple[Jump, ...] = (
    Jump("nat", "PREROUTING", ("-m", "comment", "--comment", "kubernetes service portals", "-j", SERVICES)),
    Jump("nat", "OUTPUT", ("-m", "comment", "--comment", "kubernetes service portals", "-j", SERVICES)),
    Jump("nat", "POSTROUTING", ("-m", "comment", "--comment", "kubernetes postrouting rules", "-j", POSTROUTING)),
    Jump("filter", "FORWARD", ("-m", "comment", "--comment", "kubernetes forwarding rules", "-j", FORWARD)),
)


@dataclass(frozen=True)
class RuleOptions:
    masquerade_all: bool = False
    cluster_cidr: str = ""  # one CIDR, or an IPv4 and an IPv6 one, comma-separated (kube-proxy's flag)

    def cidr(self, family: int) -> str:
        """The cluster CIDR of ``family`` (4 or 6); empty when not given."""
        return cidr_of([c.strip() for c in self.cluster_cidr.split(",")], family)


def _set(name: str, dims: str) -> str:
    return f"-m set --match-set {name} {dims}"


def _comment(text: str) -> str:
    return f'-m comment --comment "{text}"'


def render(opts: RuleOptions, family: int = 4) -> str:
    """The iptables-restore (``family=6``: ip6tables-restore) input for the
    nat and filter tables (deterministic)."""
    def s(name: str) -> str:
        return ipsets.for_family(name, family)

    cluster_cidr = opts.cidr(family)
    nat = [f":{c} - [0:0]" for c in NAT_CHAINS]
    a = nat.append

    a(f"-A {MARK_MASQ} -j MARK --or-mark {MASQ_MARK}")

    a(f"-A {POSTROUTING} {_comment('hairpin: endpoint reaching itself through its service')} "
      f"{_set(s(ipsets.LOOP_BACK), 'dst,dst,src')} -j MASQUERADE")
    a(f"-A {POSTROUTING} -m mark ! --mark {MASQ_MARK}/{MASQ_MARK} -j RETURN")
    a(f"-A {POSTROUTING} -j MARK --xor-mark {MASQ_MARK}")
    a(f"-A {POSTROUTING} {_comment('kubernetes service traffic requiring SNAT')} -j MASQUERADE --random-fully")

    cluster = _set(s(ipsets.CLUSTER_IP), "dst,dst")
    if opts.masquerade_all:
        a(f"-A {SERVICES} {_comment('masquerade all service traffic')} {cluster} -j {MARK_MASQ}")
    elif cluster_cidr:
        a(f"-A {SERVICES} {_comment('cluster IP traffic from outside the cluster CIDR')} "
          f"{cluster} ! -s {cluster_cidr} -j {MARK_MASQ}")
    else:
        # Without a cluster CIDR we cannot tell pods from the outside. The
        # node itself picks a service address from kube-ipvs0 as the source
        # when it connects to a service; such replies would never return, so
        # traffic *from* a service address to a service is masqueraded.
        a(f"-A {SERVICES} {_comment('node traffic from a service address')} "
          f"{_set(s(ipsets.CLUSTER_IP), 'src,dst')} -j {MARK_MASQ}")
    external = _set(s(ipsets.EXTERNAL_IP), "dst,dst")
    external_local = _set(s(ipsets.EXTERNAL_IP_LOCAL), "dst,dst")
    a(f"-A {SERVICES} {_comment('external IP traffic')} {external} -j {MARK_MASQ}")
    # External IPs that are also local addresses (cloud load balancers add
    # them to the local table) stay here for IPVS; no other nat rule applies.
    a(f"-A {SERVICES} {external} -m addrtype --dst-type LOCAL -j ACCEPT")
    a(f"-A {SERVICES} {external_local} -m addrtype --dst-type LOCAL -j ACCEPT")
    a(f"-A {SERVICES} {_comment('load-balancer IP traffic')} "
      f"{_set(s(ipsets.LOAD_BALANCER), 'dst,dst')} -j {LOAD_BALANCER}")
    a(f"-A {SERVICES} {_comment('node ports')} -m addrtype --dst-type LOCAL -j {NODE_PORT}")
    # Last: IPVS traffic is accepted, so rules added after ours by others
    # cannot rewrite what IPVS is about to balance.
    a(f"-A {SERVICES} {cluster} -j ACCEPT")
    a(f"-A {SERVICES} {_set(s(ipsets.LOAD_BALANCER), 'dst,dst')} -j ACCEPT")

    a(f"-A {LOAD_BALANCER} {_set(s(ipsets.LOAD_BALANCER_LOCAL), 'dst,dst')} -j RETURN")
    a(f"-A {LOAD_BALANCER} -j {MARK_MASQ}")

    for proto in ("tcp", "udp"):
        local = s(ipsets.node_port_set(proto.upper(), local=True))
        every = s(ipsets.node_port_set(proto.upper(), local=False))
        a(f"-A {NODE_PORT} -p {proto} {_set(local, 'dst')} -j RETURN")
        a(f"-A {NODE_PORT} -p {proto} {_set(every, 'dst')} -j {MARK_MASQ}")
    a(f"-A {NODE_PORT} -p sctp {_set(s(ipsets.NODE_PORT_LOCAL_SCTP), 'dst,dst')} -j RETURN")
    a(f"-A {NODE_PORT} -p sctp {_set(s(ipsets.NODE_PORT_SCTP), 'dst,dst')} -j {MARK_MASQ}")

    filt = [f":{c} - [0:0]" for c in FILTER_CHAINS]
    filt.append(f"-A {FORWARD} -m conntrack --ctstate INVALID -j DROP")
    filt.append(f"-A {FORWARD} {_comment('kubernetes forwarding rules')} "
                f"-m mark --mark {MASQ_MARK}/{MASQ_MARK} -j ACCEPT")
    filt.append(f"-A {FORWARD} {_comment('kubernetes forwarding conntrack rule')} "
                f"-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")

    return "\n".join(["*nat", *nat, "COMMIT", "*filter", *filt, "COMMIT", ""])


def render_cleanup() -> str:
    """iptables-restore input that flushes and deletes our chains.

    The jumps in built-in chains (:data:`JUMPS`) must be deleted first."""
    lines = ["*nat", *(f":{c} - [0:0]" for c in NAT_CHAINS), *(f"-X {c}" for c in NAT_CHAINS), "COMMIT",
             "*filter", *(f":{c} - [0:0]" for c in FILTER_CHAINS), *(f"-X {c}" for c in FILTER_CHAINS),
             "COMMIT", ""]
    return "\n".join(lines)
