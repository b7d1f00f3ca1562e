"""``--cleanup``: remove everything the node proxy creates, without its state.

Works from what the kernel shows, so it also cleans up after a crashed or
older run: virtual servers on kube-ipvs0's addresses or on the node IPs (node
ports), the dummy link, our iptables jumps and chains (ip6tables too when
given), and our ipsets of both families, in that order (an ipset cannot be
destroyed while a rule still matches it).
"""

from __future__ import annotations

from typing import Callable

from . import ipsets, iptables
from .kernel import DUMMY_LINK, DeleteVirtualServer, Firewall, Kernel, KernelError, NotFound


def remove_everything(kernel: Kernel, node_ips: tuple[str, ...] = (), ip6tables: Firewall | None = None) -> list[str]:
    """Delete our virtual servers (those on kube-ipvs0's addresses or the node
    IPs, both families), the dummy link, our iptables chains and jumps (and
    ip6tables ones through ``ip6tables``, a firewall whose tool is ip6tables),
    and our ipsets. Keeps going after a failure; returns one message per failure."""
    failures: list[str] = []

    def attempt(what: str, fn: Callable, *args) -> object:
        try:
            return fn(*args)
        except NotFound:
            return None
        except KernelError as err:
            failures.append(f"{what}: {err}")
            return None

    addresses = attempt("list kube-ipvs0 addresses", kernel.addresses.list_addresses, DUMMY_LINK) or set()
    ours = set(addresses) | set(node_ips)
    doomed = [DeleteVirtualServer(vs)
              for vs in attempt("list virtual servers", kernel.ipvs.list_virtual_servers) or () if vs.address in ours]
    for op, error in zip(doomed, attempt("delete virtual servers", kernel.ipvs.apply, doomed) or ()):
        if error is not None and not isinstance(error, NotFound):
            failures.append(f"delete virtual server {op.vs}: {error}")
    attempt(f"delete link {DUMMY_LINK}", kernel.addresses.delete_link, DUMMY_LINK)
    for tool, rules in (("iptables", kernel.firewall), ("ip6tables", ip6tables)):
        if rules is None:
            continue
        for jump in iptables.JUMPS:
            attempt(f"delete {tool} jump to {jump.rule[-1]}", rules.delete_iptables_rule,
                    jump.table, jump.chain, jump.rule)
        attempt(f"delete {tool} chains", rules.restore_iptables, iptables.render_cleanup())
    for name in ipsets.NAMES + ipsets.NAMES6:
        attempt(f"destroy ipset {name}", kernel.ipset.destroy_ipset, name)
    return failures
