"""Network namespaces for the real-kernel tests.

IPVS, ipsets, iptables, conntrack and the /proc/sys/net sysctls are all per
network namespace, so each test runs in a fresh one and leaves nothing behind
for the next: :func:`isolated` moves the calling thread (and so every socket,
thread and subprocess it opens afterwards) into a new namespace and back.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import uuid
from typing import Iterator

from pyroute2 import IPRoute
from pyroute2 import netns as _pyroute2_netns

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def sh(*argv: str, check: bool = True) -> str:
    """Run a command; return its stdout. On failure the message has stderr."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def create(prefix: str = "t") -> str:
    """Create a named namespace (``ip netns add``) with lo up; return its name."""
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    sh("ip", "netns", "add", name)
    sh("ip", "-n", name, "link", "set", "lo", "up")
    return name


def delete(name: str) -> None:
    sh("ip", "netns", "del", name, check=False)


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """Run the body with this thread in namespace ``name``."""
    saved = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        _pyroute2_netns.setns(f"/run/netns/{name}", flags=0)
        try:
            yield
        finally:
            _pyroute2_netns.setns(saved)
    finally:
        os.close(saved)


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """A fresh anonymous namespace for the body (with lo up); freed afterwards.

    unshare(2) in-process costs far less than ``ip netns add`` under
    emulation, and nothing outlives the body.
    """
    saved = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        if _libc.unshare(_CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")
        try:
            with IPRoute() as ipr:
                ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
            yield
        finally:
            _pyroute2_netns.setns(saved)
    finally:
        os.close(saved)
