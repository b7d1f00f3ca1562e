"""kernel_common.NetlinkSubsystem: the socket opened once on first use, its
counters, close, and apply/_one over a subclass's _apply."""

from __future__ import annotations

import pytest

from platformd.nodeproxy.kernel import KernelError
from platformd.nodeproxy.kernel_common import NetlinkSubsystem


class _Socket:
    def __init__(self) -> None:
        self.round_trips, self.busy_seconds, self.closed = 7, 0.5, False

    def close(self) -> None:
        self.closed = True


class _Sub(NetlinkSubsystem[str]):
    def __init__(self) -> None:
        super().__init__()
        self.opened: list[_Socket] = []

    def _open(self):
        self.opened.append(_Socket())
        return self.opened[-1]

    def _apply(self, ops):
        self._socket()
        return [KernelError(f"refused {op}") if op == "bad" else None for op in ops]


def test_socket_opens_on_first_use_only_and_counts_from_then():
    sub = _Sub()
    assert (sub.round_trips, sub.busy_seconds) == (0, 0.0)
    assert sub.apply([]) == [] and sub.opened == []  # an empty batch opens nothing
    assert sub.apply(["a", "b"]) == [None, None]
    sub.apply(["c"])
    assert len(sub.opened) == 1
    assert (sub.round_trips, sub.busy_seconds) == (7, 0.5)
    sub.close()
    assert sub.opened[0].closed and (sub.round_trips, sub.busy_seconds) == (0, 0.0)
    sub.apply(["d"])
    assert len(sub.opened) == 2  # reopened after close


def test_one_raises_the_error_of_its_op():
    sub = _Sub()
    sub._one("fine")
    with pytest.raises(KernelError, match="refused bad"):
        sub._one("bad")
