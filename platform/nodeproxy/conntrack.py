"""``conntrack -D``: the command that deletes the entries of one service
destination, and the count read back from its output.

Shared by both modes' kernel doors (:class:`~.kernel_firewall.LinuxFirewall`,
:class:`~.nftkernel.NftCli`), which run the tool each their own way. Why a
tool and not netlink: it runs when a UDP endpoint goes or a quiesced real
server is deleted, a few times per sync at most.
"""

from __future__ import annotations

import re

from .kernel import KernelError

__all__ = ["delete_command", "deleted_count"]

# "conntrack v1.4.7 (conntrack-tools): 2 flow entries have been deleted."
# ("1 flow entry has been deleted."); printed on stderr.
_DELETED = re.compile(r"(\d+) flow entr(?:y|ies) (?:has|have) been deleted")


def delete_command(tool: str, protocol: str, address: str, port: int, real_address: str | None = None) -> list[str]:
    """argv deleting the entries to ``address:port`` of ``protocol`` (answered
    by ``real_address`` only, if given). ``-f`` names the family: without it
    conntrack looks at IPv4 entries only."""
    family = "ipv6" if ":" in address else "ipv4"
    argv = [tool, "-D", "-f", family, "-p", protocol.lower(), "--orig-dst", address, "--dport", str(port)]
    if real_address is not None:
        argv += ["--reply-src", real_address]
    return argv


def deleted_count(returncode: int, stdout: str, stderr: str) -> int:
    """How many entries the run deleted. The exit status is 1 when nothing
    matched, which is not an error; any other failure raises :class:`KernelError`."""
    found = _DELETED.search(stderr + "\n" + stdout)
    if found:
        return int(found.group(1))
    if returncode != 0:
        raise KernelError(f"conntrack -D: {stderr.strip() or f'exit status {returncode}'}")
    return 0
