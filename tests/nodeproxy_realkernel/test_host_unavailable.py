"""On a kernel without IPVS, probing fails loudly and names the module.

These run on the host (not in the VM): the machines this project is built
on have no IPVS and no loadable modules, which is exactly the case to check.
"""

from __future__ import annotations

import os

import pytest

from platformd.nodeproxy.kernel import IPVSUnavailable
from platformd.nodeproxy.kernel_linux import LinuxKernel

needs_no_ipvs = pytest.mark.skipif(os.path.exists("/proc/net/ip_vs"), reason="this kernel has IPVS")


@needs_no_ipvs
def test_probe_tries_to_load_ip_vs_then_names_it():
    attempted = []
    kernel = LinuxKernel(module_loader=lambda module: attempted.append(module) or False)
    with pytest.raises(IPVSUnavailable) as caught:
        kernel.probe()
    assert caught.value.module == "ip_vs"
    assert "ip_vs" in str(caught.value)
    assert attempted == ["ip_vs"]


@needs_no_ipvs
def test_a_loader_that_claims_success_does_not_hide_the_missing_module():
    kernel = LinuxKernel(module_loader=lambda module: True)
    with pytest.raises(IPVSUnavailable, match="loaded but not usable"):
        kernel.probe()


@needs_no_ipvs
def test_ipvs_calls_without_ipvs_raise_unavailable():
    kernel = LinuxKernel(module_loader=lambda module: False)
    with pytest.raises(IPVSUnavailable) as caught:
        kernel.ipvs.list_virtual_servers()
    assert caught.value.module == "ip_vs"
