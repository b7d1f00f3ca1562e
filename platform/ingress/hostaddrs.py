"""The addresses of this network namespace (the pod's, or the node's with hostNetwork).

An ExternalName Service pointing at one of them reaches the controller's own
ports from the public listener (the health server on 10254 binds every
address by default): refused like loopback (see ``endpoints``). Read once at
start from the kernel's tables in /proc, which every Linux network namespace
has (no netlink library, no capability needed): IPv4 ``/32 host LOCAL``
entries of ``/proc/net/fib_trie`` and the addresses of ``/proc/net/if_inet6``.
Anywhere else (no /proc) the set is empty and only the special ranges apply.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

__all__ = ["read"]


def read(proc: Path = Path("/proc/net")) -> frozenset[str]:
    """Canonical text of every local IPv4 and IPv6 address; empty if /proc cannot be read."""
    found: set[str] = set()
    try:
        lines = (proc / "fib_trie").read_text().splitlines()
    except OSError:
        lines = []
    for previous, line in zip(lines, lines[1:]):
        if line.strip() == "/32 host LOCAL" and previous.strip().startswith("|-- "):
            found.add(str(ipaddress.ip_address(previous.strip()[4:])))
    try:
        for line in (proc / "if_inet6").read_text().splitlines():
            hexa = line.split()[0] if line.split() else ""
            if len(hexa) == 32:
                found.add(str(ipaddress.IPv6Address(bytes.fromhex(hexa))))
    except (OSError, ValueError):
        pass
    return frozenset(found)
