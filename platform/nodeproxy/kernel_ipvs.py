"""The IPVS subsystem on Linux: :class:`~.kernel.IPVS` through generic netlink.

IPVS services and destinations -- counted by the thousand -- go through one
plain :class:`.netlink.NetlinkSocket` opened once, messages encoded by hand
(:mod:`.ipvs_netlink`), many per ``sendmsg``, errors mapped back per message
(see :mod:`.kernel_linux` for why not pyroute2). Bulk reading
(:meth:`LinuxIPVS.list_ipvs`) is one GET_SERVICE dump plus one read of
``/proc/thread-self/net/ip_vs`` for every destination (the netlink API needs
a dump per service; the file has everything a destination needs here, but
not the services' scheduler flags).
"""

from __future__ import annotations

import errno
import os
import time
from itertools import groupby
from pathlib import Path
from typing import Sequence

from . import ipvs_netlink as ipvsnl
from .kernel import (
    AddRealServer,
    AddVirtualServer,
    DeleteRealServer,
    DeleteVirtualServer,
    IPVSOp,
    IPVSUnavailable,
    KernelError,
    RealServer,
    RealServerState,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
)
from .kernel_common import NetlinkSubsystem, _batch, _error, _translate
from .netlink import NETLINK_GENERIC, NetlinkSocket, genl_family

__all__ = ["LinuxIPVS"]

# The scheduler probe creates and deletes a firewall-mark service; this mark
# is far above anything iptables rules of the node proxy use.
_PROBE_FWMARK = 0x7FFF_FFF0

_IPVS_METHODS = {
    AddVirtualServer: ipvsnl.CMD_NEW_SERVICE,
    UpdateVirtualServer: ipvsnl.CMD_SET_SERVICE,
    DeleteVirtualServer: ipvsnl.CMD_DEL_SERVICE,
    AddRealServer: ipvsnl.CMD_NEW_DEST,
    UpdateRealServer: ipvsnl.CMD_SET_DEST,
    DeleteRealServer: ipvsnl.CMD_DEL_DEST,
}
_DEST_COMMANDS = {op: _IPVS_METHODS[op] for op in (AddRealServer, UpdateRealServer, DeleteRealServer)}
_PROC_IP_VS = Path("/proc/thread-self/net/ip_vs")


def _describe(op: IPVSOp) -> str:
    args = op
    return {
        AddVirtualServer: lambda: f"adding virtual server {args[0]}",
        UpdateVirtualServer: lambda: f"updating virtual server {args[0]}",
        DeleteVirtualServer: lambda: f"deleting virtual server {args[0]}",
        AddRealServer: lambda: f"adding real server {args[1]} to {args[0]}",
        UpdateRealServer: lambda: f"setting weight of {args[1]} in {args[0]}",
        DeleteRealServer: lambda: f"deleting real server {args[1]} from {args[0]}",
    }[type(op)]()


