"""The sysctls IPVS mode needs, set as kube-proxy sets them.

* ``net/ipv4/vs/conntrack = 1`` -- keep conntrack entries for IPVS
  connections, so iptables can masquerade them (hairpin, node ports).
* ``net/ipv4/vs/conn_reuse_mode = 0`` on kernels 4.1 to 5.8 only: there,
  reusing a connection slot of a removed real server stalled new
  connections for a second. From 5.9 the kernel fixed it and the value is
  left alone; before 4.1 the sysctl does not exist.
* ``net/ipv4/vs/expire_nodest_conn = 1`` -- drop connections to a deleted
  real server at once instead of black-holing them.
* ``net/ipv4/vs/expire_quiescent_template = 1`` -- persistence templates of a
  weight-0 real server expire, so sticky clients move on.
* ``net/ipv4/ip_forward = 1`` -- traffic from pods is forwarded; with
  ``--dual-stack`` also ``net/ipv6/conf/all/forwarding = 1``. (The
  ``net/ipv4/vs`` settings above hold for IPv6 virtual servers too.)
* with ``--strict-arp``: ``net/ipv4/conf/all/arp_ignore = 1`` and
  ``arp_announce = 2`` -- the node does not answer ARP for the service
  addresses on kube-ipvs0 (needed by MetalLB-style load balancers).

Each is written only when it differs (so a read-only /proc/sys that already
has the right values is fine). A failure names the sysctl and the reason;
:func:`apply` returns the failures instead of stopping at the first so one
report lists all of them. As in kube-proxy, any failure stops the node proxy:
running with, say, ``ip_forward=0`` would fail silently later.

``net/bridge/bridge-nf-call-iptables`` is only checked (:func:`advice`): it
matters only for pods on a Linux bridge and belongs to the node's set-up.
"""

from __future__ import annotations

from dataclasses import dataclass

from .kernel import KernelError, Sysctl

CONN_REUSE_MIN = (4, 1, 0)
CONN_REUSE_FIXED = (5, 9, 0)


@dataclass(frozen=True)
class Setting:
    name: str
    value: str
    why: str


def wanted(kernel_version: tuple[int, int, int], strict_arp: bool, ipv6: bool = False) -> list[Setting]:
    """The settings for this kernel and flags, in the order they are applied."""
    out = [Setting("net/ipv4/vs/conntrack", "1", "masquerade IPVS connections")]
    if CONN_REUSE_MIN <= kernel_version < CONN_REUSE_FIXED:
        out.append(Setting("net/ipv4/vs/conn_reuse_mode", "0", "avoid 1 s stalls on port reuse"))
    out += [
        Setting("net/ipv4/vs/expire_nodest_conn", "1", "drop connections to deleted real servers"),
        Setting("net/ipv4/vs/expire_quiescent_template", "1", "expire affinity to quiesced real servers"),
        Setting("net/ipv4/ip_forward", "1", "forward pod traffic"),
    ]
    if ipv6:
        out.append(Setting("net/ipv6/conf/all/forwarding", "1", "forward IPv6 pod traffic"))
    if strict_arp:
        out += [Setting("net/ipv4/conf/all/arp_ignore", "1", "strict ARP"),
                Setting("net/ipv4/conf/all/arp_announce", "2", "strict ARP")]
    return out


def apply(kernel: Sysctl, settings: list[Setting]) -> list[str]:
    """Write every setting that differs. Returns one message per failure."""
    failures = []
    for s in settings:
        try:
            if kernel.read_sysctl(s.name) != s.value:
                kernel.write_sysctl(s.name, s.value)
        except KernelError as err:
            failures.append(f"cannot set sysctl {s.name}={s.value} ({s.why}): {err}")
    return failures


BRIDGE_NF = "net/bridge/bridge-nf-call-iptables"


def advice(kernel: Sysctl) -> str | None:
    """A warning when bridged pod traffic would bypass iptables, else None."""
    try:
        value = kernel.read_sysctl(BRIDGE_NF)
    except KernelError:
        return f"{BRIDGE_NF} missing (br_netfilter not loaded): pods on a Linux bridge may not reach services"
    if value != "1":
        return f"{BRIDGE_NF}={value}: pods on a Linux bridge may not reach services"
    return None
