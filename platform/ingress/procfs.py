"""Other processes as /proc shows them: their title and their stat fields.

nginx names its processes in their command line ("nginx: master process
...", "nginx: worker process"); the data plane (nginx.py) and the sweep of
orphaned workers (orphans.py) find them by that title and their parent.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["stat_fields", "title"]


def title(pid: int) -> str:
    """The command line of ``pid`` with NULs as spaces ("" when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\x00", b" ").decode(errors="replace").strip()


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name: the state
    ("Z" for a zombie), then the parent's pid, ...; None when it is gone.
    The name is in parentheses and may contain spaces and ')', so the fields
    start after the last ')'."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()
