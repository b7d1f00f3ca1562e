"""Which Ingresses a data-plane refusal is reported on (controller._ingress_backends)."""

from __future__ import annotations

from platformd.ingress.controller import _ingress_backends
from platformd.ingress.model import service_backend_name


def test_backends_of_rules_and_default_backend_are_named_as_translation_names_them():
    ing = {"metadata": {"namespace": "team", "name": "a"},
           "spec": {"defaultBackend": {"service": {"name": "fallback", "port": {"name": "http"}}},
                    "rules": [{"host": "a.example", "http": {"paths": [
                        {"path": "/", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}}
    assert _ingress_backends(ing) == {service_backend_name("team", "web", 80),
                                      service_backend_name("team", "fallback", "http")}
    assert service_backend_name("team", "web", 80) == "team.web.80"
