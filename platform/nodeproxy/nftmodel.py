"""Our nftables table as plain data, the difference between two of them as
one transaction, and the text ``nft`` reads and prints.

A :class:`Table` is what we want in (or read from) our one table: chains
with their rules, named sets and maps with their elements. :func:`plan`
turns "what is there" and "what we want" into a list of typed operations
that ``nft -f`` applies as one atomic transaction; looking only at the
``names`` it is given (a partial sync passes what changed), so its size
follows the change, not the table.

Rules are kept as the text we send; the kernel gets each with its id (see
below), and a table read back compares by those ids, whatever nft's own
printing of a rule (``dnat ip to ip daddr . tcp dport ...`` for what we
wrote as ``meta l4proto tcp dnat ip addr . port to ...``). Base chains
carry their hook line, which is compared by presence only.

Every rule goes to the kernel with a comment holding its id (a hash of its
text, :func:`rule_id`); a full sync can then read the table back over
netlink (``nftnetlink``) as chain names, rule ids and decoded elements, far
cheaper than ``nft list`` (which renders every rule: 2.9 s at 10,000
Services on this host, ten times more under the test VM's emulation).
:func:`plan` compares rules by id, so a rule read back as its id alone
(``#...``) equals the rule text it came from. A rule edited by hand but
keeping our comment would go unnoticed; deleted, added or flushed ones do
not.

Order inside a transaction, so every reference resolves at each step:
new sets and chains (empty) first; then chains rewritten (flush + rules);
then elements deleted and added; then chains and sets no longer wanted
(flushed first, since one doomed chain may still jump to another).
"""

from __future__ import annotations

import base64
import functools
import hashlib
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

TABLE_FAMILY = "inet"
TABLE = "platform-nodeproxy"


@dataclass(frozen=True)
class SetSpec:
    """A named set (``verdict`` False) or map (``: verdict``)."""

    name: str
    type: str  # e.g. "ipv4_addr . inet_proto . inet_service", or "typeof ..." (a whole typeof clause)
    verdict: bool = False  # a verdict map
    flags: str = ""  # e.g. "dynamic,timeout"
    timeout: int = 0  # seconds, for affinity sets

    def declaration(self) -> str:
        if self.type.startswith("typeof "):
            parts = [f"{self.type};"]
        else:
            parts = [f"type {self.type}{' : verdict' if self.verdict else ''};"]
        if self.flags:
            parts.append(f"flags {self.flags};")
        if self.timeout:
            parts.append(f"timeout {nft_duration(self.timeout)};")
        return "{ " + " ".join(parts) + " }"


@dataclass(frozen=True)
class Chain:
    rules: tuple[str, ...] = ()  # rule texts, or "#<id>" as read back over netlink
    hook: str = ""  # "type nat hook prerouting priority -100; policy accept;" for base chains


@functools.lru_cache(maxsize=1 << 18)
def rule_id(rule: str) -> str:
    """The id a rule carries in its comment: ``#`` and 10 characters of the
    hash of its text (a rule read back as ``#id`` is its own id). Memoized
    (bounded: 262,144 rules, ~60 MB at most): a full sync compares every
    rule of the table, the same texts each time."""
    if rule.startswith("#"):
        return rule
    return "#" + base64.b32encode(hashlib.sha1(rule.encode()).digest())[:10].decode().lower()


def commented(rule: str) -> str:
    """The rule as sent to nft: with its id as a comment."""
    return f'{rule} comment "{rule_id(rule)[1:]}"'


