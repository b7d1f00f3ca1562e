"""The table all Services ask for, updated one Service at a time.

:class:`DesiredTable` keeps each Service's :class:`~.nftrules.ServiceRules`
and the merged :class:`~.nftmodel.Table`. Chains and affinity sets belong to
one Service (their names carry it); map and set elements may be claimed by
several (the same external IP and port in two Services, an endpoint pair in
``hairpin4`` shared by two Services): each element keeps its owners, and the
Service whose key sorts first decides its value, so the outcome does not
depend on event order. The fixed part is owned by "" (first of all).

``set`` records in a :class:`Touched` the names whose desired content may
have changed: all a partial sync hands to :func:`~.nftmodel.plan`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .nftmodel import Names, Table
from .nftrules import EMPTY, ServiceRules

FIXED = ""  # the owner of the fixed part


@dataclass
class Touched:
    chains: set[str] = field(default_factory=set)
    sets: set[str] = field(default_factory=set)
    elements: set[tuple[str, str]] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.chains or self.sets or self.elements)

    def names(self) -> Names:
        return Names(frozenset(self.chains), frozenset(self.sets), frozenset(self.elements))


class DesiredTable:
    def __init__(self) -> None:
        self.table = Table()
        self._services: dict[str, ServiceRules] = {}
        self._owners: dict[tuple[str, str], dict[str, str]] = {}  # (set, key) -> {owner: value}

    def get(self, owner: str) -> ServiceRules:
        return self._services.get(owner, EMPTY)

    def set(self, owner: str, new: ServiceRules, touched: Touched) -> ServiceRules:
        """Replace ``owner``'s part (EMPTY removes it); returns the old one."""
        old = self._services.get(owner, EMPTY)
        if new is EMPTY or new == EMPTY:
            self._services.pop(owner, None)
        else:
            self._services[owner] = new
        t = self.table
        for name in old.chains.keys() - new.chains.keys():
            t.chains.pop(name, None)
            touched.chains.add(name)
        for name, chain in new.chains.items():
            if old.chains.get(name) != chain:
                t.chains[name] = chain
                touched.chains.add(name)
        for name in old.sets.keys() - new.sets.keys():
            t.sets.pop(name, None)
            t.elements.pop(name, None)
            touched.sets.add(name)
        for name, spec in new.sets.items():
            if old.sets.get(name) != spec:
                t.sets[name] = spec
                t.elements.setdefault(name, {})
                touched.sets.add(name)
        if old.elements is not new.elements:
            for set_name, key, _value in old.elements - new.elements:
                self._disown(owner, set_name, key, touched)
            owners_of, elements, changed = self._owners, t.elements, touched.elements
            for set_name, key, value in new.elements - old.elements:
                owners = owners_of.get((set_name, key))
                if owners is None:
                    # The common case (every element of an initial sync): a
                    # key nobody else claims, inlined (120,000 at 10,000 Services).
                    owners_of[(set_name, key)] = {owner: value}
                    elems = elements.get(set_name)
                    if elems is None:
                        elems = elements[set_name] = {}
                    if elems.get(key) != value:
                        elems[key] = value
                        changed.add((set_name, key))
                else:
                    owners[owner] = value
                    self._settle(set_name, key, owners, touched)
        return old

    def _disown(self, owner: str, set_name: str, key: str, touched: Touched) -> None:
        owners = self._owners.get((set_name, key))
        if owners is None or owners.pop(owner, None) is None:
            return
        if not owners:
            del self._owners[(set_name, key)]
        self._settle(set_name, key, owners, touched)

    def _settle(self, set_name: str, key: str, owners: dict[str, str], touched: Touched) -> None:
        elems = self.table.elements.setdefault(set_name, {})
        if owners:
            value = owners[min(owners)]
            if elems.get(key) != value:
                elems[key] = value
                touched.elements.add((set_name, key))
        elif key in elems:
            del elems[key]
            touched.elements.add((set_name, key))

    def services(self) -> int:
        """How many Services have rules (O(1): read after every sync)."""
        return len(self._services) - (FIXED in self._services)
