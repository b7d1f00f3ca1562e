"""Which address each Gateway gets.

One data plane serves many Gateways; two Gateways with identical listeners
(same port, no hostname) can only be told apart by the local address a
request arrives on. With ``--gateway-address-pool`` every accepted Gateway
gets one address of the pool for itself:

1. Gateways are taken oldest first (creationTimestamp, then namespace/name),
   so a new Gateway never takes an address from an older one;
2. a Gateway whose ``spec.addresses`` asks for an IPAddress gets it when it
   is in the pool and free; otherwise (outside the pool, in use by an older
   Gateway, not an IP, or more than one address asked for: a Gateway is
   served on one address) it is ``Programmed=False AddressNotUsable``, the
   message naming each value and why, and gets no address: the spec's
   "at least one of the requested addresses cannot be used"; other address
   types (Hostname, NamedAddress, a domain-prefixed type) are
   ``Accepted=False UnsupportedAddress``;
3. otherwise the address it already shows in ``status.addresses``, when in
   the pool and free (stable across restarts and re-translations);
4. otherwise the lowest free pool address; none left: ``AddressNotAssigned``.

Without a pool every Gateway reports the publish addresses and the data
plane serves it on every local address (``Assignment.address`` None).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from platformd.ingress import gateway_fields as f
from platformd.ingress import gateway_status as st
from platformd.ingress.view import UNAVAILABLE_ADDRESS

__all__ = ["Assignment", "assign", "parse_pool"]

# A CIDR larger than this is refused: the pool is walked address by address.
MAX_POOL = 4096


def parse_pool(text: str) -> tuple[str, ...]:
    """``"10.0.0.10,10.0.0.11"`` or ``"10.0.0.8/29"`` (or a mix) -> sorted unique
    addresses. A CIDR of more than one address yields its usable hosts.
    Raises ValueError naming the bad entry. The data plane's internal
    address (view.UNAVAILABLE_ADDRESS, its 503 server) is refused when listed
    and left out of a CIDR: requests to it never reach the router."""
    internal = ipaddress.ip_address(UNAVAILABLE_ADDRESS)
    found: set[ipaddress._BaseAddress] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            if "/" in part:
                net = ipaddress.ip_network(part, strict=False)
                if net.num_addresses > MAX_POOL:
                    raise ValueError(f"{part}: more than {MAX_POOL} addresses")
                hosts = list(net.hosts()) if net.num_addresses > 2 else list(net)
                found.update(h for h in hosts if h != internal)
            else:
                address = ipaddress.ip_address(part)
                if address == internal:
                    raise ValueError("the data plane's internal address")
                found.add(address)
        except ValueError as exc:
            raise ValueError(f"bad --gateway-address-pool entry {part!r}: {exc}") from None
    return tuple(str(a) for a in sorted(found, key=lambda a: (a.version, int(a))))


@dataclass(frozen=True, slots=True)
class Assignment:
    """``address``: the local address the Gateway is served on (None: all).
    ``reported``: what ``status.addresses`` shows, as (type, value).
    ``problem``: a Condition to set when the request could not be honoured."""

    address: str | None
    reported: tuple[tuple[str, str], ...]
    problem: st.Condition | None = None


def _requested(gateway: Mapping) -> list[tuple[str, str]]:
    return [(f.string(a.get("type")) or "IPAddress", f.string(a.get("value")))
            for a in f.items(f.mapping(gateway.get("spec")).get("addresses"))]


def _shown(gateway: Mapping) -> list[str]:
    return [f.string(a.get("value")) for a in f.items(f.mapping(gateway.get("status")).get("addresses"))
            if (f.string(a.get("type")) or "IPAddress") == "IPAddress"]


def _typed(value: str) -> tuple[str, str]:
    try:
        ipaddress.ip_address(value)
        return ("IPAddress", value)
    except ValueError:
        return ("Hostname", value)


def assign(gateways: Iterable[tuple[str, Mapping]], pool: tuple[str, ...],
           publish: tuple[str, ...]) -> dict[str, Assignment]:
    """``gateways``: (key, Gateway) oldest first. Returns key -> Assignment."""
    out: dict[str, Assignment] = {}
    gateways = list(gateways)
    if not pool:
        reported = tuple(_typed(a) for a in publish)
        for key, gw in gateways:
            out[key] = Assignment(None, reported, _unpooled_problem(_requested(gw), publish))
        return out
    in_pool = set(pool)
    taken: set[str] = set()
    # Explicit requests are served before sticky and free addresses, so an
    # address a Gateway asks for by name is never given to another one first
    # (between two that ask for the same address, the older wins).
    pending: list[tuple[str, Mapping]] = []
    for key, gw in gateways:
        requested = _requested(gw)
        if not requested:
            pending.append((key, gw))
            continue
        unsupported = [(t, v) for t, v in requested if t != "IPAddress"]
        if unsupported:
            kind, value = unsupported[0]
            out[key] = Assignment(None, (), st.Condition(
                st.ACCEPTED, False, st.R_UNSUPPORTED_ADDRESS,
                f"address {value!r} has type {kind!r}, which is not supported: only IPAddress values "
                "of --gateway-address-pool"))
            continue
        wanted, unusable = _usable([v for _, v in requested], in_pool, taken)
        if unusable:
            out[key] = Assignment(None, (), st.Condition(st.PROGRAMMED, False, st.R_ADDRESS_NOT_USABLE,
                                                         "requested " + "; ".join(unusable)))
            continue
        taken.add(wanted)
        out[key] = Assignment(wanted, (("IPAddress", wanted),))
    later: list[tuple[str, Mapping]] = []
    for key, gw in pending:
        sticky = next((a for a in _shown(gw) if a in in_pool and a not in taken), None)
        if sticky is None:
            later.append((key, gw))
            continue
        taken.add(sticky)
        out[key] = Assignment(sticky, (("IPAddress", sticky),))
    for key, _gw in later:
        free = next((a for a in pool if a not in taken), None)
        if free is None:
            out[key] = Assignment(None, (), st.Condition(
                st.PROGRAMMED, False, st.R_ADDRESS_NOT_ASSIGNED,
                f"every address of --gateway-address-pool ({len(pool)}) is in use"))
            continue
        taken.add(free)
        out[key] = Assignment(free, (("IPAddress", free),))
    return out


def _usable(values: list[str], in_pool: set[str], taken: set[str]) -> tuple[str, list[str]]:
    """The one address ``values`` ask for, and why each that cannot be used
    cannot (every value must be usable, as the spec says: a Gateway is not
    programmed on part of what it asked for)."""
    canonical: dict[str, str] = {}
    unusable = []
    for value in values:
        try:
            address = str(ipaddress.ip_address(value))
        except ValueError:
            unusable.append(f"address {value!r} is not an IP address")
            continue
        if address not in in_pool:
            unusable.append(f"address {value} is not in --gateway-address-pool")
        elif address in taken:
            unusable.append(f"address {value} is in use by another (older) Gateway")
        else:
            canonical.setdefault(address, value)
    if not unusable and len(canonical) > 1:
        first, *rest = canonical
        unusable.append(f"address {', '.join(rest)} cannot be used besides {first}: a Gateway is served on "
                        "one address")
    return next(iter(canonical), ""), unusable


def _unpooled_problem(requested: list[tuple[str, str]], publish: tuple[str, ...]) -> st.Condition | None:
    if not requested:
        return None
    unsupported = [v for t, v in requested if t not in ("IPAddress", "Hostname")]
    if unsupported:
        return st.Condition(st.ACCEPTED, False, st.R_UNSUPPORTED_ADDRESS,
                            f"address {unsupported[0]!r} has an unsupported type")
    missing = [v for _, v in requested if v not in publish]
    if missing:
        return st.Condition(st.PROGRAMMED, False, st.R_ADDRESS_NOT_USABLE,
                            f"requested address {', '.join(missing)} is not served: without "
                            "--gateway-address-pool every Gateway has the published addresses")
    return None
