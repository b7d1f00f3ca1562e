"""Graceful termination of IPVS real servers.

A TCP real server that leaves its virtual server is not cut off: it gets
weight 0 (no new connections) and is deleted once IPVS counts no active and
no inactive connections on it, or once ``timeout`` seconds have passed.
UDP and SCTP real servers are deleted at once (kube-proxy does the same;
there is no connection end to wait for in UDP) and the conntrack entries
that still steer packets to them are cleared, or those packets would be lost.

The manager owns the real servers on its list: the proxier must not count
them as its own, and hands one back (``cancel``) when the endpoint returns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from platformd.common.clock import REAL_CLOCK, Clock

from .kernel import (
    SCTP,
    TCP,
    UDP,
    DeleteRealServer,
    Firewall,
    IPVSOp,
    Kernel,
    KernelError,
    NotFound,
    RealServer,
    UpdateRealServer,
    VirtualServer,
)

log = logging.getLogger(__name__)

#: How long a quiesced TCP real server may keep connections before it is
#: deleted anyway. kube-proxy waits without limit; a bound keeps a stuck
#: long-lived connection from pinning a deleted Pod's address forever.
DEFAULT_TIMEOUT = 600.0
#: A terminating real server's counters are read at most this often: each
#: check is a netlink dump, and IPVS updates its counters only every ~2 s.
CHECK_INTERVAL = 1.0


@dataclass
class _Item:
    vs: VirtualServer
    rs: RealServer
    deadline: float
    next_check: float


class GracefulTerminationManager:
    def __init__(self, kernel: Kernel, clock: Clock = REAL_CLOCK, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._kernel = kernel  # its ipvs and firewall subsystems
        self._clock = clock
        self._timeout = timeout
        self._items: dict[tuple, _Item] = {}

    def __len__(self) -> int:
        return len(self._items)

    def terminating(self, vs: VirtualServer, rs_key: tuple[str, int]) -> bool:
        return (vs.key, rs_key) in self._items

    def keys_of(self, vs: VirtualServer) -> set[tuple[str, int]]:
        return {rk for (vk, rk) in self._items if vk == vs.key}

    def remove(self, vs: VirtualServer, rs: RealServer) -> None:
        """Take ``rs`` out of ``vs``: delete now, or quiesce and delete later."""
        self.remove_all(vs, [rs])

    def remove_all(self, vs: VirtualServer, servers: list[RealServer]) -> None:
        """:meth:`remove` for several real servers of ``vs``: one listing of
        ``vs``'s counters and one batch of deletions/weight changes."""
        if not servers:
            return
        if vs.protocol != TCP:
            self._apply(vs, [DeleteRealServer(vs, rs) for rs in servers])
            if vs.protocol in (UDP, SCTP):
                for rs in servers:
                    clear_conntrack(self._kernel.firewall, vs, rs.address)
            return
        counters = self._counters(vs)
        now = self._clock.monotonic()
        ops: list[IPVSOp] = []
        for rs in servers:
            if not counters.get(rs.key):  # idle, or not there: nothing to wait for
                ops.append(DeleteRealServer(vs, rs))
                continue
            if rs.weight != 0:
                ops.append(UpdateRealServer(vs, RealServer(rs.address, rs.port, 0)))
            self._items[(vs.key, rs.key)] = _Item(vs, rs, now + self._timeout, now + CHECK_INTERVAL)
        self._apply(vs, ops)

    def _apply(self, vs: VirtualServer, ops: list[IPVSOp]) -> None:
        """Apply ``ops``; a real server already gone is fine, other errors are raised."""
        if not ops:
            return
        for op, error in zip(ops, self._kernel.ipvs.apply(ops)):
            if error is None or isinstance(error, NotFound):
                continue
            if type(op) is UpdateRealServer:
                self._items.pop((vs.key, op.rs.key), None)
            raise error

    def _counters(self, vs: VirtualServer) -> dict[tuple[str, int], int]:
        """Active + inactive connections per real server of ``vs`` (empty when it is gone)."""
        try:
            return {s.server.key: s.active_connections + s.inactive_connections
                    for s in self._kernel.ipvs.list_real_servers(vs)}
        except NotFound:
            return {}

    def cancel(self, vs: VirtualServer, rs_key: tuple[str, int]) -> bool:
        """Stop terminating ``rs_key`` of ``vs`` (its endpoint is back). True if it was terminating."""
        return self._items.pop((vs.key, rs_key), None) is not None

    def forget_virtual(self, vs: VirtualServer) -> None:
        """``vs`` was deleted, and its real servers with it."""
        for key in [k for k in self._items if k[0] == vs.key]:
            del self._items[key]

    def process(self) -> int:
        """Delete the terminating real servers that are idle or out of time.

        Each is checked at most every CHECK_INTERVAL, with one listing and
        one batch of deletions per virtual server involved. Returns how many
        were deleted.
        """
        now = self._clock.monotonic()
        by_vs: dict[tuple, list[_Item]] = {}
        for item in self._items.values():
            if now >= item.next_check or now >= item.deadline:
                item.next_check = now + CHECK_INTERVAL
                by_vs.setdefault(item.vs.key, []).append(item)
        deleted = 0
        for items in by_vs.values():
            vs = items[0].vs
            counters = self._counters(vs)
            doomed = []
            for item in items:
                conns = counters.get(item.rs.key)
                if conns is None:
                    self._items.pop((vs.key, item.rs.key), None)  # already gone
                elif conns == 0 or now >= item.deadline:
                    if conns:
                        log.info("deleting real server %s of %s with %d connections: "
                                 "graceful termination timed out", item.rs, vs, conns)
                    doomed.append(item)
            self._apply(vs, [DeleteRealServer(vs, item.rs) for item in doomed])
            for item in doomed:
                self._items.pop((vs.key, item.rs.key), None)
            deleted += len(doomed)
        return deleted


def clear_conntrack(firewall: Firewall, vs: VirtualServer, real_address: str | None) -> None:
    """Clear ``vs``'s conntrack entries (to ``real_address`` only, if given).

    Best effort, as in kube-proxy: a failure (no conntrack tool, say) costs
    some lost datagrams until the entries time out, while raising would fail
    every sync that retries it. So it is logged, not raised.
    """
    try:
        firewall.clear_conntrack(vs.protocol, vs.address, vs.port, real_address)
    except KernelError as err:
        log.warning("cannot clear conntrack entries of %s%s: %s", vs,
                    f" to {real_address}" if real_address else "", err)