def _same_rules(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    return a == b or (len(a) == len(b) and all(x == y or rule_id(x) == rule_id(y) for x, y in zip(a, b)))


@dataclass
class Table:
    """One table's content. ``elements[set]`` maps an element's key text to
    its value text ("" for a plain set). Owned by whoever built it."""

    chains: dict[str, Chain] = field(default_factory=dict)
    sets: dict[str, SetSpec] = field(default_factory=dict)
    elements: dict[str, dict[str, str]] = field(default_factory=dict)

    def copy(self) -> "Table":
        return Table(dict(self.chains), dict(self.sets), {k: dict(v) for k, v in self.elements.items()})


# -- operations ------------------------------------------------------------------


class AddSet(NamedTuple):
    spec: SetSpec


class AddChain(NamedTuple):
    name: str
    hook: str = ""


class FlushChain(NamedTuple):
    name: str


class AddRule(NamedTuple):
    chain: str
    rule: str


class AddElements(NamedTuple):
    set: str
    items: tuple[tuple[str, str], ...]  # (key, value)


class DeleteElements(NamedTuple):
    set: str
    keys: tuple[str, ...]


class DeleteChain(NamedTuple):
    name: str


class DeleteSet(NamedTuple):
    name: str


Op = AddSet | AddChain | FlushChain | AddRule | AddElements | DeleteElements | DeleteChain | DeleteSet


@dataclass(frozen=True)
class Names:
    """What a plan looks at; None means everything in either table."""

    chains: frozenset[str] | None = None
    sets: frozenset[str] | None = None
    elements: frozenset[tuple[str, str]] | None = None  # (set, key)


EVERYTHING = Names()


def plan(have: Table, want: Table, names: Names = EVERYTHING) -> list[Op]:
    """The operations that turn ``have`` into ``want`` for ``names``, in a
    safe order (see the module docstring). Pure."""
    chains = names.chains if names.chains is not None else have.chains.keys() | want.chains.keys()
    sets = names.sets if names.sets is not None else have.sets.keys() | want.sets.keys()
    # Element keys to look at, by set: a partial sync's few, or every key of
    # both tables (per set, so a whole-table plan sorts strings, not tuples).
    by_set: dict[str, set[str] | dict] = {}
    if names.elements is not None:
        for set_name, key in names.elements:
            by_set.setdefault(set_name, set()).add(key)
    else:
        for set_name in have.elements.keys() | want.elements.keys():
            h_elems, w_elems = have.elements.get(set_name, {}), want.elements.get(set_name, {})
            by_set[set_name] = h_elems.keys() | w_elems.keys() if h_elems else w_elems

    new_sets, doomed_sets = [], []
    for name in sorted(sets):
        h, w = have.sets.get(name), want.sets.get(name)
        if w is not None and h is None:
            new_sets.append(AddSet(w))
        elif w is None and h is not None:
            doomed_sets.append(name)
        elif w is not None and (h.flags, h.timeout) != (w.flags, w.timeout):
            # A set's timeout cannot change in place; affinity sets only
            # hold soft state, so delete and re-create it (its elements go
            # with it). Types are not compared: a set's name says its type
            # (nftrules), and reading types back would need nft's type ids.
            doomed_sets.append(name)
            new_sets.append(AddSet(w))

    new_chains: list[Op] = []
    rewrites: list[Op] = []
    doomed_chains: list[str] = []
    for name in sorted(chains):
        h, w = have.chains.get(name), want.chains.get(name)
        if w is None:
            if h is not None:
                doomed_chains.append(name)
            continue
        if h is None:
            new_chains.append(AddChain(name, w.hook))
            rewrites += [AddRule(name, r) for r in w.rules]
        elif not _same_rules(h.rules, w.rules):
            rewrites.append(FlushChain(name))
            rewrites += [AddRule(name, r) for r in w.rules]

    recreated = {op.spec.name for op in new_sets if op.spec.name in have.sets}
    deletes: dict[str, list[str]] = {}
    adds: dict[str, list[tuple[str, str]]] = {}
    empty: dict[str, str] = {}
    for set_name in sorted(by_set):
        h_elems = have.elements.get(set_name, empty) if set_name not in recreated else empty
        w_elems = want.elements.get(set_name, empty) if set_name in want.sets else empty
        keep_deletes = set_name not in doomed_sets
        dels: list[str] = []
        news: list[tuple[str, str]] = []
        for key in sorted(by_set[set_name]):
            h, w = h_elems.get(key), w_elems.get(key)
            if h == w:
                continue
            if h is not None and keep_deletes:
                dels.append(key)
            if w is not None:
                news.append((key, w))
        if dels:
            deletes[set_name] = dels
        if news:
            adds[set_name] = news

    ops: list[Op] = [DeleteSet(n) for n in doomed_sets if n in recreated]
    ops += new_sets
    ops += new_chains
    ops += rewrites
    ops += [DeleteElements(s, tuple(keys)) for s, keys in deletes.items()]
    ops += [AddElements(s, tuple(items)) for s, items in adds.items()]
    ops += [FlushChain(n) for n in doomed_chains]
    ops += [DeleteChain(n) for n in doomed_chains]
    ops += [DeleteSet(n) for n in doomed_sets if n not in recreated]
    return ops


def applied(table: Table, ops: Iterable[Op]) -> None:
    """Fold ``ops`` (a transaction the kernel accepted) into ``table``."""
    for op in ops:
        kind = type(op)
        if kind is AddRule:
            chain = table.chains[op.chain]
            table.chains[op.chain] = Chain(chain.rules + (op.rule,), chain.hook)
        elif kind is AddElements:
            table.elements.setdefault(op.set, {}).update(op.items)
        elif kind is DeleteElements:
            elems = table.elements.get(op.set, {})
            for key in op.keys:
                elems.pop(key, None)
        elif kind is AddChain:
            table.chains.setdefault(op.name, Chain((), op.hook))
        elif kind is FlushChain:
            table.chains[op.name] = Chain((), table.chains[op.name].hook)
        elif kind is DeleteChain:
            table.chains.pop(op.name, None)
        elif kind is AddSet:
            table.sets[op.spec.name] = op.spec
            table.elements.setdefault(op.spec.name, {})
        elif kind is DeleteSet:
            table.sets.pop(op.name, None)
            table.elements.pop(op.name, None)


# -- text ------------------------------------------------------------------------

#: Elements per ``add element`` line: long lines cost nft nothing extra, but
#: a few thousand per line keeps each one readable in --dry-run output.
_ELEMENTS_PER_LINE = 1000


def render(ops: Iterable[Op], create_table: bool = True) -> str:
    """``nft -f`` input for ``ops``: one transaction.

    The chains added and rewritten before the first element or deletion
    (where :func:`plan` puts them) are written as one ``table { chain {
    rules } }`` block after their flushes, the rest as commands in order:
    the same transaction, but nft parses the block form faster (10,000
    Services: 1.8 s instead of 2.7 s on this host)."""
    t = f"{TABLE_FAMILY} {TABLE}"
    lines = [f"add table {t}"] if create_table else []
    ops = list(ops)
    head: list[Op] = []
    block: dict[str, list[str]] = {}
    hooks: dict[str, str] = {}
    i = 0
    for i, op in enumerate(ops):  # noqa: B007 - i is where the commands resume
        kind = type(op)
        if kind is AddChain:
            block.setdefault(op.name, [])
            if op.hook:
                hooks[op.name] = op.hook
        elif kind is AddRule:
            block.setdefault(op.chain, []).append(commented(op.rule))
        elif kind is AddSet or kind is FlushChain or (kind is DeleteSet and not block):
            head.append(op)
        else:
            break
    else:
        i = len(ops)
    lines += _commands(t, head)
    if block:
        body = []
        for name, rules in block.items():
            hook = f"{hooks[name]}\n" if name in hooks else ""
            body.append(f"chain {name} {{\n{hook}" + "".join(f"{r}\n" for r in rules) + "}")
        lines.append(f"table {t} {{\n" + "\n".join(body) + "\n}")
    lines += _commands(t, ops[i:])
    return "\n".join(lines) + "\n"


def _commands(t: str, ops: Iterable[Op]) -> list[str]:
    lines: list[str] = []
    for op in ops:
        kind = type(op)
        if kind is AddRule:
            lines.append(f"add rule {t} {op.chain} {commented(op.rule)}")
        elif kind is AddElements or kind is DeleteElements:
            verb = "add" if kind is AddElements else "delete"
            items = ([f"{k} : {v}" if v else k for k, v in op.items] if kind is AddElements else list(op.keys))
            for i in range(0, len(items), _ELEMENTS_PER_LINE):
                lines.append(f"{verb} element {t} {op.set} {{ {', '.join(items[i:i + _ELEMENTS_PER_LINE])} }}")
        elif kind is AddChain:
            lines.append(f"add chain {t} {op.name}" + (f" {{ {op.hook} }}" if op.hook else ""))
        elif kind is FlushChain:
            lines.append(f"flush chain {t} {op.name}")
        elif kind is DeleteChain:
            lines.append(f"delete chain {t} {op.name}")
        elif kind is AddSet:
            what = "map" if op.spec.verdict or " : " in op.spec.type else "set"
            lines.append(f"add {what} {t} {op.spec.name} {op.spec.declaration()}")
        elif kind is DeleteSet:
            lines.append(f"delete set {t} {op.name}")
    return lines


def size(ops: Iterable[Op]) -> int:
    """A transaction's size: rules, elements and objects it adds or deletes."""
    n = 0
    for op in ops:
        kind = type(op)
        n += len(op.items) if kind is AddElements else len(op.keys) if kind is DeleteElements else 1
    return n


def nft_duration(seconds: int) -> str:
    """Seconds as ``nft list`` prints a timeout: ``3h``, ``1d2h3m4s``."""
    out = []
    for unit, width in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= width:
            out.append(f"{seconds // width}{unit}")
            seconds %= width
    return "".join(out) or "0s"


def _duration_seconds(text: str) -> int:
    total, number = 0, ""
    widths = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    for ch in text:
        if ch.isdigit():
            number += ch
        elif ch in widths and number:
            total += int(number) * widths[ch]
            number = ""
        elif ch == "m" and not number:  # "ms"
            continue
    return total


def parse(text: str) -> Table:
    """``nft list table inet platform-nodeproxy`` output -> :class:`Table`.

    Rules keep nft's text; set and map headers give :class:`SetSpec` (size,
    nft's default for dynamic sets, is not ours and is dropped); elements are
    split on the top-level commas of their (possibly multi-line) block."""
    table = Table()
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw.strip()
        if line.startswith("chain ") and line.endswith("{"):
            name = line[len("chain "):-1].strip()
            hook, rules = "", []
            for body in lines:
                body = body.strip()
                if body == "}":
                    break
                if body.startswith("type ") and " hook " in body:
                    hook = body
                elif body:
                    # Our rules carry their id as a comment: read as "#id",
                    # which plan compares with the id of the text we meant.
                    text, sep, comment = body.rpartition(' comment "')
                    rules.append(f"#{comment.rstrip(chr(34))}" if sep else body)
            table.chains[name] = Chain(tuple(rules), hook)
        elif (line.startswith("set ") or line.startswith("map ")) and line.endswith("{"):
            name = line.split()[1]
            set_type, verdict, flags, timeout = "", False, "", 0
            elements: dict[str, str] = {}
            for body in lines:
                body = body.strip()
                if body == "}":
                    break
                if body.startswith("typeof "):
                    set_type = body
                elif body.startswith("type "):
                    set_type = body[5:]
                    if set_type.endswith(" : verdict"):
                        set_type, verdict = set_type[:-len(" : verdict")], True
                elif body.startswith("flags "):
                    flags = body[6:].replace(" ", "")
                elif body.startswith("timeout "):
                    timeout = _duration_seconds(body[8:])
                elif body.startswith("elements = {"):
                    block = body[len("elements = {"):]
                    while not block.rstrip().endswith("}"):
                        block += " " + next(lines).strip()
                    for item in block.rstrip()[:-1].split(","):
                        item = item.strip()
                        if not item:
                            continue
                        key, sep, value = item.partition(" : ")
                        elements[key.strip()] = value.strip() if sep else ""
            table.sets[name] = SetSpec(name, set_type, verdict, flags, timeout)
            table.elements[name] = elements
    return table
