"""Shared pytest fixtures for the whole suite."""

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_run_pointer(tmp_path_factory):
    """Runs of platformd started by tests record themselves in a pointer of
    the test session, not in the user's (see platformd.localrun)."""
    os.environ["PLATFORM_POINTER"] = str(tmp_path_factory.mktemp("pointer", numbered=True) / "current.json")
    yield


@pytest.fixture
def fake_api(tmp_path):
    """A started `tests.fakeapi.FakeApiServer`, stopped after the test.

    `fake_api.kubeconfig` is the path of a kubeconfig for it (for the
    `kubernetes` client and kubectl).
    """
    from tests.fakeapi import FakeApiServer

    srv = FakeApiServer().start()
    srv.kubeconfig = srv.write_kubeconfig(tmp_path / "fakeapi-kubeconfig")
    try:
        yield srv
    finally:
        srv.stop()
