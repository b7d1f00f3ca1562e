"""``platformctl ipvs``: the node's IPVS table, laid out like ``ipvsadm -Ln``.

Read-only: one bulk listing (``IPVS.list_ipvs``), through the same
:class:`~.kernel.IPVS` interface the proxy uses.
"""

from __future__ import annotations

from .kernel import IPVS, Kernel, KernelError, host_port


def format_table(ipvs: IPVS) -> str:
    """The table text for ``ipvs``'s current state (sorted)."""
    lines = ["Prot LocalAddress:Port Scheduler Flags",
             "  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn"]
    table = ipvs.list_ipvs()
    for vs in sorted(table, key=lambda v: v.key):
        flags = f" persistent {vs.persistence_timeout}" if vs.persistence_timeout else ""
        lines.append(f"{vs.protocol:<4} {host_port(vs.address, vs.port)} {vs.scheduler}{flags}")
        for st in sorted(table[vs], key=lambda s: s.server.key):
            rs = st.server
            lines.append(f"  -> {host_port(rs.address, rs.port):<28} Masq    {rs.weight:<6} "
                         f"{st.active_connections:<10} {st.inactive_connections}")
    return "\n".join(lines) + "\n"


def render(kernel: Kernel | None = None) -> str:
    """The running kernel's table. On a kernel error exits with a one-line
    message (``SystemExit``), as befits the command line that calls this."""
    own = kernel is None
    if kernel is None:
        from .kernel_linux import LinuxKernel
        kernel = LinuxKernel()
    try:
        return format_table(kernel.ipvs)
    except KernelError as err:
        raise SystemExit(f"platformctl ipvs: {err}") from None
    finally:
        if own:
            kernel.close()
