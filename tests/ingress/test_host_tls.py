"""ssl-ciphers / ssl-prefer-server-ciphers: parsing, hostile values, per host
selection and the data the handshake gets."""

from __future__ import annotations

import pytest

from platformd.ingress.annotations import PREFIX, parse
from platformd.ingress.host_tls import HostTls
from platformd.ingress.routes import payload
from tests.ingress.test_annotations import HOSTILE
from tests.ingress.test_translate_fixtures import ingress, path, reasons, rendered, rule, server, translate, web

HOST = "app.example.com"


@pytest.mark.parametrize("name", ["ssl-ciphers", "ssl-prefer-server-ciphers"])
def test_hostile_values(name):
    for value in HOSTILE:
        assert [e.annotation for e in parse({PREFIX + name: value}).errors] == [PREFIX + name]


def test_a_list_that_selects_nothing_is_refused():
    errors = parse({PREFIX + "ssl-ciphers": "NOTACIPHER"}).errors
    assert errors and "selects no cipher" in errors[0].reason


def test_host_gets_the_oldest_ingress_settings():
    first = ingress("a", rules=[rule(HOST, path("/"))], created="2024-01-01T00:00:00Z",
                    annotations={"ssl-ciphers": "ECDHE-ECDSA-AES256-GCM-SHA384", "ssl-prefer-server-ciphers": "false"})
    second = ingress("b", rules=[rule(HOST, path("/b"))], created="2024-02-01T00:00:00Z",
                     annotations={"ssl-ciphers": "HIGH"})
    result = translate(first, second, *web())
    settings = server(result, HOST).host_tls
    assert settings == HostTls("ECDHE-ECDSA-AES256-GCM-SHA384", False)
    assert "HostTlsConflict" in reasons(result)
    table = payload(result.configuration)
    assert table["host_tls"] == {"names": {HOST: settings.key},
                                 "settings": {settings.key: {"ciphers": "ECDHE-ECDSA-AES256-GCM-SHA384", "prefer": "off"}}}
    plain = translate(ingress("a", rules=[rule(HOST, path("/"))]), *web())
    assert rendered(result) == rendered(plain)  # data for Lua: a change never reloads
