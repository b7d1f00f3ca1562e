"""#15: values the controller accepted but nginx or Lua refused, refused first.

Each case is a reproduction from the issue: before the fix it passed the
validators and failed later in the data plane (``nginx -t`` for everyone, or
a 400 from Lua for the whole backends section).
"""

from __future__ import annotations

import base64
import datetime
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed25519, rsa
from cryptography.x509.oid import NameOID

from platformd import paths
from platformd.ingress import annotations, certificates, globalconfig, pcre
from platformd.ingress import validate as v
from tests.ingress.test_translate_fixtures import NOW, ingress, path, reasons, rule, server, translate, web

P = annotations.PREFIX

# --- location regexes: nginx's PCRE2 and its variable names ----------------------

REFUSED_PATHS = [
    ("/(?<host>.*)", "nginx variable"),           # duplicate "host" variable
    ("/(?<request_id>.*)", "nginx variable"),     # duplicate "request_id" variable
    ("/(?<http_x_forwarded_for>.*)", "nginx variable"),  # would shadow $http_x_forwarded_for everywhere
    ("/(?<proxy_upstream_name>.*)", "nginx variable"),   # our template's own variable
    ("/\\u0041", "PCRE2"),                          # PCRE2 does not support \u
    ("/(?<" + "a" * 33 + ">x)", "too long"),        # group name over 32 characters
    ("/x[[:nonsense:]]", "POSIX"),                 # Python re accepts it (with a warning)
]


@pytest.mark.parametrize("pattern,why", REFUSED_PATHS)
def test_location_regexes_nginx_refuses_are_refused_first(pattern, why):
    with pytest.raises(v.ValidationError) as err:
        v.regex("path", pattern)
    assert why in err.value.reason


@pytest.mark.parametrize("pattern", ["/foo(/|$)(.*)", "/(?<tenant>[a-z]+)/x", "/(?<" + "a" * 32 + ">x)",
                                     "/api/v[0-9]{1,3}/.*", "/(a+)+$"])
def test_ordinary_regexes_still_pass(pattern):
    assert v.regex("path", pattern) == pattern


def test_every_variable_of_the_template_is_reserved():
    """The template's ``map``/``set`` variables come from the template itself."""
    text = (paths.templates_dir() / "nginx.conf.j2").read_text()
    for name in ("proxy_upstream_name", "pass_access_scheme", "best_http_host"):
        if f"${name}" in text:
            assert v.is_nginx_variable(name)
    assert not v.is_nginx_variable("tenant")


def test_a_bad_path_costs_only_its_ingress():
    bad = ingress("bad", annotations={P + "use-regex": "true"},
                  rules=[rule("a.example", path("/(?<host>.*)", "web", path_type="ImplementationSpecific"))])
    good = ingress("good", rules=[rule("b.example", path("/", "web"))])
    result = translate(bad, good, *web())
    bad_problems = [p for p in result.problems if p.name == "bad"]
    assert bad_problems and bad_problems[0].type == "Warning" and "nginx variable" in bad_problems[0].message
    assert server(result, "b.example") is not None
    rendered_paths = [loc.path for s in result.configuration.servers for loc in s.locations]
    assert "/(?<host>.*)" not in rendered_paths


# --- canary-by-header-pattern: Lua's engine ---------------------------------------


def test_the_engines_are_the_ones_the_data_plane_links():
    """pcre.py's two engines are the libraries nginx and the Lua module use."""
    nginx = subprocess.run(["ldd", "/usr/sbin/nginx"], capture_output=True, text=True).stdout
    lua = subprocess.run(["ldd", "/usr/lib/nginx/modules/ngx_http_lua_module.so"],
                         capture_output=True, text=True).stdout
    assert "libpcre2-8.so.0" in nginx
    assert "libpcre.so.3" in lua or "libpcre2-8.so.0" in lua


@pytest.mark.parametrize("pattern", ["(?a)x", "\\u0041", "(?<" + "b" * 40 + ">x)", "x{2,1}"])
def test_canary_patterns_lua_refuses_are_refused(pattern):
    parsed = annotations.parse({P + "canary": "true", P + "canary-by-header": "X-Canary",
                                P + "canary-by-header-pattern": pattern})
    assert [e.annotation for e in parsed.errors] == [P + "canary-by-header-pattern"]
    assert "ngx.re" in parsed.errors[0].reason or "PCRE" in parsed.errors[0].reason


