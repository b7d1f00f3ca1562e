"""NetlinkSocket.batch against a fake kernel socket: many messages per send,
only the last acked, errors mapped back to the exact request that failed.

The real kernel is exercised in tests/nodeproxy_realkernel (test_kernel_batch.py);
this fake answers the way the kernel does (an error message for every failing
request, an ack for the one asking for it) so the framing and the mapping of
answers to requests can be checked on any machine.
"""

from __future__ import annotations

import collections
import struct

import pytest

from platformd.nodeproxy import netlink

HDR = struct.Struct("=IHHII")


class FakeKernelSocket:
    """Handles each datagram's messages in order; a payload starting with
    b"FAIL" fails with EEXIST. Answers queue up as one datagram per send."""

    def __init__(self, *args) -> None:
        self.sent: list[list[tuple[int, int, int, bytes]]] = []
        self.answers: collections.deque[bytes] = collections.deque()

    def setsockopt(self, *args) -> None:
        pass

    def getsockopt(self, *args) -> int:
        return 4 * 1024 * 1024

    def bind(self, address) -> None:
        pass

    def getsockname(self):
        return (4242, 0)

    def close(self) -> None:
        pass

    def send(self, data: bytes) -> int:
        messages, offset, answer = [], 0, b""
        while offset < len(data):
            length, kind, flags, seq, _pid = HDR.unpack_from(data, offset)
            payload = data[offset + HDR.size:offset + length]
            messages.append((kind, flags, seq, payload))
            code = 17 if payload.startswith(b"FAIL") else 0
            if code or flags & netlink.NLM_F_ACK:
                body = struct.pack("=i", -code) + HDR.pack(length, kind, flags, seq, 0)
                answer += HDR.pack(HDR.size + len(body), netlink.NLMSG_ERROR, 0, seq, 4242) + body
            offset += (length + 3) & ~3
        self.sent.append(messages)
        self.answers.append(answer)
        return len(data)

    def recv_into(self, buffer) -> int:
        data = self.answers.popleft()
        buffer[:len(data)] = data
        return len(data)


@pytest.fixture
def sock(monkeypatch):
    monkeypatch.setattr(netlink.socket, "socket", FakeKernelSocket)
    s = netlink.NetlinkSocket(netlink.NETLINK_GENERIC)
    yield s
    s.close()


def test_batch_maps_each_error_to_its_request_and_applies_the_rest(sock):
    sock.chunk_messages = 1000
    # Payloads are 4-byte multiples, as netlink wants (whole attributes are).
    requests = [(30, 0, b"FAIL" if i in (0, 999, 1000, 2499) else b"%04d" % i) for i in range(2500)]
    results = sock.batch(requests)
    assert [i for i, code in enumerate(results) if code] == [0, 999, 1000, 2499]
    assert {results[i] for i in (0, 999, 1000, 2499)} == {17}
    fake = sock._sock
    assert [len(chunk) for chunk in fake.sent] == [1000, 1000, 500]  # every request was sent
    assert sock.round_trips == 3
    assert sock.busy_seconds > 0  # the exchanges' time, for the benchmark's breakdown
    for chunk in fake.sent:
        acked = [bool(flags & netlink.NLM_F_ACK) for _kind, flags, _seq, _payload in chunk]
        assert acked == [False] * (len(chunk) - 1) + [True]  # only the last asks for an ack
        assert all(flags & netlink.NLM_F_REQUEST for _kind, flags, _seq, _payload in chunk)
    seqs = [seq for chunk in fake.sent for _kind, _flags, seq, _payload in chunk]
    assert seqs == list(range(seqs[0], seqs[0] + 2500))


def test_batch_keeps_extra_flags_and_splits_by_size(sock):
    big = b"x" * 60_000
    results = sock.batch([(30, netlink.NLM_F_EXCL, big) for _ in range(5)])
    assert results == [0] * 5
    assert [len(chunk) for chunk in sock._sock.sent] == [3, 2]  # CHUNK_BYTES per send
    assert all(flags & netlink.NLM_F_EXCL for chunk in sock._sock.sent for _k, flags, _s, _p in chunk)


def test_answers_of_an_earlier_exchange_are_ignored(sock):
    sock.batch([(30, 0, b"okok")])
    stale = HDR.pack(HDR.size + 4, netlink.NLMSG_ERROR, 0, 1, 4242) + struct.pack("=i", -17)
    original = sock._sock.send

    def send_after_stale(data: bytes) -> int:
        sent = original(data)
        sock._sock.answers.appendleft(stale)  # seq 1: the exchange above
        return sent

    sock._sock.send = send_after_stale
    assert sock.batch([(30, 0, b"okok"), (30, 0, b"FAIL")]) == [0, 17]
