"""Writes ``status.loadBalancer.ingress`` of our Ingresses, on the leader only.

Where the addresses come from, first that applies (as in ingress-nginx):

1. ``--publish-status-address``: a comma-separated list of IPs and host names;
2. ``--publish-service ns/name``: that Service's ``status.loadBalancer.ingress``,
   else its ``spec.externalIPs``, else (``ExternalName``) its external name;
3. the addresses of the node this controller runs on (``ExternalIP`` before
   ``InternalIP``), read from the Node named by ``node_name``.

When no source gives an address (no ``--publish-*`` flag and the Node
has none or cannot be read; a publish Service with no address yet), status
is left exactly as it is, never cleared: an address written earlier is more
useful than none, and it is one warning in the log (again only after
addresses came and went), not a silent rewrite of every Ingress.

``StatusWriter.sync()`` compares every owned Ingress's status with the
addresses and PATCHes (``/status``, merge patch) only those that differ; an
Ingress that stopped being ours (class changed) and still shows exactly our
addresses is cleared. It is a no-op unless ``is_leader()`` says we lead, so
replicas never fight over the field. ``clear()`` empties the status of all
owned Ingresses (``--update-status-on-shutdown``).

API errors are logged and retried with the next sync (the caller runs this
from a ``BoundedFrequencyRunner``, which also resyncs every minute, so an
Ingress someone else overwrote is put right).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from platformd.common import errors, kubeclient

__all__ = ["StatusOptions", "StatusWriter", "addresses_from", "patch_status"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StatusOptions:
    publish_service: str | None = None  # "ns/name"
    publish_status_address: str | None = None  # "1.2.3.4,lb.example.com"
    node_name: str | None = None


def _entry(address: str) -> dict:
    try:
        ipaddress.ip_address(address)
        return {"ip": address}
    except ValueError:
        return {"hostname": address}


def _sorted(entries: Iterable[dict]) -> list[dict]:
    unique = {(e.get("ip", ""), e.get("hostname", "")): e for e in entries}
    return [unique[k] for k in sorted(unique)]


def addresses_from(options: StatusOptions, service: dict | None, node: dict | None) -> list[dict]:
    """The ``loadBalancer.ingress`` entries to publish (pure; sorted, unique)."""
    if options.publish_status_address:
        return _sorted(_entry(a.strip()) for a in options.publish_status_address.split(",") if a.strip())
    if options.publish_service:
        if service is None:
            return []
        spec, status = service.get("spec") or {}, service.get("status") or {}
        entries = [{k: v for k, v in e.items() if k in ("ip", "hostname")}
                   for e in (status.get("loadBalancer") or {}).get("ingress") or ()]
        entries = [e for e in entries if e]
        if not entries:
            entries = [_entry(ip) for ip in spec.get("externalIPs") or ()]
        if not entries and spec.get("type") == "ExternalName" and spec.get("externalName"):
            entries = [{"hostname": spec["externalName"]}]
        return _sorted(entries)
    if node is None:
        return []
    by_type: dict[str, list[str]] = {}
    for address in (node.get("status") or {}).get("addresses") or ():
        by_type.setdefault(address.get("type", ""), []).append(address.get("address", ""))
    chosen = by_type.get("ExternalIP") or by_type.get("InternalIP") or []
    return _sorted(_entry(a) for a in chosen if a)


def _current(ingress: dict) -> list[dict]:
    entries = (((ingress.get("status") or {}).get("loadBalancer") or {}).get("ingress")) or []
    return _sorted({k: v for k, v in e.items() if k in ("ip", "hostname")} for e in entries)


class StatusWriter:
    """See the module docstring. ``get_ingress(key)``, ``get_service(key)`` and
    ``get_node(name)`` read the informer stores; ``owned()`` returns the keys
    of the Ingresses that are ours (from the last applied translation)."""

    def __init__(self, api_client, options: StatusOptions, *, is_leader: Callable[[], bool],
                 owned: Callable[[], Iterable[str]], get_ingress: Callable[[str], dict | None],
                 get_service: Callable[[str], dict | None], get_node: Callable[[str], dict | None]) -> None:
        self._api = api_client
        self.options = options
        self._is_leader = is_leader
        self._owned = owned
        self._get_ingress = get_ingress
        self._get_service = get_service
        self._get_node = get_node
        self._previous: set[str] = set()  # owned at the last sync: their status is ours to clear
        self._warned_no_address = False   # the "no address" warning was logged and still holds

    def addresses(self) -> list[dict]:
        service = self._get_service(self.options.publish_service) if self.options.publish_service else None
        node = self._get_node(self.options.node_name) if self.options.node_name else None
        return addresses_from(self.options, service, node)

    def sync(self) -> None:
        """Make the status of every owned Ingress show our addresses (leader only)."""
        if not self._is_leader():
            return
        wanted = self.addresses()
        if not wanted:
            if not self._warned_no_address:
                log.warning("no address for Ingress status: %s; the status of Ingresses is left as it is",
                            self._why_no_address())
                self._warned_no_address = True
            return
        self._warned_no_address = False
        owned = set(self._owned())
        failures = 0
        for key in sorted(owned):
            failures += not self._set(key, wanted)
        for key in sorted(self._previous - owned):
            ingress = self._get_ingress(key)
            if ingress is not None and wanted and _current(ingress) == wanted:
                failures += not self._set(key, [])
        self._previous = owned
        if failures:
            raise errors.ApiError(f"{failures} Ingress status update(s) failed")

    def _why_no_address(self) -> str:
        if self.options.publish_service:
            return (f"--publish-service {self.options.publish_service} has no load balancer address, "
                    "externalIPs or externalName (yet)")
        if self.options.node_name:
            return (f"neither --publish-service nor --publish-status-address is set, and Node "
                    f"{self.options.node_name} has no ExternalIP or InternalIP (or could not be read)")
        return "neither --publish-service nor --publish-status-address is set, and the node is unknown"

    def clear(self) -> None:
        """Empty the status of every owned Ingress (on shutdown; leader only)."""
        if not self._is_leader():
            return
        for key in sorted(set(self._owned())):
            self._set(key, [])

    def _set(self, key: str, entries: list[dict]) -> bool:
        ingress = self._get_ingress(key)
        if ingress is None or _current(ingress) == entries:
            return True
        namespace, _, name = key.partition("/")
        path = f"/apis/networking.k8s.io/v1/namespaces/{namespace}/ingresses/{name}/status"
        if not patch_status(self._api, path, {"status": {"loadBalancer": {"ingress": entries}}}, f"Ingress {key}"):
            return False
        log.info("Ingress %s status: %s", key, ", ".join(e.get("ip") or e.get("hostname", "") for e in entries) or "cleared")
        return True


def patch_status(api, path: str, patch: dict, what: str) -> bool:
    """Merge-patch the ``/status`` subresource at ``path``.

    True when written, or when the object is gone (deleted meanwhile: there
    is nothing left to write); False after an API error, logged here with
    ``what`` names, for the caller's runner to retry.
    """
    try:
        kubeclient.request_json(api, "PATCH", path, body=patch,
                                content_type="application/merge-patch+json", timeout=10.0)
    except errors.NotFound:
        return True
    except errors.ApiError as exc:
        log.warning("updating the status of %s failed: %s", what, exc)
        return False
    return True
