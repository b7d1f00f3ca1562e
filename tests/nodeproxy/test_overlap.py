"""What a sync overlaps, and the orders it keeps while doing so.

The proxier adds the dummy link's addresses on a thread of its own while it
applies ipset members and real servers, and sets up the fixed parts (link,
ipsets, iptables) on another while it translates the Services. These tests
check that the overlap really happens (two threads meet at a barrier, which
fails when the work runs one after the other), that an address is never on
the link without its virtual server, and that failures on either thread
fail the sync and make the next one full.
"""

from __future__ import annotations

import threading

import pytest

from platformd.common.clock import FakeClock
from platformd.nodeproxy.background import Background
from platformd.nodeproxy.counting import CountingKernel
from platformd.nodeproxy.fakekernel import FakeKernel
from platformd.nodeproxy.kernel import DUMMY_LINK, KernelError, VirtualServer
from platformd.nodeproxy.proxier import Proxier, ProxierOptions

from .objects import endpoint_slice, service


class Recording(FakeKernel):
    """A FakeKernel logging (method, thread name, argument) of every address
    and virtual-server change, in the order the kernel saw them."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, str, object]] = []

    def _note(self, method: str, arg: object) -> None:
        self.log.append((method, threading.current_thread().name, arg))

    def add_address(self, link, address):
        super().add_address(link, address)
        self._note("add_address", address)

    def delete_address(self, link, address):
        super().delete_address(link, address)
        self._note("delete_address", address)

    def add_virtual_server(self, vs):
        super().add_virtual_server(vs)
        self._note("add_virtual_server", vs.address)

    def delete_virtual_server(self, vs):
        super().delete_virtual_server(vs)
        self._note("delete_virtual_server", vs.address)

    def restore_iptables(self, text):
        self._note("restore_iptables", None)
        super().restore_iptables(text)


def _proxier(kernel) -> Proxier:
    return Proxier(kernel, ProxierOptions(hostname="node-a", node_ips=("192.168.1.10",)), FakeClock())


def _add(proxier: Proxier, n: int) -> None:
    for i in range(n):
        proxier.on_service(None, service(f"s{i}", f"10.96.0.{i + 1}"))
        proxier.on_slice(None, endpoint_slice(f"s{i}", [f"10.1.0.{i + 1}"]))


def _position(log, method: str, address: str) -> int:
    return next(i for i, (m, _thread, arg) in enumerate(log) if m == method and arg == address)


def test_an_address_is_added_after_its_virtual_server_and_deleted_before_it():
    kernel = Recording()
    proxier = _proxier(kernel)
    _add(proxier, 20)
    proxier.sync()
    for i in range(20):
        ip = f"10.96.0.{i + 1}"
        assert _position(kernel.log, "add_virtual_server", ip) < _position(kernel.log, "add_address", ip)
    kernel.log.clear()
    for i in range(20):
        proxier.on_service(service(f"s{i}", f"10.96.0.{i + 1}"), None)
    proxier.sync()
    for i in range(20):
        ip = f"10.96.0.{i + 1}"
        assert _position(kernel.log, "delete_address", ip) < _position(kernel.log, "delete_virtual_server", ip)
    assert kernel.links[DUMMY_LINK] == set() and kernel.virtual == {}


def test_addresses_are_added_on_their_own_thread_and_the_base_is_set_up_on_another():
    kernel = Recording()
    proxier = _proxier(kernel)
    _add(proxier, 3)
    proxier.sync()
    caller = threading.current_thread().name
    threads = {(m, t) for m, t, _arg in kernel.log}
    assert threads == {("add_virtual_server", caller), ("add_address", "nodeproxy-addresses"),
                       ("restore_iptables", "nodeproxy-base")}
    steps = dict(proxier.last_result.steps)
    assert {"translate", "base (alongside)", "virtual servers", "real servers",
            "addresses added (alongside)"} <= set(steps)


class MeetingKernel(CountingKernel):
    """Makes the address batch and the real-server batch wait for each other
    at a barrier: it only passes when both are in flight at the same time."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.barrier = threading.Barrier(2, timeout=10)
        self.met: list[str] = []

    def _apply(self, apply, ops):  # every subsystem's apply goes through here
        methods = {op.method for op in ops}
        if methods & {"add_address", "add_real_server"}:
            self.barrier.wait()  # BrokenBarrierError (failing the sync) when run one after the other
            self.met.append(min(methods))
        return super()._apply(apply, ops)


def test_addresses_are_applied_while_the_real_servers_are():
    kernel = MeetingKernel(FakeKernel())
    proxier = _proxier(kernel)
    _add(proxier, 5)
    proxier.sync()
    assert sorted(kernel.met) == ["add_address", "add_real_server"]
    assert len(kernel.inner.links[DUMMY_LINK]) == 5
    assert len(kernel.inner.virtual) == 5


def test_a_failed_address_fails_the_sync_after_the_rest_is_applied_and_the_next_sync_repairs_it():
    kernel = FakeKernel()
    proxier = _proxier(kernel)
    _add(proxier, 1)
    proxier.sync()
    proxier.on_service(None, service("new", "10.96.1.1"))
    proxier.on_slice(None, endpoint_slice("new", ["10.1.1.1"]))
    kernel.fail_next("add_address")
    with pytest.raises(KernelError, match="add_address"):
        proxier.sync()
    new = VirtualServer("TCP", "10.96.1.1", 80)
    assert kernel.snapshot()[kernel.virtual[new.key]] == {("10.1.1.1", 8080): 1}  # applied meanwhile
    assert "10.96.1.1" not in kernel.links[DUMMY_LINK]
    assert proxier.sync().full
    assert "10.96.1.1" in kernel.links[DUMMY_LINK]


def test_a_failed_base_fails_the_sync_and_the_next_one_is_full_again():
    kernel = FakeKernel()
    proxier = _proxier(kernel)
    _add(proxier, 1)
    kernel.fail_next("restore_iptables")
    with pytest.raises(KernelError, match="restore_iptables"):
        proxier.sync()
    assert proxier.sync().full
    assert kernel.links[DUMMY_LINK] == {"10.96.0.1"}


def test_background_hands_back_the_result_or_the_exception():
    assert Background(lambda: 42, "t").wait() == 42

    def fail():
        raise KernelError("boom")

    failed = Background(fail, "t")
    failed.join()  # only waits
    with pytest.raises(KernelError, match="boom"):
        failed.wait()
