"""``--dry-run``: print the kernel operations the node proxy would do.

:class:`DryRunKernel` keeps the would-be state in a :class:`FakeKernel` (so
later syncs print only their difference, exactly like the real run) and
writes one line per state-changing call. It never changes the real kernel,
so it works on a kernel without IPVS. The model starts empty: the first sync
prints what a node without any of our state would get. Sysctls are the one
exception: their current values are read from ``/proc/sys`` (read-only) when
it has them, so only the ones that would really change are printed.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import threading
from typing import Any, TextIO

from .fakekernel import FakeKernel
from .kernel import MUTATING_METHODS, AnyOp, IPSetSpec, KernelError, RealServer, VirtualServer, apply_one_by_one


def _fmt(value: Any, brief: bool = False) -> str:
    if type(value) is tuple:  # iptables rule arguments (kernel values are tuples too)
        return shlex.join(value)
    if isinstance(value, VirtualServer) and not brief:
        extra = f" persistence={value.persistence_timeout}s" if value.persistence_timeout else ""
        return f"{value} scheduler={value.scheduler}{extra}" + (f" flags={value.flags:#x}" if value.flags else "")
    if isinstance(value, RealServer):
        return f"{value} weight={value.weight}"
    if isinstance(value, IPSetSpec):
        return f"{value.name} {value.set_type}"
    if isinstance(value, str) and "\n" in value:
        return "\n" + "\n".join("    " + line for line in value.rstrip("\n").splitlines())
    return str(value)


class DryRunKernel:
    """A :class:`Kernel` that prints changes and applies them to an in-memory model.

    Like the model, one object is all five subsystems.
    """

    @property
    def ipvs(self) -> "DryRunKernel":
        return self

    @property
    def addresses(self) -> "DryRunKernel":
        return self

    @property
    def ipset(self) -> "DryRunKernel":
        return self

    @property
    def firewall(self) -> "DryRunKernel":
        return self

    @property
    def sysctl(self) -> "DryRunKernel":
        return self

    def __init__(self, out: TextIO | None = None, model: FakeKernel | None = None, label: str = "dry-run") -> None:
        """``label`` starts each line (the IPv6 rules' kernel says ``dry-run ip6tables``)."""
        self.out = out or sys.stdout
        self.label = label
        self.model = model or FakeKernel()
        # The kernel interface lets the dummy link's addresses be applied on
        # a thread of their own: a batch's lines stay together.
        self._lock = threading.RLock()

    def probe(self, schedulers: Any = ("rr",)) -> None:
        return None  # nothing is needed to print

    def read_sysctl(self, name: str) -> str:
        try:
            with open(os.path.join("/proc/sys", name)) as f:
                return f.read().strip()
        except OSError:
            return self.model.read_sysctl(name)

    def kernel_version(self) -> tuple[int, int, int]:
        """The host's version, so version-dependent sysctls print as they would apply."""
        nums = re.findall(r"\d+", os.uname().release)[:3]
        return tuple(int(n) for n in (nums + ["0", "0", "0"])[:3])  # type: ignore[return-value]

    def apply(self, ops: list[AnyOp]) -> list[KernelError | None]:
        """One printed line per op, as if each were called on its own; the
        lines of one batch are printed together."""
        with self._lock:
            return apply_one_by_one(self, ops)

    def ensure_iptables_rules(self, rules: list[tuple[str, str, tuple[str, ...]]]) -> list[bool]:
        """One printed line per rule, as if each were ensured on its own."""
        return [self.ensure_iptables_rule(table, chain, rule) for table, chain, rule in rules]

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.model, name)
        if name not in MUTATING_METHODS:
            return target

        def printed(*args: Any, **kwargs: Any) -> Any:
            brief = name.endswith("_real_server") or name.startswith("delete_")
            parts = [_fmt(a, brief) for a in args] + [f"{k}={_fmt(v)}" for k, v in kwargs.items()]
            with self._lock:
                print(f"{self.label}: {name} {' '.join(parts)}".rstrip(), file=self.out, flush=True)
                return target(*args, **kwargs)

        return printed
