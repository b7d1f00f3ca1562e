"""The ipsets the node proxy keeps, named and typed as kube-proxy's IPVS mode does.

The iptables rules (``iptables.py``) match these sets, so the rules never
change when Services do: adding a Service adds set members, not rules.

An ipset holds one address family. IPv6 has its own copy of every set, of
family ``inet6``, named as kube-proxy names them: ``KUBE-`` becomes ``KUBE-6-``
(``KUBE-6-CLUSTER-IP``), matched by the ip6tables rules.
"""

from __future__ import annotations

from .kernel import SCTP, IPSetSpec

LOOP_BACK = "KUBE-LOOP-BACK"
CLUSTER_IP = "KUBE-CLUSTER-IP"
EXTERNAL_IP = "KUBE-EXTERNAL-IP"
EXTERNAL_IP_LOCAL = "KUBE-EXTERNAL-IP-LOCAL"
LOAD_BALANCER = "KUBE-LOAD-BALANCER"
LOAD_BALANCER_LOCAL = "KUBE-LOAD-BALANCER-LOCAL"
NODE_PORT_TCP = "KUBE-NODE-PORT-TCP"
NODE_PORT_LOCAL_TCP = "KUBE-NODE-PORT-LOCAL-TCP"
NODE_PORT_UDP = "KUBE-NODE-PORT-UDP"
NODE_PORT_LOCAL_UDP = "KUBE-NODE-PORT-LOCAL-UDP"
NODE_PORT_SCTP = "KUBE-NODE-PORT-SCTP-HASH"
NODE_PORT_LOCAL_SCTP = "KUBE-NODE-PORT-LOCAL-SCTP-HASH"

SPECS: tuple[IPSetSpec, ...] = (
    IPSetSpec(LOOP_BACK, "hash:ip,port,ip", "endpoint IP:port and source IP, for hairpin masquerade"),
    IPSetSpec(CLUSTER_IP, "hash:ip,port", "service cluster IP:port"),
    IPSetSpec(EXTERNAL_IP, "hash:ip,port", "service external IP:port"),
    IPSetSpec(EXTERNAL_IP_LOCAL, "hash:ip,port", "service external IP:port with externalTrafficPolicy Local"),
    IPSetSpec(LOAD_BALANCER, "hash:ip,port", "service load-balancer IP:port"),
    IPSetSpec(LOAD_BALANCER_LOCAL, "hash:ip,port", "load-balancer IP:port with externalTrafficPolicy Local"),
    IPSetSpec(NODE_PORT_TCP, "bitmap:port", "TCP node ports"),
    IPSetSpec(NODE_PORT_LOCAL_TCP, "bitmap:port", "TCP node ports with externalTrafficPolicy Local"),
    IPSetSpec(NODE_PORT_UDP, "bitmap:port", "UDP node ports"),
    IPSetSpec(NODE_PORT_LOCAL_UDP, "bitmap:port", "UDP node ports with externalTrafficPolicy Local"),
    IPSetSpec(NODE_PORT_SCTP, "hash:ip,port", "node IP:SCTP node port"),
    IPSetSpec(NODE_PORT_LOCAL_SCTP, "hash:ip,port", "node IP:SCTP node port with externalTrafficPolicy Local"),
)

NAMES = tuple(s.name for s in SPECS)

# The kernel takes 31 characters of a set name; kube-proxy cuts the longer
# IPv6 names there (KUBE-6-NODE-PORT-LOCAL-SCTP-HAS), and so do we.
MAX_NAME = 31
SPECS6: tuple[IPSetSpec, ...] = tuple(
    IPSetSpec(f"KUBE-6-{s.name.removeprefix('KUBE-')}"[:MAX_NAME], s.set_type, s.comment, "inet6", s.port_range)
    for s in SPECS)

NAMES6 = tuple(s.name for s in SPECS6)

_V6_NAME = dict(zip(NAMES, NAMES6))


def for_family(name: str, family: int) -> str:
    """Set ``name`` (one of :data:`NAMES`) for addresses of ``family`` (4 or 6)."""
    return _V6_NAME[name] if family == 6 else name


def node_port_set(protocol: str, local: bool) -> str:
    if protocol == SCTP:
        return NODE_PORT_LOCAL_SCTP if local else NODE_PORT_SCTP
    return f"KUBE-NODE-PORT-{'LOCAL-' if local else ''}{protocol}"
