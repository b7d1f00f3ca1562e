"""A small routed "node" with pods and an outside client, for end-to-end tests.

Layout (all inside the VM; nothing leaves it)::

    outside ns  192.168.50.2 --veth-- 192.168.50.1  node ns (the test's own;
                                                    the node proxy runs here)
    pod-X ns    10.244.N.2   --veth-- 10.244.N.1

With ``ipv6=True`` every link also gets IPv6 (``fd00:50::2``/``fd00:50::1``
outside, ``fd00:244:N::2``/``fd00:244:N::1`` for pod N, without duplicate
address detection so they work at once) and the backends listen on both
families.

Every pod has its own point-to-point link with a default route to the node,
as with routed CNI plugins: traffic between pods always crosses the node's
routing, so IPVS sees both directions of every connection (on a shared
bridge a backend would answer a pod client directly, around IPVS).

Backends are sockets created inside a pod's namespace and served by threads
of the test process: a socket stays in the namespace it was created in,
whichever thread uses it later. Each answers with its pod's name:

* TCP port 8080: sends ``NAME\\n`` on connect, then echoes each line back
  with ``NAME:`` in front, until the client closes;
* UDP port 5353: answers every datagram with ``NAME``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field

from . import netns
from .netns import sh

NODE_IP = "192.168.50.1"
OUTSIDE_IP = "192.168.50.2"
NODE_IP6 = "fd00:50::1"
OUTSIDE_IP6 = "fd00:50::2"
TCP_PORT = 8080
UDP_PORT = 5353


@dataclass
class Pod:
    name: str
    ns: str
    ip: str
    ip6: str = ""
    _sockets: list[socket.socket] = field(default_factory=list, repr=False)

    def serve(self) -> None:
        with netns.entered(self.ns):
            if self.ip6:
                tcp = socket.create_server(("::", TCP_PORT), family=socket.AF_INET6, backlog=64, dualstack_ipv6=True)
                udp = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
                udp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                udp.bind(("::", UDP_PORT))
            else:
                tcp = socket.create_server(("0.0.0.0", TCP_PORT), backlog=64)
                udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                udp.bind(("0.0.0.0", UDP_PORT))
        self._sockets += [tcp, udp]
        threading.Thread(target=self._accept, args=(tcp,), daemon=True, name=f"{self.name}-tcp").start()
        threading.Thread(target=self._answer, args=(udp,), daemon=True, name=f"{self.name}-udp").start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.sendall(f"{self.name}\n".encode())
                reader = conn.makefile("rb")
                for line in reader:
                    conn.sendall(f"{self.name}:".encode() + line)
            except OSError:
                pass

    def _answer(self, udp: socket.socket) -> None:
        while True:
            try:
                _, peer = udp.recvfrom(2048)
                if peer is None:  # shut down
                    return
                udp.sendto(self.name.encode(), peer)
            except OSError:
                return

    def close(self) -> None:
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


class Client:
    """Opens sockets inside one namespace (a pod's or the outside one)."""

    def __init__(self, ns: str) -> None:
        self.ns = ns

    def connect(self, address: str, port: int, timeout: float = 5.0) -> "Connection":
        with netns.entered(self.ns):
            s = socket.socket(_family(address), socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect((address, port))
        except OSError:
            s.close()
            raise
        return Connection(s)

    def ask_tcp(self, address: str, port: int) -> str:
        """Connect, read the backend's name, close. Returns the name."""
        conn = self.connect(address, port)
        try:
            return conn.greeting
        finally:
            conn.close(reset=True)

    def ask_udp(self, address: str, port: int, timeout: float = 3.0) -> str:
        """One datagram from a fresh socket (a new source port each time)."""
        with self.udp_flow(address, port, timeout) as flow:
            return flow.ask()

    def udp_flow(self, address: str, port: int, timeout: float = 3.0) -> "UdpFlow":
        """A UDP socket that keeps its source port: one flow for IPVS."""
        with netns.entered(self.ns):
            s = socket.socket(_family(address), socket.SOCK_DGRAM)
        s.settimeout(timeout)
        s.connect((address, port))
        return UdpFlow(s)


def _family(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


class UdpFlow:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def ask(self) -> str:
        """Send one datagram; return the name in the answer."""
        self.sock.send(b"who")
        return self.sock.recv(2048).decode()

    def __enter__(self) -> "UdpFlow":
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()


class Connection:
    """An open TCP connection to a backend; ``greeting`` is its name."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._reader = sock.makefile("rb")
        self.greeting = self._reader.readline().decode().strip()
        if not self.greeting:
            raise ConnectionError("connection closed before the backend answered")

    def echo(self, text: str) -> str:
        self.sock.sendall(f"{text}\n".encode())
        return self._reader.readline().decode().strip()

    def close(self, reset: bool = False) -> None:
        """Close; with ``reset`` send RST so IPVS forgets the connection
        within its 10 s CLOSE timeout rather than TIME_WAIT's 2 minutes."""
        if reset:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self._reader.close()
        self.sock.close()


class Topology:
    """Pods and the outside client around the current (node) namespace."""

    def __init__(self, pod_names: tuple[str, ...], ipv6: bool = False) -> None:
        self.pods: dict[str, Pod] = {}
        self.namespaces: list[str] = []
        self.ipv6 = ipv6
        self.outside = Client(self._peer("outside", "ext0", NODE_IP, OUTSIDE_IP, 24,
                                         (NODE_IP6, OUTSIDE_IP6) if ipv6 else None))
        for i, name in enumerate(pod_names, start=1):
            six = (f"fd00:244:{i}::1", f"fd00:244:{i}::2") if ipv6 else None
            ns = self._peer(name, f"veth-{name}"[:15], f"10.244.{i}.1", f"10.244.{i}.2", 24, six)
            self.pods[name] = Pod(name, ns, f"10.244.{i}.2", six[1] if six else "")

    def _peer(self, name: str, link: str, node_ip: str, peer_ip: str, prefix: int,
              six: tuple[str, str] | None = None) -> str:
        ns = netns.create(f"{name}-")
        self.namespaces.append(ns)
        sh("ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "addr", "add", f"{node_ip}/{prefix}", "dev", link)
        sh("ip", "-n", ns, "addr", "add", f"{peer_ip}/{prefix}", "dev", "eth0")
        if six:
            sh("ip", "addr", "add", f"{six[0]}/64", "dev", link, "nodad")
            sh("ip", "-n", ns, "addr", "add", f"{six[1]}/64", "dev", "eth0", "nodad")
        sh("ip", "link", "set", link, "up")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", node_ip)
        if six:
            sh("ip", "-n", ns, "-6", "route", "add", "default", "via", six[0])
        return ns

    def client(self, pod: str) -> Client:
        return Client(self.pods[pod].ns)

    def serve(self) -> None:
        for pod in self.pods.values():
            pod.serve()

    def close(self) -> None:
        for pod in self.pods.values():
            pod.close()
        for ns in self.namespaces:
            netns.delete(ns)
