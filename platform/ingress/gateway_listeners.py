"""A Gateway's listeners: which can be served where, and their conditions.

Per listener, in this order (the first failing step decides Accepted):

* protocol: HTTP and HTTPS are served; others are ``Accepted=False
  UnsupportedProtocol``;
* port: listener port 80 is served on ``--http-port`` (HTTP only), 443 on
  ``--https-port`` (HTTPS only), others only where ``--gateway-listener-port``
  maps them to a local port; else ``Accepted=False PortUnavailable``;
* allowedRoutes.kinds: kinds we do not serve on that protocol make
  ``ResolvedRefs=False InvalidRouteKinds`` (the rest stay supported);
* HTTPS certificateRefs: a core Secret, in the Gateway's namespace or allowed
  by a ReferenceGrant (else ``RefNotPermitted``), holding a usable
  certificate (else ``InvalidCertificateRef``);
* conflicts: listeners of one Gateway on one port with different protocols
  (the first listener's protocol wins: ``ProtocolConflict``); listeners of
  different Gateways on the same local address, port and hostname (the oldest
  Gateway keeps it: ``HostnameConflict``) -- only without an address pool,
  where Gateways share addresses (``mark_conflicts``).

A listener is *attachable* when Accepted (routes may attach and count in
``attachedRoutes``) and *served* (``bind`` set) when also not conflicted and,
for HTTPS, with at least one usable certificate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from platformd.common.resources import GATEWAY_API_GROUP
from platformd.ingress import certificates
from platformd.ingress import gateway_fields as f
from platformd.ingress import gateway_status as st
from platformd.ingress.gateway_addresses import Assignment
from platformd.ingress.gateway_grants import Grants, Ref
from platformd.ingress.gateway_input import GatewayOptions
from platformd.ingress.gateway_model import Bind

__all__ = ["GatewayState", "ListenerState", "evaluate", "mark_conflicts"]

HTTP_ROUTE = (GATEWAY_API_GROUP, "HTTPRoute")
GRPC_ROUTE = (GATEWAY_API_GROUP, "GRPCRoute")
_KINDS = {"HTTP": (HTTP_ROUTE, GRPC_ROUTE), "HTTPS": (HTTP_ROUTE, GRPC_ROUTE)}


@dataclass(frozen=True, slots=True)
class ListenerState:
    name: str
    port: int
    protocol: str
    hostname: str | None
    local_port: int | None
    allowed_from: str  # "Same" | "All" | "Selector"
    selector: Mapping | None
    kinds: tuple[tuple[str, str], ...]
    secrets: tuple[str, ...]  # usable certificate Secrets ("ns/name")
    accepted: st.Condition
    resolved: st.Condition
    conflicted: st.Condition | None = None

    @property
    def attachable(self) -> bool:
        return self.accepted.status

    def bind(self, address: str | None) -> Bind | None:
        """Where this listener is served, or None when it is not."""
        if not self.attachable or self.conflicted is not None or self.local_port is None:
            return None
        if self.protocol == "HTTPS" and not self.secrets:
            return None
        return Bind(address, self.local_port, self.protocol, self.port)

    def conditions(self, address: str | None, address_ok: bool) -> tuple[st.Condition, ...]:
        conflicted = self.conflicted or st.Condition(st.CONFLICTED, False, st.R_NO_CONFLICTS,
                                                     "no conflicts")
        if self.bind(address) is not None and address_ok:
            programmed = st.Condition(st.PROGRAMMED, True, st.R_PROGRAMMED, "listener is served")
        else:
            why = (self.accepted if not self.accepted.status else self.conflicted
                   or (self.resolved if not self.resolved.status else None))
            message = why.message if why is not None else "the Gateway has no usable address"
            programmed = st.Condition(st.PROGRAMMED, False, st.R_INVALID, message)
        return (self.accepted, programmed, self.resolved, conflicted)


@dataclass(frozen=True, slots=True)
class GatewayState:
    key: str  # "ns/name"
    namespace: str
    name: str
    generation: int
    assignment: Assignment
    listeners: tuple[ListenerState, ...]

    @property
    def address_ok(self) -> bool:
        return self.assignment.problem is None

    def bind(self, listener: ListenerState) -> Bind | None:
        """Where ``listener`` is served; None when it or this Gateway's address is not usable."""
        return listener.bind(self.assignment.address) if self.address_ok else None

    def conditions(self) -> tuple[st.Condition, ...]:
        problem = self.assignment.problem
        valid = [lst for lst in self.listeners if lst.attachable]
        if problem is not None and problem.type == st.ACCEPTED:
            accepted = problem
        elif len(valid) == len(self.listeners):
            accepted = st.Condition(st.ACCEPTED, True, st.R_ACCEPTED, "Gateway is accepted")
        else:
            bad = ", ".join(lst.name for lst in self.listeners if not lst.attachable)
            accepted = st.Condition(st.ACCEPTED, bool(valid), st.R_LISTENERS_NOT_VALID,
                                    f"listeners not valid: {bad}")
        served = [lst for lst in self.listeners if self.bind(lst) is not None]
        if problem is not None:
            programmed = problem if problem.type == st.PROGRAMMED else \
                st.Condition(st.PROGRAMMED, False, st.R_INVALID, problem.message)
        elif not served:
            programmed = st.Condition(st.PROGRAMMED, False, st.R_INVALID, "no listener can be served")
        else:
            programmed = st.Condition(st.PROGRAMMED, True, st.R_PROGRAMMED, "Gateway is served")
        return (accepted, programmed)