def test_python_re_would_have_accepted_the_pattern_lua_refuses():
    import re

    re.compile("(?a)x")  # the old check: Python accepts the ASCII flag
    assert pcre.compile_error(pcre.LUA, "(?a)x") is not None


def test_catastrophic_canary_pattern_compiles_and_is_left_to_the_match_limits():
    parsed = annotations.parse({P + "canary": "true", P + "canary-by-header": "X-Canary",
                                P + "canary-by-header-pattern": "^(a+)+$"})
    assert parsed.errors == ()


# --- ConfigMap log format, lengths ------------------------------------------------------


def test_log_format_with_an_unknown_variable_is_refused_not_an_nginx_t_failure():
    config = globalconfig.parse({"data": {"log-format-upstream": "$hostX"}})
    assert [i.reason for i in config.issues] == ["InvalidConfigValue"]
    assert "$hostX" in config.issues[0].message
    assert config.settings.logging.format != "$hostX"
    ok = globalconfig.parse({"data": {"log-format-upstream": "$remote_addr $http_x_real_ip $proxy_upstream_name"}})
    assert ok.issues == ()


def test_a_64kb_session_cookie_path_is_refused():
    parsed = annotations.parse({P + "affinity": "cookie", P + "session-cookie-path": "/" + "a" * 65535})
    assert [e.annotation for e in parsed.errors] == [P + "session-cookie-path"]
    assert annotations.parse({P + "affinity": "cookie", P + "session-cookie-path": "/app"}).errors == ()


def test_annotation_values_and_lists_are_bounded():
    long_list = ",".join(f"10.{i // 256}.{i % 256}.0/24" for i in range(annotations.MAX_LIST_ITEMS + 1))
    parsed = annotations.parse({P + "allowlist-source-range": long_list})
    assert [e.annotation for e in parsed.errors] == [P + "allowlist-source-range"]
    huge = annotations.parse({P + "upstream-vhost": "a" * (annotations.MAX_VALUE_LENGTH + 1)})
    assert "characters long" in huge.errors[0].reason
    fine = ",".join(f"10.0.{i}.0/24" for i in range(200))
    assert annotations.parse({P + "allowlist-source-range": fine}).errors == ()


# --- certificates: every key type against its certificate, sizes --------------------


