"""The real :class:`~platformd.nodeproxy.kernel.Kernel`: the Linux subsystems, bundled.

One module per subsystem, each the only one to talk to its part of the kernel:

* :mod:`.kernel_ipvs` -- IPVS services and destinations (generic netlink);
* :mod:`.kernel_addresses` -- the dummy link and its addresses (rtnetlink);
* :mod:`.kernel_ipsets` -- ipsets and their members (nfnetlink);
* :mod:`.kernel_firewall` -- iptables and conntrack (their tools);
* :mod:`.kernel_sysctl` -- ``/proc/sys``;

and :mod:`.kernel_common` for what they share (errno translation, batches,
modprobe). This module holds them together and checks, before anything is
done, that the kernel has what they need (:meth:`LinuxKernel.probe`).

Why hand-encoded netlink: the objects counted by the thousand (IPVS
services and destinations, the dummy link's addresses, ipset members) go
through plain :class:`.netlink.NetlinkSocket` sockets opened once, messages
encoded by hand, many per ``sendmsg``, errors mapped back per message.
pyroute2 costs 1.3-2.7 ms per call on the host and ~40 ms under the test
VM's emulation (one endpoint change took 0.24 s there, a 1,000-Service
initial sync 325 s for 8,032 calls, a full resync 143 s); the kernel needs
microseconds per operation, so the round trip is what must be shared. Each
subsystem's ``apply`` is its bulk door. pyroute2 is not used at all:
importing it alone takes 7-18 s under the test VM's emulation (0.3 s on the
host), before any work.

Every error leaves these modules as one of the exceptions in :mod:`.kernel`.

Hand-encoded messages also avoid pyroute2 0.9.7's pitfalls met on a real
kernel (``IPVSDest`` defaulting to direct routing, ``dest("update")``
sending a delete, untyped timeout attributes, ipset port members needing
``PortEntry``, ``from_message`` reporting class defaults).
"""

from __future__ import annotations

import os
import re
from typing import Callable, Iterable

from .kernel import IPVSUnavailable, KernelError
from .kernel_addresses import LinuxAddresses
from .kernel_common import modprobe
from .kernel_firewall import LinuxFirewall
from .kernel_ipsets import LinuxIPSets
from .kernel_ipvs import LinuxIPVS
from .kernel_sysctl import LinuxSysctl

__all__ = ["LinuxKernel", "modprobe"]

_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


class LinuxKernel:
    """:class:`~platformd.nodeproxy.kernel.Kernel` on the running Linux kernel.

    Sockets are opened on first use, so constructing one never fails; the
    IPVS socket needs the ``ip_vs`` module, which :meth:`probe` loads. Each
    socket stays in the network namespace of the thread that first used it,
    while the tools (iptables, conntrack), /proc and /proc/sys follow the
    calling thread: use one instance from one namespace.
    ``module_loader`` loads one kernel module by name and says whether it
    worked (default :func:`modprobe`). Thread-safe exactly as far as the
    interface allows: the addresses have a socket of their own, so an
    ``addresses.apply`` may run alongside the other subsystems; anything
    else must not overlap.

    ``round_trips`` counts exchanges with the kernel: netlink round trips
    and tool runs; :attr:`busy_seconds` the time they took.
    """

    def __init__(self, *, module_loader: Callable[[str], bool] = modprobe,
                 iptables: str = "iptables", conntrack: str = "conntrack") -> None:
        self._load_module = module_loader
        self.ipvs = LinuxIPVS()
        self.addresses = LinuxAddresses()
        self.ipset = LinuxIPSets()
        self.firewall = LinuxFirewall(iptables=iptables, conntrack=conntrack)
        self.sysctl = LinuxSysctl()

    @property
    def round_trips(self) -> int:
        return sum(s.round_trips for s in (self.ipvs, self.addresses, self.ipset, self.firewall))

    @property
    def busy_seconds(self) -> dict[str, float]:
        """Seconds spent so far waiting on the kernel, by door: ``ipvs``
        (generic netlink and ``/proc/net/ip_vs``), ``rtnetlink`` (the dummy
        link and its addresses), ``ipset`` (nfnetlink) and ``tools``
        (iptables, conntrack). What is left of a call's time is the
        adapters' Python (encoding, decoding). For the benchmark's breakdown.
        """
        return {"ipvs": self.ipvs.busy_seconds, "rtnetlink": self.addresses.busy_seconds,
                "ipset": self.ipset.busy_seconds, "tools": self.firewall.busy_seconds}

    def close(self) -> None:
        for subsystem in (self.ipvs, self.addresses, self.ipset):
            subsystem.close()

    # -- availability -------------------------------------------------------------
    def probe(self, schedulers: Iterable[str] = ("rr",)) -> None:
        self._require_module("ip_vs", lambda: os.path.exists("/proc/net/ip_vs"))
        for scheduler in schedulers:
            self.ipvs.probe_scheduler(scheduler)
        # Both have module parameters, so /sys/module/NAME exists whether they
        # are built in or loaded.
        self._require_module("dummy", lambda: os.path.exists("/sys/module/dummy"))
        self._require_module("ip_set", lambda: os.path.exists("/sys/module/ip_set"))

    def _require_module(self, module: str, present: Callable[[], bool]) -> None:
        if present():
            return
        loaded = self._load_module(module)
        if not present():
            how = "modprobe failed" if loaded is False else "loaded but not usable"
            raise IPVSUnavailable(module, f"not built in and {how}")

    def kernel_version(self) -> tuple[int, int, int]:
        match = _RELEASE.match(os.uname().release)
        if match is None:
            raise KernelError(f"cannot parse kernel release {os.uname().release!r}")
        major, minor, patch = match.groups()
        return (int(major), int(minor), int(patch or 0))
