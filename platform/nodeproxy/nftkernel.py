"""The nftables mode's one door to the kernel: :class:`NftKernel`.

Four verbs: apply one transaction, read our table back, delete it, clear
conntrack entries. Implementations: :class:`NftCli` (here), the in-memory
:class:`~.nftfake.FakeNft` and :class:`DryRunNft` (prints).

Why ``nft -f`` for big transactions and netlink of our own for small ones
(:class:`~.nftnetlink.NftNetlink`, what the node proxy uses), measured on
this machine (kernel 6.18, nft 1.0.6, 10,000 Services x 5 endpoints,
bench/bench_nodeproxy.py):

* Loading the whole table is one ``nft -f`` of ~60,000 lines: 1.6-2 s, half
  of it the kernel's own work; encoding the same in Python would not be
  faster, and nft's parser and checks are worth having there.
* A one-endpoint change through ``nft -f`` costs 30-65 ms at 10,000
  Services (16 ms at 1,000): before sending anything, nft reads every chain
  and set of the table back to build its cache (any ``add rule`` or ``add
  element`` does; an empty transaction costs 2-7 ms). libnftables
  in-process (tried through ctypes) refetches the same cache after each
  commit and measured the same. Our own netlink batch skips that: the
  same change (four map elements, see ``nftrules``) takes 0.2 ms at 1,000
  Services and 0.5-3 ms at 10,000. What netlink cannot skip is the
  kernel's own work when a rule changes (a new endpoint count): the commit
  then validates the whole table's jump graph. With one rule per Service
  chain that costs an endpoint added 0.75 ms at 1,000 Services and 4.5 ms
  at 10,000 (with five rules per chain, one rule cost 15 ms at 10,000); an
  element costs 0.02 ms.

Every transaction is atomic (the kernel applies all of it or nothing), so a
crash or an error midway leaves the previous rules in force.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from typing import Protocol, Sequence, TextIO

from . import conntrack
from .kernel import KernelError
from .nftmodel import TABLE, TABLE_FAMILY, Op, Table, parse, render


class NftUnavailable(KernelError):
    """No usable nft (tool missing, or the kernel lacks nf_tables)."""


class NftKernel(Protocol):
    def probe(self) -> None:
        """Raise :class:`NftUnavailable` when nftables cannot be used."""

    def transact(self, ops: Sequence[Op], create_table: bool = False) -> None:
        """Apply ``ops`` as one atomic transaction (``create_table``: make
        sure our table exists first, in the same transaction). Raises
        :class:`KernelError`; then nothing was applied."""

    def read(self) -> Table | None:
        """Our table as the kernel has it; None when it does not exist."""

    def delete_table(self) -> bool:
        """Delete our table; False when there was none."""

    def clear_conntrack(self, protocol: str, address: str, port: int, real_address: str | None = None) -> int:
        """Delete conntrack entries to ``address:port`` (answered by
        ``real_address`` only, if given). Returns how many went."""

    def close(self) -> None: ...


class NftCli:
    """``nft`` and ``conntrack`` as subprocesses."""

    def __init__(self, nft: str | None = None, conntrack: str | None = None) -> None:
        self._nft = nft or shutil.which("nft") or "/usr/sbin/nft"
        self._conntrack = conntrack or shutil.which("conntrack") or "/usr/sbin/conntrack"
        self.transactions = 0

    def _run(self, argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120)
        except FileNotFoundError as err:
            raise NftUnavailable(f"{argv[0]} not found") from err
        except subprocess.TimeoutExpired as err:
            raise KernelError(f"{argv[0]} timed out") from err

    def probe(self) -> None:
        done = self._run([self._nft, "list", "tables"])
        if done.returncode != 0:
            raise NftUnavailable(f"nft cannot list tables: {done.stderr.strip()}")

    def transact(self, ops: Sequence[Op], create_table: bool = False) -> None:
        text = render(ops, create_table)
        done = self._run([self._nft, "-f", "-"], stdin=text)
        self.transactions += 1
        if done.returncode != 0:
            raise KernelError(f"nft transaction of {len(ops)} operations failed: {_first_error(done.stderr)}")

    def read(self) -> Table | None:
        done = self._run([self._nft, "list", "table", TABLE_FAMILY, TABLE])
        if done.returncode != 0:
            if "No such file or directory" in done.stderr:
                return None
            raise KernelError(f"nft list table: {_first_error(done.stderr)}")
        return parse(done.stdout)

    def delete_table(self) -> bool:
        done = self._run([self._nft, "delete", "table", TABLE_FAMILY, TABLE])
        if done.returncode == 0:
            return True
        if "No such file or directory" in done.stderr:
            return False
        raise KernelError(f"nft delete table: {_first_error(done.stderr)}")

    def clear_conntrack(self, protocol: str, address: str, port: int, real_address: str | None = None) -> int:
        done = self._run(conntrack.delete_command(self._conntrack, protocol, address, port, real_address))
        return conntrack.deleted_count(done.returncode, done.stdout, done.stderr)

    def close(self) -> None:
        pass


def _first_error(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if "Error" in ln:
            return ln.strip()
    return lines[0].strip() if lines else "(no message)"


class DryRunNft:
    """Prints each transaction as ``nft -f`` input instead of applying it;
    keeps the would-be table in memory so later syncs print only their
    difference, as a real run would. Never touches the kernel."""

    def __init__(self, out: TextIO | None = None) -> None:
        from .nftfake import FakeNft
        self._model = FakeNft()
        self._out = out or sys.stdout

    def probe(self) -> None:
        pass

    def transact(self, ops: Sequence[Op], create_table: bool = False) -> None:
        self._model.transact(ops, create_table)
        self._out.write(render(ops, create_table))
        self._out.flush()

    def read(self) -> Table | None:
        return self._model.read()

    def delete_table(self) -> bool:
        self._out.write(f"delete table {TABLE_FAMILY} {TABLE}\n")
        return self._model.delete_table()

    def clear_conntrack(self, protocol: str, address: str, port: int, real_address: str | None = None) -> int:
        self._out.write("# " + " ".join(conntrack.delete_command("conntrack", protocol, address, port, real_address))
                        + "\n")
        return 0

    def close(self) -> None:
        pass
