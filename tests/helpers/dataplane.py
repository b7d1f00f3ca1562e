"""What the real-nginx data-plane tests ask of the ``dataplane`` fixture
(tests/ingress/conftest.py) again and again."""

from __future__ import annotations

from platformd.ingress.model import Configuration


def apply(dataplane, config: Configuration) -> None:
    """Apply ``config``; a failure fails the test with nginx's error log."""
    result = dataplane.apply(config)
    assert result.ok, f"{result.error}\n{dataplane.error_log()[-2000:]}"


def reloads(dataplane) -> float:
    """Successful reloads so far (the controller's ingress-nginx counter)."""
    return dataplane.registry.get_sample_value("nginx_ingress_controller_success")


def answer(dataplane, path: str, host: str, **kwargs) -> str:
    """The backend that answered (``x-backend``), or ``<status>`` when nginx answered itself."""
    r = dataplane.get(path, host=host, **kwargs)
    return r.headers.get("x-backend") or str(r.status_code)
