"""What the Linux adapters of the IPVS mode share: loading modules,
turning an errno into the exceptions of :mod:`.kernel`, and the shape of a
subsystem spoken to over one netlink socket (:class:`NetlinkSubsystem`).

Used by :mod:`.kernel_ipvs`, :mod:`.kernel_addresses`, :mod:`.kernel_ipsets`
and :mod:`.kernel_linux`; nothing here keeps state but a subsystem's socket.
"""

from __future__ import annotations

import errno
import os
import subprocess

from typing import Generic, Sequence, TypeVar

from .kernel import Exists, KernelError, NotFound
from .netlink import NetlinkSocket


def modprobe(module: str) -> bool:
    """Load ``module`` with modprobe; False when it failed or cannot work.

    A kernel built without loadable modules has no ``/proc/modules``; running
    modprobe there only prints noise, so it is not attempted.
    """
    if not os.path.exists("/proc/modules"):
        return False
    try:
        done = subprocess.run(["modprobe", "-q", module], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _errno_of(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    if code is None:
        code = getattr(exc, "errno", None)
    return abs(code) if isinstance(code, int) else None


def _error(code: int | None, what: str, detail: str = "") -> KernelError:
    """The exception of :mod:`.kernel` for errno ``code`` about ``what``."""
    if code in (errno.ENOENT, errno.ESRCH, errno.ENODEV, errno.EADDRNOTAVAIL):
        return NotFound(f"{what}: {os.strerror(code)}")
    if code == errno.EEXIST:
        return Exists(f"{what}: {os.strerror(code)}")
    detail = detail or (os.strerror(code) if code and code < 4096 else f"error {code}")
    return KernelError(f"{what}: {detail}", code)


def _translate(exc: BaseException, what: str) -> KernelError:
    code = _errno_of(exc)
    return _error(code, what, "" if code and code < 4096 else str(exc))


def _batch(sock: NetlinkSocket, requests: list) -> list[int]:
    """``sock.batch``, with a failure of the socket itself (ENOBUFS...) as KernelError."""
    try:
        return sock.batch(requests)
    except OSError as exc:
        raise KernelError(f"netlink batch of {len(requests)} requests: {exc.strerror or exc}", exc.errno) from exc



Op = TypeVar("Op")


class NetlinkSubsystem(Generic[Op]):
    """A kernel subsystem spoken to over one netlink socket of its own.

    The socket is opened by ``_open`` on first use (``_socket``) and stays
    in the network namespace of the thread that opened it; a socket per
    subsystem is what lets their ``apply`` calls run alongside each other.
    ``round_trips`` and ``busy_seconds`` are the socket's counters (0 before
    it is opened). Subclasses write ``_open`` and ``_apply`` (a non-empty
    batch: one result per op, None for success).
    """

    def __init__(self) -> None:
        self._sock: NetlinkSocket | None = None

    def _open(self) -> NetlinkSocket:
        raise NotImplementedError

    def _apply(self, ops: Sequence[Op]) -> list[KernelError | None]:
        raise NotImplementedError

    def _socket(self) -> NetlinkSocket:
        if self._sock is None:
            self._sock = self._open()
        return self._sock

    @property
    def round_trips(self) -> int:
        return self._sock.round_trips if self._sock is not None else 0

    @property
    def busy_seconds(self) -> float:
        return self._sock.busy_seconds if self._sock is not None else 0.0

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None

    def apply(self, ops: Sequence[Op]) -> list[KernelError | None]:
        return self._apply(ops) if ops else []

    def _one(self, op: Op) -> None:
        [error] = self.apply([op])
        if error is not None:
            raise error
