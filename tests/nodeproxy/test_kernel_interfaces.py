"""The kernel door of the IPVS mode is five small interfaces, and every
implementation provides each of them where ``Kernel`` says."""

from __future__ import annotations

import pytest

from platformd.nodeproxy.counting import CountingKernel
from platformd.nodeproxy.dryrun import DryRunKernel
from platformd.nodeproxy.fakekernel import FakeKernel
from platformd.nodeproxy.kernel import (
    IPVS,
    AddAddress,
    AddIPSetEntry,
    AddRealServer,
    AddVirtualServer,
    Addresses,
    DeleteAddress,
    DeleteIPSetEntry,
    DeleteRealServer,
    DeleteVirtualServer,
    Firewall,
    IPSetEntry,
    IPSets,
    Kernel,
    RealServer,
    Sysctl,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
)
from platformd.nodeproxy.kernel_linux import LinuxKernel

SUBSYSTEMS = {"ipvs": IPVS, "addresses": Addresses, "ipset": IPSets, "firewall": Firewall, "sysctl": Sysctl}


@pytest.mark.parametrize("make", [FakeKernel, DryRunKernel, LinuxKernel, lambda: CountingKernel(FakeKernel())],
                         ids=["fake", "dryrun", "linux", "counting"])
def test_every_kernel_bundles_the_five_subsystems(make):
    kernel = make()  # LinuxKernel opens no socket before its first use
    assert isinstance(kernel, Kernel)
    for name, protocol in SUBSYSTEMS.items():
        assert isinstance(getattr(kernel, name), protocol), name


def test_linux_has_one_adapter_per_subsystem():
    kernel = LinuxKernel()
    adapters = [getattr(kernel, name) for name in SUBSYSTEMS]
    assert len({id(a) for a in adapters}) == 5
    assert [type(a).__module__.rsplit(".", 1)[1] for a in adapters] == [
        "kernel_ipvs", "kernel_addresses", "kernel_ipsets", "kernel_firewall", "kernel_sysctl"]


def test_the_interfaces_stay_small():
    for protocol in SUBSYSTEMS.values():
        methods = [m for m in vars(protocol) if not m.startswith("_") and callable(getattr(protocol, m))]
        assert 2 <= len(methods) <= 5, (protocol.__name__, methods)


VS = VirtualServer("TCP", "10.96.0.1", 80)
RS = RealServer("10.1.0.1", 8080)
OPS = [AddVirtualServer(VS), UpdateVirtualServer(VS), AddRealServer(VS, RS), UpdateRealServer(VS, RS),
       DeleteRealServer(VS, RS), DeleteVirtualServer(VS), AddAddress("kube-ipvs0", "10.96.0.1"),
       DeleteAddress("kube-ipvs0", "10.96.0.1"), AddIPSetEntry("KUBE-X", IPSetEntry("10.96.0.1")),
       DeleteIPSetEntry("KUBE-X", IPSetEntry("10.96.0.1"))]


@pytest.mark.parametrize("op", OPS, ids=lambda op: type(op).__name__)
def test_each_op_calls_the_method_it_names_with_its_fields(op):
    seen = []

    class Recorder:
        def __getattr__(self, name):
            return lambda *args: seen.append((name, args))

    op.call(Recorder())
    assert seen == [(op.method, tuple(op))]