def _cert(key, name="tls.example", issuer_key=None, extra=0) -> str:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
               .public_key(key.public_key()).serial_number(1)
               .not_valid_before(datetime.datetime(2025, 1, 1)).not_valid_after(datetime.datetime(2035, 1, 1))
               .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False))
    if extra:  # a big extension: the "900 KB chain" of the issue, one certificate at a time
        builder = builder.add_extension(
            x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.99999.1"), b"\0" * extra), critical=False)
    signer = issuer_key or key
    algorithm = None if isinstance(signer, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return builder.sign(signer, algorithm).public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _secret(cert_pem: str, key_pem: str) -> dict:
    b64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    return {"kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": "tls", "namespace": "default"},
            "data": {"tls.crt": b64(cert_pem), "tls.key": b64(key_pem)}}


EC = ec.generate_private_key(ec.SECP256R1())
RSA = rsa.generate_private_key(65537, 2048)
ED = ed25519.Ed25519PrivateKey.generate()


@pytest.mark.parametrize("kind,key", [("rsa", RSA), ("ecdsa", EC), ("ed25519", ED)])
def test_every_key_type_is_checked_against_its_certificate(kind, key):
    cert = _cert(key)
    assert certificates.load("default/tls", _secret(cert, _key_pem(key)), NOW).ok
    others = {"rsa": rsa.generate_private_key(65537, 2048), "ecdsa": ec.generate_private_key(ec.SECP256R1()),
              "ed25519": ed25519.Ed25519PrivateKey.generate()}
    for other_kind, other in others.items():
        loaded = certificates.load("default/tls", _secret(cert, _key_pem(other)), NOW)
        assert loaded.issue.reason == "CertificateKeyMismatch", (kind, other_kind)


def test_dsa_keys_are_refused():
    key = dsa.generate_private_key(2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tls.example")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(1).not_valid_before(datetime.datetime(2025, 1, 1))
            .not_valid_after(datetime.datetime(2035, 1, 1)).sign(key, hashes.SHA256())
            .public_bytes(serialization.Encoding.PEM).decode())
    loaded = certificates.load("default/tls", _secret(cert, _key_pem(key)), NOW)
    assert loaded.issue.reason == "UnsupportedKey" and "DSA" in loaded.issue.message


def test_a_900kb_chain_is_refused_before_parsing():
    leaf = _cert(EC)
    chain = leaf + "".join(_cert(EC, extra=60_000) for _ in range(15))  # ~1.2 MB of PEM
    loaded = certificates.load("default/tls", _secret(chain, _key_pem(EC)), NOW)
    assert loaded.issue.reason == "SecretTooLarge"


def test_a_chain_of_too_many_certificates_is_refused():
    chain = "".join(_cert(EC) for _ in range(certificates.MAX_CHAIN_CERTIFICATES + 1))
    loaded = certificates.load("default/tls", _secret(chain, _key_pem(EC)), NOW)
    assert loaded.issue.reason == "SecretTooLarge"


def test_an_unparsable_intermediate_is_refused_not_sent_to_lua():
    leaf = _cert(EC)
    broken = "-----BEGIN CERTIFICATE-----\nTUlJQm9ndXM=\n-----END CERTIFICATE-----\n"
    loaded = certificates.load("default/tls", _secret(leaf + broken, _key_pem(EC)), NOW)
    assert loaded.issue.reason == "InvalidSecret"


def test_certificates_over_the_store_budget_are_refused_largest_first():
    items = [("a/small", 10), ("b/big", 70), ("c/mid", 30)]
    kept, refused = certificates.within_budget(items, lambda size: size, budget=50)
    assert [k for k, _ in refused] == ["b/big"]
    assert [k for k, _ in kept] == ["a/small", "c/mid"]
    assert certificates.within_budget(items, lambda size: size, budget=110) == (items, [])


def test_store_budget_fits_twice_in_the_lua_store():
    """Old and new certificates live side by side during a swap."""
    import re

    text = (paths.templates_dir() / "nginx.conf.j2").read_text()
    size = re.search(r"lua_shared_dict\s+platform_certificates\s+(\d+)m;", text)
    assert size is not None
    assert 2 * certificates.STORE_BUDGET < int(size.group(1)) * 1024 * 1024


def test_40_secrets_of_900kb_do_not_fill_the_store_and_leave_nothing_behind():
    """The issue's 40 x 900 KB reproduction: every one refused, the rest served."""
    big = _cert(EC, extra=60_000)
    huge_chain = big * 15
    objects = []
    for i in range(40):
        host = f"h{i}.example"
        objects.append({**_secret(huge_chain, _key_pem(EC)), "metadata": {"name": f"big{i}", "namespace": "default"}})
        objects.append(ingress(f"big{i}", rules=[rule(host, path("/", "web"))],
                               tls=[{"hosts": [host], "secretName": f"big{i}"}]))
    good_key = ec.generate_private_key(ec.SECP256R1())
    objects.append({**_secret(_cert(good_key, "ok.example"), _key_pem(good_key)),
                    "metadata": {"name": "ok", "namespace": "default"}})
    objects.append(ingress("ok", rules=[rule("ok.example", path("/", "web"))],
                           tls=[{"hosts": ["ok.example"], "secretName": "ok"}]))
    result = translate(*objects, *web())
    assert reasons(result).count("SecretTooLarge") == 40
    assert [c.id for c in result.configuration.certificates] == ["default/ok"]
    # The facts cache keeps digests and names, never the PEM text.
    assert all(not hasattr(f, "cert_pem") for f in certificates._FACTS._entries.values())


def test_the_facts_cache_gives_what_a_fresh_check_gives():
    cache = certificates._FactsCache(size=2)
    cases = [(_cert(EC), _key_pem(EC)), (_cert(EC), _key_pem(RSA)), (_cert(ED), _key_pem(ED))]
    for cert, key in cases * 2:  # the second round hits (or, past the bound, misses) the cache
        assert cache.get(cert, [cert], key) == certificates._FactsCache().get(cert, [cert], key)
    assert len(cache) == 2  # bounded
