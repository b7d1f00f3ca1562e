"""The kernel state all Services ask for, updated one Service at a time.

:class:`DesiredState` keeps each Service's :class:`~.translate.ServiceState`
and reference counts for what Services may share (an external IP used by two
Services stays on the dummy link until neither uses it; the same ipset member
may come from two Services). Replacing one Service's state returns exactly
the kernel objects whose desired state may have changed (:class:`Touched`),
which is all an incremental sync looks at.

Two Services claiming the same virtual server (same protocol, IP and port,
possible only through external or load-balancer IPs) is a conflict the API
does not prevent; the Service whose key sorts first wins, so the outcome
does not depend on event order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from .kernel import IPSetEntry, RealServer, VirtualServer
from .translate import EMPTY, ServiceState

VSKey = tuple[str, str, int]
Entry = tuple[str, IPSetEntry]


@dataclass
class Touched:
    """Kernel objects whose desired state may differ from what was applied."""

    virtual: set[VSKey] = field(default_factory=set)
    addresses: set[str] = field(default_factory=set)
    entries: set[Entry] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.virtual or self.addresses or self.entries)

    def update(self, other: "Touched") -> None:
        self.virtual |= other.virtual
        self.addresses |= other.addresses
        self.entries |= other.entries


class DesiredState:
    def __init__(self) -> None:
        self._services: dict[str, ServiceState] = {}
        self._owners: dict[VSKey, set[str]] = {}
        # Plain dicts, not Counters: Counter's missing-key lookup is a Python
        # call, and every new address and member of a sync passes there.
        self._address_refs: dict[str, int] = {}
        self._entry_refs: dict[Entry, int] = {}

    def service_keys(self) -> list[str]:
        return list(self._services)

    def set(self, service: str, new: ServiceState, touched: Touched | None = None) -> Touched:
        """Replace ``service``'s state (EMPTY removes it) and say what changed:
        added to ``touched`` when given (one Touched for a whole sync rather
        than one per Service), else in a new one."""
        old = self._services.get(service, EMPTY)
        if new == EMPTY:
            self._services.pop(service, None)
        else:
            self._services[service] = new
        if touched is None:
            touched = Touched()
        if old is EMPTY:
            self._add(service, new, touched)
            return touched
        for key in old.virtual.keys() | new.virtual.keys():
            if old.virtual.get(key) == new.virtual.get(key):
                continue
            touched.virtual.add(key)
            owners = self._owners.setdefault(key, set())
            if key in new.virtual:
                owners.add(service)
            else:
                owners.discard(service)
                if not owners:
                    del self._owners[key]
        _unref(self._address_refs, old.addresses - new.addresses, touched.addresses)
        _ref(self._address_refs, new.addresses - old.addresses, touched.addresses)
        _unref(self._entry_refs, old.entries - new.entries, touched.entries)
        _ref(self._entry_refs, new.entries - old.entries, touched.entries)
        return touched

    def _add(self, service: str, new: ServiceState, touched: Touched) -> None:
        """:meth:`set` for a Service that had no state: nothing to compare
        with (every Service, in an initial sync)."""
        touched.virtual.update(new.virtual)
        owners = self._owners
        for key in new.virtual:
            found = owners.get(key)
            if found is None:
                owners[key] = {service}
            else:
                found.add(service)
        _ref(self._address_refs, new.addresses, touched.addresses)
        _ref(self._entry_refs, new.entries, touched.entries)

    def virtual(self, key: VSKey) -> tuple[VirtualServer, frozenset[RealServer]] | None:
        owners = self._owners.get(key)
        if not owners:
            return None
        return self._services[min(owners)].virtual[key]

    def has_address(self, address: str) -> bool:
        return address in self._address_refs

    def has_entry(self, entry: Entry) -> bool:
        return entry in self._entry_refs

    def everything(self) -> Touched:
        """Every kernel object some Service asks for."""
        return Touched(set(self._owners), set(self._address_refs), set(self._entry_refs))


def _ref(refs: dict, items: Iterable, touched: set) -> None:
    """Count one more user of each item; the ones that gain their first are touched."""
    for item in items:
        count = refs.get(item, 0)
        refs[item] = count + 1
        if not count:
            touched.add(item)


def _unref(refs: dict, items: Iterable, touched: set) -> None:
    """Count one user less of each item; the ones that lose their last are touched."""
    for item in items:
        count = refs.get(item, 0) - 1
        if count > 0:
            refs[item] = count
        else:
            refs.pop(item, None)
            touched.add(item)