def _local_port(options: GatewayOptions, port: int, protocol: str) -> tuple[int | None, str]:
    """The local port a listener is served on, or None and why not."""
    if port == 80:
        if protocol == "HTTP":
            return options.http_port, ""
        return None, "port 80 is served as plain HTTP (--http-port)"
    if port == 443:
        if protocol == "HTTPS":
            return options.https_port, ""
        return None, "port 443 is served with TLS (--https-port)"
    local = options.listener_ports.get(port)
    if local is None:
        return None, f"port {port} is not mapped to a local port (--gateway-listener-port)"
    tls = port in options.tls_listener_ports
    if (protocol == "HTTPS") != tls:
        return None, f"port {port} is mapped to local port {local}, which serves {'TLS' if tls else 'plain HTTP'}"
    return local, ""


def _route_kinds(listener: Mapping, protocol: str) -> tuple[tuple[tuple[str, str], ...], st.Condition | None]:
    supported = _KINDS.get(protocol, ())
    asked = f.items(f.mapping(listener.get("allowedRoutes")).get("kinds"))
    if not asked:
        return supported, None
    kinds, bad = [], []
    for entry in asked:
        gk = (f.string(entry.get("group", GATEWAY_API_GROUP)), f.string(entry.get("kind")))
        (kinds if gk in supported else bad).append(gk)
    problem = None
    if bad:
        problem = st.Condition(st.RESOLVED_REFS, False, st.R_INVALID_ROUTE_KINDS,
                               "unsupported route kinds: " + ", ".join(f"{g}/{k}" for g, k in bad))
    return tuple(dict.fromkeys(kinds)), problem


def _certificates(listener: Mapping, namespace: str, secrets: Mapping[str, dict], grants: Grants,
                  now: float) -> tuple[tuple[str, ...], st.Condition | None]:
    refs = f.items(f.mapping(listener.get("tls")).get("certificateRefs"))
    usable, problem = [], None
    for ref in refs:
        group, kind = f.string(ref.get("group")), f.string(ref.get("kind")) or "Secret"
        ref_ns = f.string(ref.get("namespace")) or namespace
        name = f.string(ref.get("name"))
        key = f"{ref_ns}/{name}"
        if (group, kind) != ("", "Secret"):
            problem = problem or st.Condition(st.RESOLVED_REFS, False, st.R_INVALID_CERTIFICATE_REF,
                                              f"certificateRef {group}/{kind} {key} is not a core Secret")
            continue
        if not grants.permits(Ref(GATEWAY_API_GROUP, "Gateway", namespace), Ref("", "Secret", ref_ns, name)):
            problem = problem or st.Condition(st.RESOLVED_REFS, False, st.R_REF_NOT_PERMITTED,
                                              f"certificateRef to Secret {key} is not allowed by a ReferenceGrant")
            continue
        loaded = certificates.load(key, secrets.get(key), now)
        if not loaded.ok:
            problem = problem or st.Condition(st.RESOLVED_REFS, False, st.R_INVALID_CERTIFICATE_REF,
                                              loaded.issue.message)
            continue
        usable.append(key)
    if not refs and problem is None:
        problem = st.Condition(st.RESOLVED_REFS, False, st.R_INVALID_CERTIFICATE_REF,
                               "HTTPS listener without certificateRefs")
    return tuple(usable), problem


