"""A lean netlink socket: many requests per ``sendmsg``, acks read in bulk.

Why hand-written rather than pyroute2: pyroute2 0.9.7 costs 1.3-2.7 ms per
call even on the host (its asyncio loop, per-message object encoding and
decoding) and ~40 ms per call under the test VM's emulation, where one
endpoint change took 0.24 s and a 1,000-Service initial sync 325 s
(8,032 calls). The kernel itself needs a few microseconds per IPVS/ipset/
address operation; what costs is the round trip. This module sends whole
batches of pre-encoded messages in one system call and maps the acks back
to the requests by sequence number, so N operations cost ceil(N/chunk)
round trips.

Contract:

* :meth:`NetlinkSocket.batch` sends many requests per ``sendmsg`` and
  returns one errno per request (0 = done), in order. The kernel handles the
  messages of one ``sendmsg`` one after the other, synchronously, and
  answers each failing one with an error message carrying its sequence
  number, so a failing request does not stop the ones after it: the caller
  gets per-request results, never all-or-nothing. Only the last request of
  a chunk carries ``NLM_F_ACK``; its ack marks the end of the answers.
* Batches are split into chunks whose acks surely fit the receive buffer
  (:data:`CHUNK_MESSAGES`, :data:`CHUNK_BYTES`): an ack the kernel cannot
  queue is dropped (the socket reports ENOBUFS) and its request would be
  left without a result. The receive buffer is raised with SO_RCVBUFFORCE
  when allowed (root), else SO_RCVBUF.
* ``NETLINK_CAP_ACK`` is set, so an error ack carries only the original
  header, not the whole request.
* :meth:`NetlinkSocket.dump` runs one ``NLM_F_DUMP`` request and returns the
  payloads of its answer messages. A kernel runs one dump per socket at a
  time, so dumps are never pipelined.
* The socket lives in the network namespace of the thread that created it.
  Not thread-safe.

Message layout (``include/uapi/linux/netlink.h``): ``struct nlmsghdr`` =
len u32, type u16, flags u16, seq u32, pid u32 (16 bytes, host order);
attributes are ``struct nlattr`` = len u16, type u16, payload, padded to 4.
"""

from __future__ import annotations

import errno as _errno
import os
import socket
import struct
import time
from typing import Iterable, Iterator, Sequence

NETLINK_ROUTE = 0
NETLINK_NETFILTER = 12
NETLINK_GENERIC = 16

NLM_F_REQUEST = 0x01
NLM_F_MULTI = 0x02
NLM_F_ACK = 0x04
NLM_F_ROOT = 0x100
NLM_F_MATCH = 0x200
NLM_F_DUMP = NLM_F_ROOT | NLM_F_MATCH
NLM_F_EXCL = 0x200  # for NEW requests
NLM_F_CREATE = 0x400

NLMSG_ERROR = 2
NLMSG_DONE = 3

NLA_F_NESTED = 0x8000
NLA_F_NET_BYTEORDER = 0x4000
NLA_TYPE_MASK = 0x3FFF

SOL_NETLINK = 270
NETLINK_CAP_ACK = 10

# Generic netlink controller (include/uapi/linux/genetlink.h).
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2

_HDR = struct.Struct("=IHHII")
_NLA = struct.Struct("=HH")

#: At most this many requests per sendmsg. In the worst case every one of
#: them fails and its error ack (about 1 KiB of receive-buffer truesize each)
#: must fit the receive buffer together; the socket derives its own limit
#: from the buffer size the kernel granted (``chunk_messages``).
CHUNK_MESSAGES = 1024
#: At most this many request bytes per sendmsg (well under the send buffer).
CHUNK_BYTES = 192 * 1024
RCVBUF = 4 * 1024 * 1024
_ACK_TRUESIZE = 1280  # receive buffer one queued error ack may take (generous)
_SO_RCVBUFFORCE = 33
_RECV_BUFFER = 1 << 20  # larger than any datagram the kernel sends (dumps use <= 32 KiB skbs)


class NetlinkError(OSError):
    """A netlink request failed; ``errno`` is positive (kernel codes above 4095 kept as they are)."""


# -- encoding -------------------------------------------------------------------


def attr(kind: int, payload: bytes) -> bytes:
    """One attribute, padded to 4 bytes."""
    length = 4 + len(payload)
    return _NLA.pack(length, kind) + payload + b"\0" * (-length & 3)


