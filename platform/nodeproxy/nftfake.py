"""An in-memory model of our nftables table, for fast tests of the sync.

:class:`FakeNft` applies transactions with the kernel's rules that matter to
the diff: a transaction is all or nothing; a rule or element may only name
chains and sets that exist (by then, in the transaction's order); a chain
cannot be deleted while a rule or map element still jumps to it, nor a set
while a rule uses it; deleting what does not exist, or adding an element or
rule to what does not exist, fails. Rules are compared as text, so the model
holds exactly what :func:`~.nftmodel.parse` would read back from ``nft``.
"""

from __future__ import annotations

import re
from typing import Sequence

from .kernel import KernelError
from .nftmodel import (AddChain, AddElements, AddRule, AddSet, DeleteChain, DeleteElements, DeleteSet,
                       FlushChain, Op, Table, applied, size)

_CHAIN_REF = re.compile(r"\b(?:goto|jump) (\S+)")
_SET_REF = re.compile(r"@([^\s,}]+)")


class FakeNft:
    def __init__(self) -> None:
        self.table: Table | None = None
        self.transactions: list[tuple[Op, ...]] = []
        self.fail_next: KernelError | None = None  # the next transaction fails with this
        self.cleared: list[tuple[str, str, int, str | None]] = []  # clear_conntrack calls

    def probe(self) -> None:
        pass

    def transact(self, ops: Sequence[Op], create_table: bool = False) -> None:
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        if self.table is None and not create_table:
            raise KernelError("No such file or directory: table")
        work = self.table.copy() if self.table is not None else Table()
        for op in ops:
            _check(work, op)
            applied(work, (op,))
        self.table = work
        self.transactions.append(tuple(ops))

    def read(self) -> Table | None:
        return self.table.copy() if self.table is not None else None

    def delete_table(self) -> bool:
        had, self.table = self.table is not None, None
        return had

    def clear_conntrack(self, protocol: str, address: str, port: int, real_address: str | None = None) -> int:
        self.cleared.append((protocol, address, port, real_address))
        return 0

    def close(self) -> None:
        pass

    def last_size(self) -> int:
        return size(self.transactions[-1]) if self.transactions else 0


def _refs(table: Table) -> tuple[set[str], set[str]]:
    """(chains, sets) something in ``table`` refers to."""
    chains: set[str] = set()
    sets: set[str] = set()
    for chain in table.chains.values():
        for rule in chain.rules:
            chains.update(_CHAIN_REF.findall(rule))
            sets.update(_SET_REF.findall(rule))
    for elems in table.elements.values():
        for value in elems.values():
            chains.update(_CHAIN_REF.findall(value))
    return chains, sets


def _check(t: Table, op: Op) -> None:
    kind = type(op)
    if kind is AddRule:
        if op.chain not in t.chains:
            raise KernelError(f"add rule: no chain {op.chain}")
        for target in _CHAIN_REF.findall(op.rule):
            if target not in t.chains:
                raise KernelError(f"add rule: no chain {target}")
        for name in _SET_REF.findall(op.rule):
            if name not in t.sets:
                raise KernelError(f"add rule: no set {name}")
    elif kind is AddElements:
        if op.set not in t.sets:
            raise KernelError(f"add element: no set {op.set}")
        for _key, value in op.items:
            for target in _CHAIN_REF.findall(value):
                if target not in t.chains:
                    raise KernelError(f"add element: no chain {target}")
    elif kind is DeleteElements:
        have = t.elements.get(op.set)
        if have is None:
            raise KernelError(f"delete element: no set {op.set}")
        for key in op.keys:
            if key not in have:
                raise KernelError(f"delete element: {op.set} has no {key}")
    elif kind is FlushChain:
        if op.name not in t.chains:
            raise KernelError(f"flush chain: no chain {op.name}")
    elif kind is DeleteChain:
        if op.name not in t.chains:
            raise KernelError(f"delete chain: no chain {op.name}")
        if op.name in _refs(t)[0]:
            raise KernelError(f"delete chain {op.name}: still referenced (EBUSY)")
    elif kind is DeleteSet:
        if op.name not in t.sets:
            raise KernelError(f"delete set: no set {op.name}")
        if op.name in _refs(t)[1]:
            raise KernelError(f"delete set {op.name}: still used (EBUSY)")
    elif kind is AddChain or kind is AddSet:
        pass  # "add" of an existing object is a no-op in nft
