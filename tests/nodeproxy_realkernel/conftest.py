"""Fixtures for tests that need a real kernel with IPVS (see tests/vm).

Every test here except ``test_host_*.py`` is marked ``realkernel``; ``tests/vm/run-realkernel-tests.sh``
runs them inside a QEMU VM booting Debian's kernel. Run directly on a kernel
without IPVS they fail in the ``kernel`` fixture with IPVSUnavailable, which
says what is missing.
"""

from __future__ import annotations

import pytest

from platformd.nodeproxy.kernel_linux import LinuxKernel

from . import netns


def pytest_collection_modifyitems(items):
    for item in items:
        # test_host_*.py files check behaviour on kernels *without* IPVS.
        if item.path.parent.name == "nodeproxy_realkernel" and not item.path.name.startswith("test_host_"):
            item.add_marker(pytest.mark.realkernel)


@pytest.fixture
def ns():
    """The test's own network namespace, entered for its whole duration."""
    with netns.isolated():
        yield


@pytest.fixture
def kernel(ns):
    """A probed LinuxKernel inside the test's namespace."""
    k = LinuxKernel()
    k.probe(("rr", "wrr", "sh"))
    yield k
    k.close()
