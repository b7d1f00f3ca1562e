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

from .kernel import SCTP, TCP, UDP, Kernel, KernelError, NotFound, RealServer, VirtualServer

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
        self._kernel = kernel
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
        if vs.protocol != TCP:
            self._delete(vs, rs)
            if vs.protocol in (UDP, SCTP):
                clear_conntrack(self._kernel, vs, rs.address)
            return
        if self._idle(vs, rs):
            self._delete(vs, rs)
            return
        if rs.weight != 0:
            self._kernel.update_real_server(vs, RealServer(rs.address, rs.port, 0))
        now = self._clock.monotonic()
        self._items[(vs.key, rs.key)] = _Item(vs, rs, now + self._timeout, now + CHECK_INTERVAL)

    def cancel(self, vs: VirtualServer, rs_key: tuple[str, int]) -> bool:
        """Stop terminating ``rs_key`` of ``vs`` (its endpoint is back). True if it was terminating."""
        return self._items.pop((vs.key, rs_key), None) is not None

    def forget_virtual(self, vs: VirtualServer) -> None:
        """``vs`` was deleted, and its real servers with it."""
        for key in [k for k in self._items if k[0] == vs.key]:
            del self._items[key]

    def process(self) -> int:
        """Delete the terminating real servers that are idle or out of time.

        Each is checked at most every CHECK_INTERVAL, with one listing per
        virtual server involved. Returns how many were deleted.
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
            try:
                counters = {s.server.key: s.active_connections + s.inactive_connections
                            for s in self._kernel.list_real_servers(vs)}
            except NotFound:
                counters = {}
            for item in items:
                conns = counters.get(item.rs.key)
                if conns is None:
                    self._items.pop((vs.key, item.rs.key), None)  # already gone
                elif conns == 0 or now >= item.deadline:
                    if conns:
                        log.info("deleting real server %s of %s with %d connections: "
                                 "graceful termination timed out", item.rs, vs, conns)
                    self._delete(vs, item.rs)
                    self._items.pop((vs.key, item.rs.key), None)
                    deleted += 1
        return deleted

    def _idle(self, vs: VirtualServer, rs: RealServer) -> bool:
        try:
            for s in self._kernel.list_real_servers(vs):
                if s.server.key == rs.key:
                    return s.active_connections + s.inactive_connections == 0
        except NotFound:
            pass
        return True  # not there: nothing to wait for

    def _delete(self, vs: VirtualServer, rs: RealServer) -> None:
        try:
            self._kernel.delete_real_server(vs, rs)
        except NotFound:
            pass


def clear_conntrack(kernel: Kernel, vs: VirtualServer, real_address: str | None) -> None:
    """Clear ``vs``'s conntrack entries (to ``real_address`` only, if given).

    Best effort, as in kube-proxy: a failure (no conntrack tool, say) costs
    some lost datagrams until the entries time out, while raising would fail
    every sync that retries it. So it is logged, not raised.
    """
    try:
        kernel.clear_conntrack(vs.protocol, vs.address, vs.port, real_address)
    except KernelError as err:
        log.warning("cannot clear conntrack entries of %s%s: %s", vs,
                    f" to {real_address}" if real_address else "", err)