class LinuxIPVS(NetlinkSubsystem[IPVSOp]):
    """:class:`~.kernel.IPVS` on the running kernel. The socket is opened on
    first use (it needs the ``ip_vs`` module) and stays in the network
    namespace of the thread that first used it."""

    def __init__(self) -> None:
        super().__init__()
        self._ipvs_family = 0
        self._proc_seconds = 0.0

    @property
    def busy_seconds(self) -> float:
        return super().busy_seconds + self._proc_seconds

    def _open(self) -> NetlinkSocket:
        sock = NetlinkSocket(NETLINK_GENERIC)
        try:
            self._ipvs_family = genl_family(sock, ipvsnl.FAMILY)
        except OSError as exc:
            sock.close()
            raise IPVSUnavailable("ip_vs", f"generic netlink family IPVS: {exc.strerror}") from exc
        return sock

    def probe_scheduler(self, scheduler: str) -> None:
        # The kernel loads ip_vs_<name> on demand when a service asks for it;
        # creating a throw-away firewall-mark service is the one test that
        # covers built-in, loadable and missing schedulers alike.
        sock = self._socket()
        add = ipvsnl.fwmark_service(ipvsnl.CMD_NEW_SERVICE, _PROBE_FWMARK, scheduler)
        delete = ipvsnl.fwmark_service(ipvsnl.CMD_DEL_SERVICE, _PROBE_FWMARK, scheduler)
        [code] = _batch(sock, [(self._ipvs_family, 0, add)])
        if code and code != errno.EEXIST:
            raise IPVSUnavailable(f"ip_vs_{scheduler}", f"scheduler rejected: {os.strerror(code)}")
        [code] = _batch(sock, [(self._ipvs_family, 0, delete)])
        if code:
            raise _error(code, "deleting the scheduler probe service")


    def _apply(self, ops: Sequence[IPVSOp]) -> list[KernelError | None]:
        sock = self._socket()
        family = self._ipvs_family
        requests: list[tuple[int, int, bytes]] = []
        for method, run in groupby(ops, key=type):
            if method in _DEST_COMMANDS:  # the many: encoded in one go
                payloads = ipvsnl.dests(_DEST_COMMANDS[method], list(run))
            else:  # virtual servers
                cmd = _IPVS_METHODS[method]
                payloads = [ipvsnl.service(cmd, vs) for (vs,) in run]
            requests += [(family, 0, payload) for payload in payloads]
        codes = _batch(sock, requests)
        if not any(codes):
            return [None] * len(ops)
        return [None if code == 0 else _error(code, _describe(op)) for op, code in zip(ops, codes)]


    def list_ipvs(self) -> dict[VirtualServer, list[RealServerState]]:
        services = self.list_virtual_servers()
        started = time.perf_counter()
        try:
            text = _PROC_IP_VS.read_text()
        except OSError:
            return {vs: self.list_real_servers(vs) for vs in services}
        finally:
            self._proc_seconds += time.perf_counter() - started
        dests = ipvsnl.parse_proc_dests(text)
        return {vs: sorted(dests.get(vs.key, ()), key=lambda s: s.server.key) for vs in services}

    # -- IPVS virtual servers ----------------------------------------------------
    def _ipvs_dump(self, payload: bytes, what: str):
        sock = self._socket()
        try:
            return sock.dump(self._ipvs_family, payload)
        except OSError as exc:
            raise _translate(exc, what) from exc

    def list_virtual_servers(self) -> list[VirtualServer]:
        bodies = self._ipvs_dump(ipvsnl.get_services(), "listing IPVS services")
        return sorted(vs for vs in map(ipvsnl.parse_service, bodies) if vs is not None)

    def add_virtual_server(self, vs: VirtualServer) -> None:
        self._one(AddVirtualServer(vs))

    def update_virtual_server(self, vs: VirtualServer) -> None:
        self._one(UpdateVirtualServer(vs))

    def delete_virtual_server(self, vs: VirtualServer) -> None:
        self._one(DeleteVirtualServer(vs))

    # -- IPVS real servers -------------------------------------------------------
    def list_real_servers(self, vs: VirtualServer) -> list[RealServerState]:
        what = f"listing real servers of {vs}"
        bodies = self._ipvs_dump(ipvsnl.get_dests(vs), what)
        if not bodies:
            # A dump for a missing service is empty rather than an error.
            try:
                self._socket().request(self._ipvs_family, ipvsnl.service(ipvsnl.CMD_GET_SERVICE, vs))
            except OSError as exc:
                raise _translate(exc, what) from exc
        states = [s for s in map(ipvsnl.parse_dest, bodies) if s is not None]
        return sorted(states, key=lambda s: s.server.key)

    def add_real_server(self, vs: VirtualServer, rs: RealServer) -> None:
        self._one(AddRealServer(vs, rs))

    def update_real_server(self, vs: VirtualServer, rs: RealServer) -> None:
        self._one(UpdateRealServer(vs, rs))

    def delete_real_server(self, vs: VirtualServer, rs: RealServer) -> None:
        self._one(DeleteRealServer(vs, rs))

    def set_ipvs_timeouts(self, tcp: int, tcp_fin: int, udp: int) -> None:
        if not (tcp or tcp_fin or udp):
            return
        [code] = _batch(self._socket(), [(self._ipvs_family, 0, ipvsnl.set_timeouts(tcp, tcp_fin, udp))])
        if code:
            raise _error(code, "setting IPVS timeouts")

