"""Authentication annotations and Secrets -> the route policy (platformd.ingress.auth):
parsing, hostile values, Secret formats, fail closed, global auth, and that
credentials never reach a problem message or the rendered nginx.conf."""

from __future__ import annotations

import base64
import json

import pytest

from platformd.ingress import auth as auth_mod
from platformd.ingress import render
from platformd.ingress.annotations import PREFIX, parse
from tests.ingress.test_annotations import HOSTILE, SERVICES, served
from tests.ingress.test_translate_fixtures import configmap, ingress, locations, path, reasons, rendered, rule, translate

BCRYPT = "$2y$05$abcdefghijklmnopqrstuu05PhAplxWqDxnJScpSYqKmGxTbks2mG"
APR1 = "$apr1$abcdefgh$wT38ABp1Mi8RiNRvA83Bm."


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def opaque(name: str = "basic-auth", data: dict | None = None, namespace: str = "default") -> dict:
    return {"kind": "Secret", "type": "Opaque", "metadata": {"name": name, "namespace": namespace},
            "data": {k: b64(val) for k, val in (data if data is not None else {"auth": f"alice:{BCRYPT}\n"}).items()}}


BASIC = {"auth-type": "basic", "auth-secret": "basic-auth", "auth-realm": "Staff"}


def policy_auth(result, host="example.com", key=("prefix", "/app")):
    return locations(result, host)[key].auth


def payloads(result) -> str:
    return json.dumps([s.data for s in render.dynamic_sections(result.configuration)])


# --- basic / digest from Secrets -------------------------------------------------------


def test_basic_auth_from_an_auth_file_secret():
    result = served(BASIC, opaque(data={"auth": f"# team\nalice:{BCRYPT}\nbob:{APR1}\n\nalice:{{PLAIN}}second\n"}))
    assert reasons(result) == []
    auth = policy_auth(result)
    assert (auth.type, auth.realm, auth.users) == ("basic", "Staff", (("alice", BCRYPT), ("bob", APR1)))
    assert "alice" not in repr(auth)  # users are never printed
    text = payloads(result)
    assert BCRYPT.replace("/", "\\/") in text or BCRYPT in text  # shipped to Lua in the routes policy
    assert BCRYPT not in rendered(result)  # never in nginx.conf


def test_basic_auth_from_an_auth_map_secret_and_another_namespace():
    secret = opaque("users", {"carol": "{SHA}xijDgoRYDk0v1vFBsFGjJUAqaCA=", "dave": APR1}, namespace="shared")
    result = served({**BASIC, "auth-secret": "shared/users", "auth-secret-type": "auth-map"}, secret)
    assert policy_auth(result).users == (("carol", "{SHA}xijDgoRYDk0v1vFBsFGjJUAqaCA="), ("dave", APR1))


def test_digest_auth_takes_the_realm_from_the_htdigest_file():
    secret = opaque(data={"auth": "dana:Staff:84ecd3e456f73bfa16c020fa2712fe4d\nerin:Other:" + "0" * 32 + "\n"})
    result = served({"auth-type": "digest", "auth-secret": "basic-auth"}, secret)
    auth = policy_auth(result)
    assert (auth.type, auth.realm, auth.users) == ("digest", "Staff", (("dana", "84ecd3e456f73bfa16c020fa2712fe4d"),))


@pytest.mark.parametrize("data, why", [
    ({"auth": "alice:password-in-clear\n"}, "entry 1 (user 'alice'): the credential is not"),
    ({"auth": "alice\n"}, "line 1 is not user:credential"),
    ({"other": "x"}, "has no key 'auth'"),
    ({"auth": "# nobody\n"}, "has no users"),
    ({"auth": "alice:$6$short$x\n"}, "the credential is not"),
])
def test_an_invalid_secret_refuses_the_ingress_without_quoting_it(data, why):
    result = served(BASIC, opaque(data=data))
    assert reasons(result) == ["AuthSecretInvalid"] and result.configuration.servers == ()
    message = result.problems[0].message
    assert why in message and PREFIX + "auth-secret" in message and "'default/basic-auth'" in message
    assert "password-in-clear" not in message and "$6$short" not in message


def test_a_missing_secret_refuses_the_ingress_and_only_it():
    other = ingress("open", rules=[rule("open.example.com", path("/"))])
    result = translate(ingress(rules=[rule("example.com", path("/app"))], annotations=BASIC), other, *SERVICES)
    assert [(p.name, p.reason) for p in result.problems] == [("app", "AuthSecretNotFound")]
    assert [s.hostname for s in result.configuration.servers] == ["open.example.com"]
    # The same Ingress is served once its Secret exists: no state kept.
    result = translate(ingress(rules=[rule("example.com", path("/app"))], annotations=BASIC), other, opaque(),
                       *SERVICES)
    assert reasons(result) == [] and policy_auth(result).type == "basic"


