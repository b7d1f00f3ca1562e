"""ssl-passthrough: which hosts are passed through, to where, and what is
reported; the stream block rendered only with --enable-ssl-passthrough."""

from __future__ import annotations

from platformd.ingress.annotations import PREFIX, parse
from platformd.ingress.decide import needs_reload
from platformd.ingress.passthrough import Passthrough, map_entries
from tests.ingress.test_annotations import HOSTILE
from tests.ingress.test_translate_fixtures import ingress, path, reasons, rendered, rule, service, translate, web

HOST = "pass.example.com"


def passing(**annotations) -> dict:
    annotations.setdefault("ssl-passthrough", "true")
    return ingress("app", rules=[rule(HOST, path("/"))], annotations=annotations)


def with_cluster_ip(ip="10.96.0.10", name="web") -> list[dict]:
    objs = web(name=name)
    objs[0]["spec"]["clusterIP"] = ip
    return objs


def test_hostile_values():
    for value in HOSTILE:
        assert parse({PREFIX + "ssl-passthrough": value}).errors


def test_enabled_host_goes_to_the_service_cluster_ip():
    result = translate(passing(), *with_cluster_ip(), enable_ssl_passthrough=True)
    assert result.configuration.passthrough == (Passthrough(HOST, "10.96.0.10", 80),)
    assert result.configuration.settings.listen.ssl_passthrough
    text = rendered(result)
    assert "ssl_preread on;" in text and "10.96.0.10:80;" in text
    assert "load_module /usr/lib/nginx/modules/ngx_stream_module.so;" in text


def test_disabled_flag_serves_it_terminated_with_a_warning():
    result = translate(passing(), *with_cluster_ip())
    assert result.configuration.passthrough == ()
    assert "SslPassthroughDisabled" in reasons(result)
    assert [s.hostname for s in result.configuration.servers] == [HOST]  # as ingress-nginx: served normally
    assert "ssl_preread" not in rendered(result)


def test_flag_without_annotations_still_hands_tls_over_with_proxy_protocol():
    result = translate(ingress("app", rules=[rule(HOST, path("/"))]), *web(), enable_ssl_passthrough=True)
    text = rendered(result)
    assert "proxy_protocol on;" in text and "real_ip_header proxy_protocol;" in text


def test_no_root_path_or_no_cluster_ip_is_reported():
    no_root = ingress("app", rules=[rule(HOST, path("/api"))], annotations={"ssl-passthrough": "true"})
    result = translate(no_root, *with_cluster_ip(), enable_ssl_passthrough=True)
    assert result.configuration.passthrough == () and "SslPassthroughNoRoot" in reasons(result)
    headless = translate(passing(), *with_cluster_ip("None"), enable_ssl_passthrough=True)
    assert headless.configuration.passthrough == () and "SslPassthroughNoService" in reasons(headless)


def test_wildcard_key_is_one_label_and_sorted():
    entries = [Passthrough("b.example.com", "10.0.0.2", 443), Passthrough("*.example.com", "fd00::1", 8443)]
    assert map_entries(entries) == (("~*^[^.]+\\.example\\.com$", "[fd00::1]:8443"), ("b.example.com", "10.0.0.2:443"))


def test_a_change_of_the_table_reloads_and_nothing_else_does():
    before = translate(passing(), *with_cluster_ip(), enable_ssl_passthrough=True).configuration
    same = translate(passing(), *with_cluster_ip(), enable_ssl_passthrough=True).configuration
    moved = translate(passing(), *with_cluster_ip("10.96.0.11"), enable_ssl_passthrough=True).configuration
    assert not needs_reload(before, same)
    assert needs_reload(before, moved)
