"""Shared pytest fixtures for the whole suite."""

import pytest


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
