"""tests/helpers/dataplane.py on a stand-in for the ``dataplane`` fixture."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from platformd.ingress.model import Configuration
from tests.helpers.dataplane import answer, apply, reloads


class _StandIn:
    def __init__(self, ok: bool) -> None:
        self.ok = ok
        self.registry = SimpleNamespace(get_sample_value=lambda name: 3.0 if name == "nginx_ingress_controller_success" else None)

    def apply(self, config):
        return SimpleNamespace(ok=self.ok, error="refused")

    def error_log(self) -> str:
        return "x" * 5000 + "the last lines"

    def get(self, path, host, **kwargs):
        headers = {"x-backend": "web"} if path == "/app" else {}
        return SimpleNamespace(headers=headers, status_code=404)


def test_apply_fails_with_the_end_of_the_error_log():
    apply(_StandIn(ok=True), Configuration())
    with pytest.raises(AssertionError, match="refused\n.*the last lines"):
        apply(_StandIn(ok=False), Configuration())


def test_answer_is_the_backend_or_the_status_and_reloads_reads_the_counter():
    plane = _StandIn(ok=True)
    assert answer(plane, "/app", "a.com") == "web"
    assert answer(plane, "/other", "a.com") == "404"
    assert reloads(plane) == 3.0
