"""The --configmap ConfigMap → GlobalSettings (each key validated on its own)."""

from __future__ import annotations

import pytest

from platformd.ingress.globalconfig import parse
from platformd.ingress.model import GlobalSettings, LoadBalance
from tests.ingress.test_translate_fixtures import configmap, rendered, translate

VALID = [
    ("worker-processes", "4", lambda s, d: s.workers.processes == 4),
    ("worker-processes", "auto", lambda s, d: s.workers.processes is None),
    ("max-worker-connections", "1024", lambda s, d: s.workers.connections == 1024),
    ("worker-shutdown-timeout", "10s", lambda s, d: s.workers.shutdown_timeout == 10),
    ("keep-alive", "30", lambda s, d: s.keepalive_timeout == 30),
    ("keep-alive-requests", "50", lambda s, d: s.keepalive_requests == 50),
    ("upstream-keepalive-connections", "64", lambda s, d: s.upstream_keepalive_connections == 64),
    ("proxy-connect-timeout", "3", lambda s, d: s.timeouts.connect == 3),
    ("proxy-read-timeout", "300", lambda s, d: s.timeouts.read == 300),
    ("proxy-send-timeout", "120s", lambda s, d: s.timeouts.send == 120),
    ("proxy-body-size", "16m", lambda s, d: s.body_size == "16m"),
    ("proxy-buffering", "on", lambda s, d: s.buffering is True),
    ("ssl-protocols", "TLSv1.3", lambda s, d: s.tls.protocols == ("TLSv1.3",)),
    ("ssl-ciphers", "ECDHE-RSA-AES128-GCM-SHA256", lambda s, d: s.tls.ciphers == "ECDHE-RSA-AES128-GCM-SHA256"),
    ("http-redirect-code", "301", lambda s, d: s.tls.redirect_code == 301),
    ("hsts", "false", lambda s, d: s.tls.hsts.enabled is False),
    ("hsts-max-age", "600", lambda s, d: s.tls.hsts.max_age == 600),
    ("hsts-include-subdomains", "false", lambda s, d: s.tls.hsts.include_subdomains is False),
    ("hsts-preload", "true", lambda s, d: s.tls.hsts.preload is True),
    ("use-forwarded-headers", "true", lambda s, d: s.use_forwarded_headers is True),
    ("server-tokens", "true", lambda s, d: s.server_tokens is True),
    ("log-format-upstream", '$remote_addr "$request" $status', lambda s, d: s.logging.format == '$remote_addr "$request" $status'),
    ("disable-access-log", "true", lambda s, d: s.logging.access_log is False),
    ("error-log-level", "warn", lambda s, d: s.logging.error_level == "warn"),
    ("reuse-port", "true", lambda s, d: s.listen.reuse_port is True),
    ("ssl-redirect", "false", lambda s, d: d.ssl_redirect is False),
    ("load-balance", "ewma", lambda s, d: d.load_balance is LoadBalance.EWMA),
    ("limit-req-status-code", "429", lambda s, d: d.limit_req_status == 429),
    ("limit-conn-status-code", "429", lambda s, d: d.limit_conn_status == 429),
]


@pytest.mark.parametrize("key,value,check", VALID, ids=[f"{k}={v}" for k, v, _ in VALID])
def test_valid_keys(key, value, check):
    result = parse(configmap({key: value}))
    assert result.issues == ()
    assert check(result.settings, result.defaults)


INVALID = [
    ("worker-processes", "many"), ("worker-processes", "0"), ("max-worker-connections", "-1"),
    ("keep-alive", "1h"), ("proxy-connect-timeout", "0"), ("proxy-read-timeout", "x"),
    ("proxy-body-size", "1 m"), ("proxy-buffering", "true"), ("ssl-protocols", "SSLv3"), ("ssl-protocols", ""),
    ("ssl-ciphers", "HIGH;return 200"), ("http-redirect-code", "303"), ("hsts", "yes"), ("hsts-max-age", "-1"),
    ("use-forwarded-headers", "nope"), ("log-format-upstream", "${pwned}"), ("log-format-upstream", "a\nb"),
    ("log-format-upstream", "$remote_addr } server {"), ("error-log-level", "loud"), ("load-balance", "chash"),
    ("upstream-keepalive-connections", "0"),
    ("limit-req-status-code", "200"), ("limit-req-status-code", "429;"), ("limit-conn-status-code", "600"),
]


@pytest.mark.parametrize("key,value", INVALID, ids=[f"{k}={v!r}" for k, v in INVALID])
def test_invalid_values_keep_the_default_and_are_reported_on_the_configmap(key, value):
    result = translate(configmap({key: value, "keep-alive-requests": "77"}))
    assert [(p.kind, p.namespace, p.name, p.reason) for p in result.problems] == [
        ("ConfigMap", "platform", "platform-ingress", "InvalidConfigValue")
    ]
    assert key in result.problems[0].message
    settings = result.configuration.settings
    assert settings.keepalive_requests == 77  # the good key still applies
    defaults = GlobalSettings()
    assert (settings.workers, settings.timeouts, settings.tls, settings.logging, settings.body_size) == (
        defaults.workers, defaults.timeouts, defaults.tls, defaults.logging, defaults.body_size)
    assert "pwned" not in rendered(result)


def test_unknown_keys_are_reported_and_ignored():
    result = translate(configmap({"enable-opentelemetry": "true"}))
    assert [p.reason for p in result.problems] == ["UnsupportedConfigKey"]


def test_ports_come_from_the_options_and_settings_are_rendered():
    result = translate(configmap({"worker-processes": "3", "keep-alive": "30"}), http_port=8080, https_port=8443)
    text = rendered(result)
    assert "worker_processes 3;" in text and "keepalive_timeout 30s;" in text
    assert "listen 8080 default_server" in text and "listen 8443 ssl http2 default_server" in text


def test_no_configmap_means_defaults():
    result = translate()
    assert result.problems == () and result.configuration.settings == GlobalSettings()
