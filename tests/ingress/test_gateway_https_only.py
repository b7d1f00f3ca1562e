"""A host name only HTTPS listeners have, on the shared ports: the spec says
plain HTTP is not served by those listeners, so it goes to the HTTPS port's
own table (never the shared one, never a redirect), with its certificate;
plain HTTP then finds what an HTTP listener, an Ingress or the catch-all
says for that name. On plain data (lowering + merge)."""

from platformd.ingress.gateway_dataplane import extend
from platformd.ingress.model import Configuration, Location, Server
from tests.ingress.gateway_objects import gateway, http_route, https_listener, listener, rule, backend, service, \
    tls_secret
from tests.ingress.test_gateway_lowering import _lower, cert  # noqa: F401


def _https_only(cert, *listeners, route=None):
    secret = tls_secret("cert", *cert)
    return _lower(gateway(listeners=list(listeners)), route or http_route(), secret, service(), service("svc2"),
                  secrets={"default/cert": secret})


def test_an_https_only_host_is_in_the_https_ports_table_with_its_certificate(cert):
    out = _https_only(cert, https_listener(hostname="example.com"))
    assert out.servers == ()  # not in the shared table: plain HTTP never reaches it
    [table] = out.bound
    assert (table.address, table.port) == (None, 443)
    [server] = table.servers
    assert server.hostname == "example.com" and server.tls and server.tls_certificate == "default/cert"
    assert not any(loc.ssl_redirect for loc in server.locations)
    [certificate] = out.certificates
    assert certificate.id == "default/cert" and certificate.hostnames == ("example.com",)


def test_an_https_listener_without_hostname_is_that_tables_any_host_not_the_catch_all(cert):
    out = _https_only(cert, https_listener())
    assert out.any_host == ()
    [table] = out.bound
    assert table.port == 443 and table.any_host and not any(loc.ssl_redirect for loc in table.any_host)
    assert out.any_certificate == "default/cert"


def test_an_http_wildcard_listener_keeps_serving_the_name_on_plain_http(cert):
    route = http_route(hostnames=["*.example.com"], rules=[rule(backend("svc"))])
    out = _https_only(cert, https_listener(hostname="secure.example.com"), listener(hostname="*.example.com"),
                      route=route)
    # Plain HTTP for secure.example.com finds the HTTP listener's wildcard in the shared table.
    assert [s.hostname for s in out.servers] == ["*.example.com"]
    [table] = out.bound
    assert [s.hostname for s in table.servers] == ["secure.example.com"] and table.port == 443


def test_a_name_on_both_an_http_and_an_https_listener_stays_shared(cert):
    route = http_route(hostnames=["secure.example.com"], rules=[rule(backend("svc"))])
    out = _https_only(cert, https_listener(hostname="secure.example.com"), listener(hostname="*.example.com"),
                      route=route)
    [server] = out.servers
    assert server.hostname == "secure.example.com" and server.tls and out.bound == ()


def test_an_ingress_of_the_same_name_keeps_plain_http_and_joins_the_https_table(cert):
    out = _https_only(cert, https_listener(hostname="example.com"))
    ingress = Configuration(servers=(Server("example.com", locations=(Location("/old", backend="old"),)),))
    merged, _ = extend(ingress, out)
    [shared] = merged.servers
    assert [loc.path for loc in shared.locations] == ["/old"]  # plain HTTP: the Ingress alone
    [table] = merged.bound
    [joined] = table.servers
    assert {loc.path for loc in joined.locations} == {"/", "/old"}  # HTTPS: both APIs on one name