def test_two_namespaces_with_the_same_annotations_get_their_own_secrets():
    a = ingress("a", "team-a", rules=[rule("a.example.com", path("/", service="web"))], annotations=BASIC)
    b = ingress("b", "team-b", rules=[rule("b.example.com", path("/", service="web"))], annotations=BASIC)
    from tests.ingress.test_translate_fixtures import web
    result = translate(a, b, *web("team-a"), *web("team-b"),
                       opaque(namespace="team-a", data={"auth": "anna:{PLAIN}a\n"}),
                       opaque(namespace="team-b", data={"auth": "ben:{PLAIN}b\n"}))
    assert policy_auth(result, "a.example.com", ("prefix", "/")).users == (("anna", "{PLAIN}a"),)
    assert policy_auth(result, "b.example.com", ("prefix", "/")).users == (("ben", "{PLAIN}b"),)


# --- external auth ---------------------------------------------------------------


def test_external_auth_annotations():
    result = served({"auth-url": "http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth",
                     "auth-signin": "https://sso.example.com/oauth2/start", "auth-signin-redirect-param": "next",
                     "auth-response-headers": "X-Auth-Request-User, X-Auth-Request-Email", "auth-method": "post",
                     "auth-cache-key": "$remote_user$http_authorization", "auth-cache-duration": "200 401 1m",
                     "auth-always-set-cookie": "true", "auth-keepalive": "10", "satisfy": "any"})
    assert reasons(result) == []
    ext = policy_auth(result).external
    assert ext.method == "POST" and ext.redirect_param == "next" and ext.cache_codes == (200, 401)
    assert ext.cache_seconds == 60 and ext.cache_key == ("$remote_user", "$http_authorization")
    assert policy_auth(result).satisfy == "any" and ext.always_set_cookie


def test_oauth2_proxy_style_urls_with_variables():
    result = served({"auth-url": "https://$host/oauth2/auth",
                     "auth-signin": "https://$host/oauth2/start?rd=$escaped_request_uri"})
    assert reasons(result) == []
    ext = policy_auth(result).external
    assert (ext.url, ext.signin) == ("https://$host/oauth2/auth", "https://$host/oauth2/start?rd=$escaped_request_uri")


def test_auth_proxy_set_headers_from_a_configmap():
    headers = {"kind": "ConfigMap", "metadata": {"name": "auth-headers", "namespace": "default"},
               "data": {"X-Tenant": "blue"}}
    result = served({"auth-url": "https://auth.example.com/check", "auth-proxy-set-headers": "auth-headers"}, headers)
    assert policy_auth(result).external.proxy_headers == (("X-Tenant", "blue"),)
    result = served({"auth-url": "https://auth.example.com/check", "auth-proxy-set-headers": "missing"})
    assert reasons(result) == ["AuthProxyHeadersNotFound"] and result.configuration.servers == ()
    bad = {**headers, "data": {"X-Tenant": "$host"}}
    result = served({"auth-url": "https://auth.example.com/check", "auth-proxy-set-headers": "auth-headers"}, bad)
    # (the fixture takes the only ConfigMap for the controller's too: its keys are "unsupported")
    assert [r for r in reasons(result) if r != "UnsupportedConfigKey"] == ["AuthProxyHeadersInvalid"]
    assert result.configuration.servers == ()


@pytest.mark.parametrize("annotations", [
    {"auth-url": "ftp://auth.example.com/"},
    {"auth-url": "https://user:pw@auth.example.com/"},
    {"auth-url": "https://auth.example.com/#frag"},
    {"auth-url": "https://auth.example.com:99999/"},
    {"auth-url": "auth.example.com/check"},
    {"auth-url": "https://auth.example.com/ check"},
    {"auth-url": "https://auth.example.com/", "auth-method": "TRACE"},
    {"auth-url": "https://$args/check"},  # the client would pick the target
    {"auth-url": "https://auth.example.com$request_uri"},
    {"auth-url": "https://auth.example.com/$remote_addr"},
    {"auth-url": "https://auth.example.com/${host"},
    {"auth-url": "https://auth.example.com/", "auth-signin": "https://$http_cookie/"},
    {"auth-url": "https://auth.example.com/", "auth-cache-key": "$request_body"},
    {"auth-url": "https://auth.example.com/", "auth-cache-key": "$http_x;drop"},
    {"auth-url": "https://auth.example.com/", "auth-cache-duration": "200 forever"},
    {"auth-url": "https://auth.example.com/", "auth-cache-duration": "999 5m"},
    {"auth-url": "https://auth.example.com/", "auth-signin-redirect-param": "r&d"},
    {"auth-url": "https://auth.example.com/", "auth-response-headers": "X-Ok, Bad Header"},
    {"auth-signin": "https://sso.example.com/"},  # without auth-url
    {"auth-type": "basic"},  # without a Secret
    {"auth-secret": "basic-auth"},  # without a type
    {"auth-type": "ntlm", "auth-secret": "basic-auth"},
    {"auth-type": "basic", "auth-secret": "../etc/passwd"},
    {"auth-realm": "Staff"},
    {"satisfy": "some"},
    {"enable-global-auth": "maybe"},
])
def test_bad_values_refuse_the_ingress(annotations):
    result = served(annotations, opaque())
    assert "InvalidAnnotation" in reasons(result) and result.configuration.servers == ()


