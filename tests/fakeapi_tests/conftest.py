"""Clients of the `kubernetes` library pointed at the `fake_api` fixture."""

import pytest
from kubernetes import client, config


@pytest.fixture
def api_client(fake_api):
    api = config.new_client_from_config(str(fake_api.kubeconfig))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def core(api_client):
    return client.CoreV1Api(api_client)


@pytest.fixture
def net(api_client):
    return client.NetworkingV1Api(api_client)


@pytest.fixture
def disc(api_client):
    return client.DiscoveryV1Api(api_client)


@pytest.fixture
def coord(api_client):
    return client.CoordinationV1Api(api_client)
