"""Odd but API-valid input: build never raises, bad parts are reported, the rest serves."""

from __future__ import annotations

import dataclasses

import pytest

from platformd.ingress.translate import Problem, TranslateOptions, Translation, build
from platformd.ingress.snapshot import Snapshot
from tests.ingress.test_translate_fixtures import (
    ingress,
    path,
    reasons,
    rendered,
    rule,
    service,
    translate,
    web,
)


def test_partial_objects_do_not_break_the_translation():
    odd = [
        {"kind": "Ingress", "metadata": {"name": "nospec", "namespace": "default"}, "spec": {"ingressClassName": "platform"}},
        ingress("norules", rules=[{"host": "empty.example.com"}]),  # host without http: a server, no paths
        ingress("nobackend", rules=[rule("a.example.com", {"path": "/x", "pathType": "Prefix"})]),
        ingress("noport", rules=[rule("a.example.com", {"path": "/y", "pathType": "Prefix",
                                                        "backend": {"service": {"name": "web", "port": {}}}})]),
        ingress("good", rules=[rule("good.example.com", path("/"))]),
    ]
    result = translate(*odd, web())
    assert sorted(s.hostname for s in result.configuration.servers) == ["a.example.com", "empty.example.com", "good.example.com"]
    assert reasons(result) == ["InvalidBackend", "InvalidBackend"]
    rendered(result)


@pytest.mark.parametrize("field,value", [
    ("host", "pwned.com;\n}server{"),
    ("host", "a.example.com\nreturn 201 pwned"),
    ("path", '/x";return 201 pwned;#'),
    ("path", "/pwned\n}"),
    ("path", "/$pwned"),
    ("service", "pwned;x"),
])
def test_hostile_spec_values_never_render(field, value):
    host, p, svc = "example.com", "/ok", "web"
    if field == "host":
        host = value
    elif field == "path":
        p = value
    else:
        svc = value
    bad = ingress("bad", rules=[rule(host, path(p, service=svc, path_type="Exact"))])
    result = translate(bad, ingress("good", rules=[rule("good.example.com", path("/"))]), web())
    assert result.problems and all(pr.name == "bad" for pr in result.problems)
    text = rendered(result)
    assert "pwned" not in text


def test_tls_secret_name_from_another_namespace_is_not_reachable():
    # secretName is always looked up in the Ingress's own namespace.
    from tests.ingress.test_translate_fixtures import tls_secret

    result = translate(
        ingress(namespace="team-a", rules=[rule("example.com", path("/"))],
                tls=[{"hosts": ["example.com"], "secretName": "tls"}]),
        web("team-a"), tls_secret("tls", "team-b"),
    )
    assert reasons(result) == ["SecretNotFound"]


def test_results_are_frozen_and_comparable():
    result = build(Snapshot(), TranslateOptions())
    assert isinstance(result, Translation) and result.problems == () and result.owned_ingresses == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.problems = ()  # type: ignore[misc]
    problem = Problem("Ingress", "ns", "n", "Reason", "message")
    assert problem.type == "Warning"
    assert build(Snapshot(), TranslateOptions()) == result


def test_missing_service_in_one_ingress_does_not_block_others():
    result = translate(
        ingress("a", rules=[rule("a.example.com", path("/", service="gone"))]),
        ingress("b", rules=[rule("b.example.com", path("/"))]),
        web(), service("unrelated"),
    )
    assert reasons(result) == ["ServiceNotFound"]
    assert result.configuration.backend("default.web.80").endpoints
