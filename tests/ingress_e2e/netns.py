"""Backends in a network namespace, reachable from the host over a veth pair.

The fake API server (like a real one) refuses loopback addresses in
EndpointSlices, so e2e backends need real-looking IPs: ``NetnsBackends``
creates a namespace ``pde<pid><n>`` joined to the host by a veth pair on a
/24 of 10.242.0.0/16 chosen from the pid, gives the namespace side one
address per backend, and runs ``tests.ingress_e2e.echo`` inside it. Names
carry the pid, so parallel runs do not collide; ``close()`` deletes the
namespace (which deletes the veth pair too).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_counter = itertools.count()
ROOT = Path(__file__).resolve().parents[2]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass(frozen=True)
class Backend:
    name: str
    ip: str
    port: int


class NetnsBackends:
    """``NetnsBackends(["b0", "b1"])``: backends b0 at 10.242.X.10:8080, b1 at .11, ..."""

    def __init__(self, names: list[str], port: int = 8080) -> None:
        n = next(_counter)
        self.netns = f"pde{os.getpid()}n{n}"
        self.host_if = f"pdh{os.getpid() % 100000}n{n}"[:15]
        peer_if = f"pdp{os.getpid() % 100000}n{n}"[:15]
        octet = (os.getpid() * 7 + n) % 250 + 1
        self.subnet = f"10.242.{octet}"
        self.gateway = f"{self.subnet}.1"
        self.backends = [Backend(name, f"{self.subnet}.{10 + i}", port) for i, name in enumerate(names)]
        self._proc = None
        try:
            _ip("netns", "add", self.netns)
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", peer_if)
            _ip("link", "set", peer_if, "netns", self.netns)
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.host_if)
            _ip("link", "set", self.host_if, "up")
            _ip("-n", self.netns, "link", "set", "lo", "up")
            _ip("-n", self.netns, "link", "set", peer_if, "up")
            for b in self.backends:
                _ip("-n", self.netns, "addr", "add", f"{b.ip}/24", "dev", peer_if)
            _ip("-n", self.netns, "route", "add", "default", "via", self.gateway)
            self._proc = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, sys.executable, "-m", "tests.ingress_e2e.echo",
                 *[f"{b.ip}:{b.port}={b.name}" for b in self.backends]],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=str(ROOT), text=True)
            if self._proc.stdout.readline().strip() != "ready":
                raise RuntimeError("echo backends did not start")
        except Exception:
            self.close()
            raise

    def __getitem__(self, name: str) -> Backend:
        for b in self.backends:
            if b.name == name:
                return b
        raise KeyError(name)

    def close(self) -> None:
        if self._proc is not None:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=5)
            except Exception:  # noqa: BLE001
                self._proc.kill()
            self._proc = None
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