def nested(kind: int, *parts: bytes) -> bytes:
    return attr(kind | NLA_F_NESTED, b"".join(parts))


def u8(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=B", value))


def u16(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=H", value))


def u32(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=I", value))


def be16(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("!H", value))


def asciiz(kind: int, text: str) -> bytes:
    return attr(kind, text.encode() + b"\0")


def parse_attrs(data: bytes | memoryview, offset: int = 0, end: int | None = None) -> dict[int, memoryview]:
    """Attributes of ``data[offset:end]`` by type (flags stripped; last one wins)."""
    view = memoryview(data)
    end = len(view) if end is None else end
    found: dict[int, memoryview] = {}
    while offset + 4 <= end:
        length, kind = _NLA.unpack_from(view, offset)
        if length < 4:
            break
        found[kind & NLA_TYPE_MASK] = view[offset + 4:offset + length]
        offset += (length + 3) & ~3
    return found


def iter_attrs(data: bytes | memoryview) -> Iterator[tuple[int, memoryview]]:
    """Every attribute of ``data`` in order (repeated types kept)."""
    view = memoryview(data)
    offset = 0
    while offset + 4 <= len(view):
        length, kind = _NLA.unpack_from(view, offset)
        if length < 4:
            return
        yield kind & NLA_TYPE_MASK, view[offset + 4:offset + length]
        offset += (length + 3) & ~3


def get_u16(v: memoryview) -> int:
    return struct.unpack_from("=H", v)[0]


def get_u32(v: memoryview) -> int:
    return struct.unpack_from("=I", v)[0]


def get_be16(v: memoryview) -> int:
    return struct.unpack_from("!H", v)[0]


def get_str(v: memoryview) -> str:
    return bytes(v).split(b"\0", 1)[0].decode()


# -- the socket -------------------------------------------------------------------


class NetlinkSocket:
    """One netlink socket of ``protocol``; see the module docstring for the contract.

    ``round_trips`` counts sendmsg calls (each followed by reading all its
    answers), for the benchmark's "netlink round trips". ``busy_seconds``
    sums the time spent in those exchanges, from sending to the last answer
    read: the kernel does the work of a request inside the ``send`` (and a
    dump's inside the ``recv``), so this is the kernel's share of the cost,
    apart from the Python that encoded the messages.
    """

    def __init__(self, protocol: int) -> None:
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, protocol)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, RCVBUF)
        except OSError:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        try:
            self._sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        except OSError:
            pass  # older kernels: error acks echo the whole request, still parsed
        self._sock.bind((0, 0))
        self._pid = self._sock.getsockname()[0]
        granted = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        self.chunk_messages = max(1, min(CHUNK_MESSAGES, granted // (2 * _ACK_TRUESIZE)))
        self._seq = 0
        self._buf = bytearray(_RECV_BUFFER)
        self._buf_view = memoryview(self._buf)
        self.round_trips = 0
        self.busy_seconds = 0.0

    def close(self) -> None:
        self._sock.close()

    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFFFF_FFFF or 1
        return self._seq

    @staticmethod
    def message(kind: int, flags: int, seq: int, payload: bytes) -> bytes:
        return _HDR.pack(_HDR.size + len(payload), kind, flags, seq, 0) + payload

    # -- batches of acked requests -------------------------------------------------
    def batch(self, requests: Sequence[tuple[int, int, bytes]]) -> list[int]:
        """Send ``(type, extra flags, payload)`` requests; one errno per request (0 = ok).

        Requests are applied in order; a failing one does not stop the rest.
        Payloads are 4-byte multiples (a family header plus whole attributes
        always is): the kernel finds each next message at an aligned offset.
        """
        results = [0] * len(requests)
        start = 0
        while start < len(requests):
            end, size = start, 0
            limit = min(len(requests), start + self.chunk_messages)
            while end < limit:
                size += _HDR.size + len(requests[end][2])
                if size > CHUNK_BYTES and end > start:
                    break
                end += 1
            self._send_chunk(requests, start, end, results)
            start = end
        return results

    def _send_chunk(self, requests, start: int, end: int, results: list[int]) -> None:
        # The kernel handles a sendmsg's messages synchronously, in order, and
        # answers every failing one with an error message even without
        # NLM_F_ACK. So only the last message asks for an ack: once it has
        # arrived, every earlier error has been queued before it. Successes
        # then cost no answer at all (one recv per chunk instead of one per
        # message). Sequence numbers are consecutive within a chunk, so an
        # answer's sequence number gives its request's index directly.
        count = end - start
        if self._seq + count > 0xFFFF_FFFF:
            self._seq = 0  # never wrap inside a chunk
        first = self._seq + 1
        self._seq += count
        pack, hdr = _HDR.pack, _HDR.size
        parts = [pack(hdr + len(payload), kind, NLM_F_REQUEST | flags, seq, 0) + payload
                 for seq, (kind, flags, payload) in enumerate(requests[start:end - 1], first)]
        kind, flags, payload = requests[end - 1]
        parts.append(pack(hdr + len(payload), kind, NLM_F_REQUEST | NLM_F_ACK | flags, self._seq, 0) + payload)
        last_seq = self._seq
        data = b"".join(parts)
        self.round_trips += 1
        started = time.perf_counter()
        try:
            self._sock.send(data)
            while True:
                for kind, _flags, seq, payload in self._receive():
                    if kind != NLMSG_ERROR or not first <= seq <= last_seq:
                        continue  # a stale answer of an earlier, abandoned exchange
                    results[start + seq - first] = -struct.unpack_from("=i", payload)[0]
                    if seq == last_seq:
                        return
        finally:
            self.busy_seconds += time.perf_counter() - started

    # -- dumps and single requests ------------------------------------------------------
    def dump(self, kind: int, payload: bytes) -> list[memoryview]:
        """Payloads (after the netlink header) of the answer to one dump request.

        Raises :class:`NetlinkError` when the kernel answers with an error.
        """
        return self._exchange(kind, NLM_F_REQUEST | NLM_F_DUMP, payload, until_done=True)

    def request(self, kind: int, payload: bytes) -> list[memoryview]:
        """One acked request; the payloads of any answers before the ack."""
        return self._exchange(kind, NLM_F_REQUEST | NLM_F_ACK, payload, until_done=False)

    def _exchange(self, kind: int, flags: int, payload: bytes, until_done: bool) -> list[memoryview]:
        seq = self._next_seq()
        self.round_trips += 1
        started = time.perf_counter()
        try:
            self._sock.send(self.message(kind, flags, seq, payload))
            answers: list[memoryview] = []
            while True:
                for mtype, mflags, mseq, body in self._receive():
                    if mseq != seq:
                        continue
                    if mtype == NLMSG_ERROR:
                        code = -struct.unpack_from("=i", body)[0]
                        if code:
                            raise NetlinkError(code, _strerror(code))
                        if not until_done:
                            return answers
                    elif mtype == NLMSG_DONE:
                        return answers
                    else:
                        answers.append(body)
        finally:
            self.busy_seconds += time.perf_counter() - started

    def _receive(self) -> Iterable[tuple[int, int, int, memoryview]]:
        """The messages of one datagram (blocking)."""
        # One buffer, allocated once: recv(1 MiB) would allocate (and shrink)
        # a fresh megabyte per datagram. Answers are copied out of it, since
        # a dump's earlier answers must survive the next recv.
        size = self._sock.recv_into(self._buf)
        view = memoryview(bytes(self._buf_view[:size]))
        offset = 0
        while offset + _HDR.size <= len(view):
            length, kind, flags, seq, _pid = _HDR.unpack_from(view, offset)
            if length < _HDR.size:
                break
            yield kind, flags, seq, view[offset + _HDR.size:offset + length]
            offset += (length + 3) & ~3


def _strerror(code: int) -> str:
    return os.strerror(code) if 0 < code < 4096 else f"netlink error {code}"


def genl_family(sock: NetlinkSocket, name: str) -> int:
    """The id of generic netlink family ``name``. Raises NetlinkError (ENOENT when missing)."""
    payload = struct.pack("=BBH", CTRL_CMD_GETFAMILY, 1, 0) + asciiz(CTRL_ATTR_FAMILY_NAME, name)
    for body in sock.request(GENL_ID_CTRL, payload):
        attrs = parse_attrs(body, 4)
        if CTRL_ATTR_FAMILY_ID in attrs:
            return get_u16(attrs[CTRL_ATTR_FAMILY_ID])
    raise NetlinkError(_errno.ENOENT, f"generic netlink family {name} not found")
