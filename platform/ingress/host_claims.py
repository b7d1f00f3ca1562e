"""Settings an Ingress decides for a whole host: who decides, and the table
the TLS handshake reads.

Client certificates (``client_tls``) and ciphers (``host_tls``) act in the
TLS handshake, before any path is known, so they cannot differ between the
paths of one host: the oldest Ingress of a host that sets them decides, and a
later Ingress asking for something else is reported, not merged
(``HostClaims``). The handshake finds them by SNI name: ``sni_table`` ships
``{"names": {server name: key}, <entries>: {key: entry}}`` in the "routes"
section, which lua/util/sni_table.lua reads.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Iterable, TypeVar

__all__ = ["HostClaims", "sni_table"]

T = TypeVar("T")


class HostClaims(Generic[T]):
    """Per host, the first value claimed for it and who claimed it.

    Claim in the order that decides (oldest Ingress first). ``hosts`` is
    the result; callers must not modify it while claiming.
    """

    def __init__(self) -> None:
        self.hosts: dict[str, T] = {}
        self._owners: dict[str, Any] = {}

    def claim(self, owner: Any, hosts: Iterable[str], value: T) -> list[tuple[str, Any]]:
        """Claims each of ``hosts`` not claimed yet for ``value``; returns
        ``(host, earlier owner)`` for each that holds a different value (an
        equal value is no conflict)."""
        conflicts = []
        for host in hosts:
            held = self.hosts.get(host)
            if held is None:
                self.hosts[host], self._owners[host] = value, owner
            elif held != value:
                conflicts.append((host, self._owners[host]))
        return conflicts


def sni_table(servers: Iterable[Any], setting: Callable[[Any], T | None], entries: str,
              key: Callable[[T], str], entry: Callable[[T], dict[str, Any]]) -> dict[str, Any]:
    """``{"names": {name: key(s)}, entries: {key(s): entry(s)}}`` for the
    servers whose ``setting(server)`` is not None, every name of a server
    (``server.names``) mapped to its setting's key; ``{}`` when none has one."""
    names: dict[str, str] = {}
    table: dict[str, dict[str, Any]] = {}
    for server in servers:
        value = setting(server)
        if value is None:
            continue
        k = key(value)
        for name in server.names:
            names[name] = k
        table[k] = entry(value)
    return {"names": names, entries: table} if names else {}
