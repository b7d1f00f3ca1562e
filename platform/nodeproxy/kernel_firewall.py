"""Our iptables chains and conntrack entries on Linux: :class:`~.kernel.Firewall`
through the tools.

iptables through ``iptables-restore``/``iptables`` (their text format is the
stable interface, and the nft backend has no other); conntrack entries with
the ``conntrack`` tool.
"""

from __future__ import annotations

import errno
import shlex
import subprocess
import time
from typing import Sequence

from . import conntrack
from .kernel import KernelError, NotFound

__all__ = ["LinuxFirewall"]


class LinuxFirewall:
    """:class:`~.kernel.Firewall` with the iptables and conntrack tools; they
    run in the calling thread's network namespace. ``round_trips`` counts
    tool runs, ``busy_seconds`` their time."""

    def __init__(self, *, iptables: str = "iptables", conntrack: str = "conntrack") -> None:
        self._iptables = iptables
        self._conntrack = conntrack
        self._other_trips = 0
        self._tool_seconds = 0.0

    @property
    def round_trips(self) -> int:
        return self._other_trips

    @property
    def busy_seconds(self) -> float:
        return self._tool_seconds

    # -- iptables ------------------------------------------------------------------
    def _run(self, argv: list[str], what: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        self._other_trips += 1
        started = time.perf_counter()
        try:
            return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
        except FileNotFoundError as exc:
            raise KernelError(f"{what}: {argv[0]} is not installed", errno.ENOENT) from exc
        except subprocess.TimeoutExpired as exc:
            raise KernelError(f"{what}: {argv[0]} timed out", errno.ETIMEDOUT) from exc
        finally:
            self._tool_seconds += time.perf_counter() - started

    def restore_iptables(self, text: str) -> None:
        text = _flush_before_delete(text)
        done = self._run([f"{self._iptables}-restore", "-w", "--noflush"], "iptables-restore", text)
        if done.returncode != 0:
            raise KernelError(f"iptables-restore: {done.stderr.strip() or done.stdout.strip()}")

    def _rule_command(self, op: str, table: str, chain: str,
                      rule: tuple[str, ...]) -> subprocess.CompletedProcess:
        return self._run([self._iptables, "-w", "-t", table, op, chain, *rule],
                         f"iptables {op} {table}/{chain}")

    @staticmethod
    def _missing(done: subprocess.CompletedProcess) -> bool:
        message = done.stderr
        return "No chain/target/match" in message or "does a matching rule exist" in message

    def ensure_iptables_rule(self, table: str, chain: str, rule: tuple[str, ...]) -> bool:
        if self._rule_command("-C", table, chain, rule).returncode == 0:
            return False
        return self._insert_rule(table, chain, rule)

    def _insert_rule(self, table: str, chain: str, rule: tuple[str, ...]) -> bool:
        done = self._rule_command("-I", table, chain, rule)
        if done.returncode != 0:
            if self._missing(done):
                raise NotFound(f"iptables {table}/{chain}: {done.stderr.strip()}")
            raise KernelError(f"iptables -I {chain}: {done.stderr.strip()}")
        return True

    def ensure_iptables_rules(self, rules: Sequence[tuple[str, str, tuple[str, ...]]]) -> list[bool]:
        # One iptables-save instead of one "-C" run per rule, and one
        # iptables-restore for every insertion (a tool run costs 0.3-1 s under
        # the test VM's emulation). A rule found there as iptables-save writes
        # it is present. A rule whose target its chain never jumps to is
        # missing. Only in between (a jump to that target written otherwise)
        # is "-C" asked: the kernel's answer, never a duplicate because our
        # spelling differs from the tool's.
        done = self._run([f"{self._iptables}-save"], "iptables-save")
        if done.returncode != 0:
            raise KernelError(f"iptables-save: {done.stderr.strip() or done.stdout.strip()}")
        saved = _saved_rules(done.stdout)
        results: list[bool] = []
        missing: list[int] = []
        for table, chain, rule in rules:
            present = saved.get((table, chain))
            if present is not None and tuple(rule) in present:
                results.append(False)
            elif present is not None and not any(r[-1:] == tuple(rule[-1:]) for r in present):
                results.append(True)
                missing.append(len(results) - 1)
            else:
                results.append(self.ensure_iptables_rule(table, chain, rule))
        if missing and not self._insert_rules([rules[i] for i in missing]):
            # One at a time, for the error of the very rule; "-C" first, as
            # a table that did commit may hold some of them already.
            for i in missing:
                self.ensure_iptables_rule(*rules[i])
        return results

    def _insert_rules(self, rules: Sequence[tuple[str, str, tuple[str, ...]]]) -> bool:
        """Insert every rule at the top of its chain in one iptables-restore
        (in order, as many ``-I`` would). False when the text cannot say a
        rule (a quote or backslash in an argument) or the tool refused it;
        each table's block is all or nothing, the tables are not."""
        tables: dict[str, list[str]] = {}
        for table, chain, rule in rules:
            if any(c in arg for arg in rule for c in '"\\\n') or any(not arg for arg in rule):
                return False
            words = (f'"{arg}"' if " " in arg else arg for arg in rule)
            tables.setdefault(table, []).append(f"-I {chain} 1 {' '.join(words)}")
        text = "".join(f"*{table}\n" + "\n".join(lines) + "\nCOMMIT\n" for table, lines in tables.items())
        done = self._run([f"{self._iptables}-restore", "-w", "--noflush"], "iptables-restore", text)
        return done.returncode == 0

    def delete_iptables_rule(self, table: str, chain: str, rule: tuple[str, ...]) -> None:
        done = self._rule_command("-D", table, chain, rule)
        if done.returncode != 0:
            if self._missing(done):
                raise NotFound(f"iptables {table}/{chain}: rule {' '.join(rule)!r} not found")
            raise KernelError(f"iptables -D {chain}: {done.stderr.strip()}")


    def clear_conntrack(self, protocol: str, address: str, port: int, real_address: str | None = None) -> int:
        done = self._run(conntrack.delete_command(self._conntrack, protocol, address, port, real_address),
                         "clearing conntrack entries")
        return conntrack.deleted_count(done.returncode, done.stdout, done.stderr)


def _saved_rules(text: str) -> dict[tuple[str, str], set[tuple[str, ...]]]:
    """``iptables-save`` output as {(table, chain): {rule arguments after "-A CHAIN"}};
    every chain declared (``:NAME``) has an entry, empty when it holds no rule."""
    rules: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    table = ""
    for line in text.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
        elif line.startswith(":"):
            rules.setdefault((table, line[1:].split()[0]), set())
        elif line.startswith("-A "):
            try:
                words = shlex.split(line)
            except ValueError:
                continue  # unbalanced quotes: such a rule is none of ours
            rules.setdefault((table, words[1]), set()).add(tuple(words[2:]))
    return rules


def _flush_before_delete(text: str) -> str:
    """Declare every chain that a ``-X`` line deletes, right after its ``*table``.

    The kernel only deletes empty chains (EBUSY otherwise), while the
    interface promises ``-X NAME`` deletes the chain whatever it holds;
    declaring it in the same transaction flushes it first, atomically.
    """
    lines = text.splitlines()
    out: list[str] = []
    table_at = None
    declared: set[str] = set()
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("*"):
            table_at, declared = len(out), set()
        elif stripped.startswith(":"):
            declared.add(stripped[1:].split()[0])
        elif stripped.startswith("-X ") and table_at is not None:
            name = stripped.split()[1]
            if name not in declared:
                out.insert(table_at + 1, f":{name} - [0:0]")
                declared.add(name)
        out.append(line)
    return "\n".join(out) + "\n"