def _listener(raw: Mapping, namespace: str, options: GatewayOptions, secrets: Mapping[str, dict],
              grants: Grants, now: float) -> ListenerState:
    name = f.string(raw.get("name"))
    port = f.integer(raw.get("port"))
    protocol = f.string(raw.get("protocol"))
    hostname = f.string(raw.get("hostname")) or None
    allowed = f.mapping(f.mapping(raw.get("allowedRoutes")).get("namespaces"))
    accepted = st.Condition(st.ACCEPTED, True, st.R_ACCEPTED, "listener is accepted")
    local_port = None
    if protocol not in _KINDS:
        accepted = st.Condition(st.ACCEPTED, False, st.R_UNSUPPORTED_PROTOCOL,
                                f"protocol {protocol} is not supported: HTTP and HTTPS are")
    else:
        local_port, why = _local_port(options, port, protocol)
        if local_port is None:
            accepted = st.Condition(st.ACCEPTED, False, st.R_PORT_UNAVAILABLE, why)
    kinds, resolved = _route_kinds(raw, protocol)
    secret_keys: tuple[str, ...] = ()
    if protocol == "HTTPS":
        secret_keys, cert_problem = _certificates(raw, namespace, secrets, grants, now)
        resolved = resolved or cert_problem
    return ListenerState(
        name=name, port=port, protocol=protocol, hostname=hostname, local_port=local_port,
        allowed_from=f.string(allowed.get("from")) or "Same", selector=f.mapping(allowed.get("selector")),
        kinds=kinds, secrets=secret_keys, accepted=accepted,
        resolved=resolved or st.Condition(st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "references resolved"))


def evaluate(key: str, gateway: Mapping, assignment: Assignment, options: GatewayOptions,
             secrets: Mapping[str, dict], grants: Grants, now: float) -> GatewayState:
    """The listeners of one of our Gateways, with in-Gateway conflicts marked."""
    meta = f.mapping(gateway.get("metadata"))
    namespace = f.string(meta.get("namespace"))
    listeners = [_listener(raw, namespace, options, secrets, grants, now)
                 for raw in f.items(f.mapping(gateway.get("spec")).get("listeners"))]
    first_protocol: dict[int, str] = {}
    for i, lst in enumerate(listeners):
        if not lst.attachable:
            continue
        first = first_protocol.setdefault(lst.local_port, lst.protocol)
        if first != lst.protocol:
            listeners[i] = replace(lst, conflicted=st.Condition(
                st.CONFLICTED, True, st.R_PROTOCOL_CONFLICT,
                f"another listener serves port {lst.port} as {first}"))
    return GatewayState(key, namespace, f.string(meta.get("name")), f.integer(meta.get("generation")),
                        assignment, tuple(listeners))


def mark_conflicts(states: Iterable[GatewayState]) -> list[GatewayState]:
    """Mark listeners of later Gateways that another Gateway already serves on
    the same local address, port and hostname. ``states`` oldest first."""
    owner: dict[tuple, str] = {}
    protocols: dict[tuple, tuple[str, str]] = {}  # (address, local port) -> (protocol, Gateway)
    out = []
    for state in states:
        listeners = list(state.listeners)
        for i, lst in enumerate(listeners):
            if not lst.attachable or lst.conflicted is not None:
                continue
            protocol, first = protocols.setdefault((state.assignment.address, lst.local_port),
                                                   (lst.protocol, state.key))
            if protocol != lst.protocol:
                listeners[i] = replace(lst, conflicted=st.Condition(
                    st.CONFLICTED, True, st.R_PROTOCOL_CONFLICT,
                    f"Gateway {first} already serves local port {lst.local_port} as {protocol}"))
                continue
            slot = (state.assignment.address, lst.local_port, lst.hostname or "*")
            holder = owner.setdefault(slot, state.key)
            if holder != state.key:
                listeners[i] = replace(lst, conflicted=st.Condition(
                    st.CONFLICTED, True, st.R_HOSTNAME_CONFLICT,
                    f"Gateway {holder} already serves port {lst.port} for hostname {lst.hostname or '*'}"
                    " on the same address"))
        out.append(replace(state, listeners=tuple(listeners)))
    return out
