"""Route tables of one local address and port, and per-request redirects, as router data.

Two Gateways with identical listeners (same port, no hostname) can only be
told apart by the local address a request arrives on, and a listener on a
mapped port (``--gateway-listener-port``) must serve only its own routes.
``Configuration.bound`` holds such tables (``BoundHosts``); ``payload``
turns them into the "binds" list of the routes meta section, which
lua/bound.lua looks up before the Ingress table:

    binds = [{"address": "127.0.0.2" | null,   # null: any local address
              "port": 80,                      # local port
              "fallback": bool,                # names not here go to the Ingress table
              "hosts": {"<name>": host},       # as routes.py's host entries
              "default": host | null}]         # the listener without hostname ("*")

``fallback`` is true on ``--http-port`` / ``--https-port`` (Ingresses are
served on every address; a Gateway's own host names and its "*" entry win
there), false on mapped ports (only Gateways listen there: a name no
listener has gets 404).

``redirect_payload`` is a RequestRedirect as lua/redirect.lua applies it:
everything decided here, the router only reads the request's host, path
and query.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from platformd.ingress.model import Configuration, Location, RequestRedirect, Server, prefix_base

__all__ = ["payload", "redirect_payload"]

HostEntry = Callable[[str, tuple[Location, ...]], tuple[dict[str, Any], dict[str, dict]]]


def payload(config: Configuration, server_entry: Callable[[Server], tuple[dict, dict]],
            host_entry: HostEntry) -> tuple[list[dict[str, Any]], dict[str, dict]]:
    """The "binds" list of ``config`` and the policies its hosts use.
    ``server_entry(server)`` / ``host_entry(name, locations)``: routes.py's
    host entries (with the policies each uses)."""
    listen = config.settings.listen
    shared = (listen.http_port, listen.https_port)
    binds, policies = [], {}
    for table in config.bound:
        hosts = {}
        for server in table.servers:
            entry, used = server_entry(server)
            policies.update(used)
            for name in server.names:
                hosts[name] = entry
        default = None
        if table.any_host:
            default, used = host_entry("*", table.any_host)
            policies.update(used)
        binds.append({"address": table.address, "port": table.port, "fallback": table.port in shared,
                      "hosts": hosts, "default": default})
    return binds, policies


def redirect_payload(redirect: RequestRedirect | None) -> dict[str, Any] | None:
    """``{"code", "scheme", "hostname" (null: the request's), "port" (":8080"
    or ""), "path" (null: the request's path and query), "prefix_length"}``.
    With ``prefix_length`` (ReplacePrefixMatch) ``path`` is the replacement
    without its trailing "/" and replaces the first ``prefix_length``
    characters of the request's path (the matched Prefix, canonical: "/" is
    0), "" becoming "/": so /foo + "/xyz" gives /foo/bar -> /xyz/bar,
    /foo -> /xyz, and "/" as replacement /foo/bar -> /bar (the spec's table)."""
    if redirect is None:
        return None
    path, prefix_length = redirect.path, None
    if redirect.path_kind == "ReplacePrefixMatch":
        base = prefix_base(redirect.prefix)
        prefix_length = 0 if base == "/" else len(base)
        path = redirect.path.rstrip("/")
    return {"code": redirect.code, "scheme": redirect.scheme, "hostname": redirect.hostname,
            "port": f":{redirect.port}" if redirect.port is not None else "",
            "path": path, "prefix_length": prefix_length}