AUTH_NAMES = sorted(auth_mod.ANNOTATIONS)
# With the annotations each one needs, so a hostile value is refused for
# itself and not for a missing companion.
COMPANIONS = {"auth-type": {"auth-secret": "basic-auth"}, "auth-secret": {"auth-type": "basic"},
              "auth-secret-type": BASIC, "auth-realm": BASIC}


@pytest.mark.parametrize("name", AUTH_NAMES)
def test_hostile_values_with_their_companions_are_refused(name):
    base = COMPANIONS.get(name, {"auth-url": "https://auth.example.com/check"})
    for value in HOSTILE:
        parsed = parse({PREFIX + k: val for k, val in {**base, name: value}.items()})
        assert PREFIX + name in [e.annotation for e in parsed.errors], (name, value)
    # and a huge value
    parsed = parse({PREFIX + k: val for k, val in {**base, name: "a" * 70_000}.items()})
    assert PREFIX + name in [e.annotation for e in parsed.errors]


# --- global auth -----------------------------------------------------------------


GLOBAL = configmap({"global-auth-url": "http://auth.platform.svc:8080/check",
                    "global-auth-response-headers": "X-User", "global-auth-signin": "https://sso.example.com/"})


def test_global_auth_covers_ingresses_that_do_not_opt_out():
    covered = ingress("a", rules=[rule("a.example.com", path("/"))])
    opted_out = ingress("b", rules=[rule("b.example.com", path("/"))], annotations={PREFIX + "enable-global-auth": "false"})
    own = ingress("c", rules=[rule("c.example.com", path("/"))],
                  annotations={PREFIX + "auth-url": "https://own.example.com/check"})
    result = translate(covered, opted_out, own, GLOBAL, *SERVICES)
    assert reasons(result) == []
    assert policy_auth(result, "a.example.com", ("prefix", "/")).external.url == "http://auth.platform.svc:8080/check"
    assert policy_auth(result, "a.example.com", ("prefix", "/")).external.response_headers == ("X-User",)
    assert policy_auth(result, "b.example.com", ("prefix", "/")) is None
    assert policy_auth(result, "c.example.com", ("prefix", "/")).external.url == "https://own.example.com/check"


def test_a_bad_global_auth_refuses_the_ingresses_it_would_cover():
    covered = ingress("a", rules=[rule("a.example.com", path("/"))])
    opted_out = ingress("b", rules=[rule("b.example.com", path("/"))], annotations={PREFIX + "enable-global-auth": "false"})
    result = translate(covered, opted_out, configmap({"global-auth-url": "https://x.example.com/;drop"}), *SERVICES)
    assert sorted(reasons(result)) == ["GlobalAuthInvalid", "InvalidGlobalAuth"]
    assert [s.hostname for s in result.configuration.servers] == ["b.example.com"]


def test_the_resolver_comes_from_resolv_conf(tmp_path):
    conf = tmp_path / "resolv.conf"
    conf.write_text("search x\nnameserver 10.96.0.10\nnameserver fd00::a\nnameserver bad;\n")
    assert auth_mod.resolvers(str(conf)) == "10.96.0.10 [fd00::a]"
    assert auth_mod.resolvers(str(tmp_path / "none")) == ""


# --- the admission webhook ------------------------------------------------------------


def test_the_webhook_refuses_bad_auth_values_and_warns_of_a_missing_secret():
    from tests.ingress.test_webhook_review import Cluster, web_ingress
    bad = Cluster().review("CREATE", web_ingress("a", annotations={PREFIX + "auth-url": "https://$args/x"}))
    assert not bad.allowed and PREFIX + "auth-url" in bad.errors[0]
    # A Secret may come after its Ingress (kubectl apply of a folder): allowed,
    # with the warning that it is not served until then.
    late = Cluster().review("CREATE", web_ingress("a", annotations={PREFIX + "auth-type": "basic",
                                                                    PREFIX + "auth-secret": "later"}))
    assert late.allowed and any("Secret 'default/later' not found" in w for w in late.warnings)
