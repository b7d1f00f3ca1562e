"""How ``platformctl`` finds a ``platformd`` running on this machine with no flags.

``platformd --role ...`` (and ``make demo``) write a small JSON *pointer* to
a well-known place of the user who runs it, and remove it on the way out:

    root:   /run/platformd/current.json
    others: $XDG_RUNTIME_DIR/platformd/current.json, else /tmp/platformd-<uid>/current.json
    PLATFORM_POINTER, when set, names the file instead (tests: one per run)

It says where that run's health server listens and where its state lives:
``{"pid": 1234, "role": "ingress", "health_url": "http://127.0.0.1:18254",
"state_dir": "/tmp/platform-demo-x/state"}``. ``platformctl`` reads it when no
``--url``/``--state-dir`` is given; flags always win. A pointer whose process
is gone is stale and ignored, so a crashed run never misleads.

The directory is created 0700 and must be owned by the user: in a shared
``/tmp`` another user could otherwise plant a pointer (or a symlink) there.
The last run started wins; its pointer is removed only by the run that wrote it.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Pointer", "pointer_path", "write", "remove", "read"]


@dataclass(frozen=True)
class Pointer:
    pid: int
    role: str
    health_url: str | None
    state_dir: str


def pointer_path() -> Path:
    override = os.environ.get("PLATFORM_POINTER")
    if override:
        return Path(override)
    if os.geteuid() == 0:
        return Path("/run/platformd/current.json")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "platformd" / "current.json"
    return Path("/tmp") / f"platformd-{os.getuid()}" / "current.json"


def _is_private(directory: Path) -> bool:
    """``directory`` is a real directory of ours that nobody else may write."""
    try:
        st = os.lstat(directory)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _private_dir(directory: Path) -> bool:
    """Make ``directory`` (0700) unless it exists; then check it."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return False
    return _is_private(directory)


def write(pointer: Pointer, path: Path | None = None) -> Path | None:
    """Record ``pointer``; returns where, or None when the place is unusable
    (a pointer is a convenience: never a reason to fail a start)."""
    path = path or pointer_path()
    if not _private_dir(path.parent):
        return None
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps(asdict(pointer), sort_keys=True) + "\n")
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        return None
    return path


def remove(pid: int, path: Path | None = None) -> None:
    """Remove the pointer if it is still the one ``pid`` wrote."""
    path = path or pointer_path()
    current = read(path, check_alive=False)
    if current is not None and current.pid == pid:
        path.unlink(missing_ok=True)


def read(path: Path | None = None, *, check_alive: bool = True) -> Pointer | None:
    """The pointer of a live run, or None (none, unreadable, not ours, stale)."""
    path = path or pointer_path()
    try:
        st = os.lstat(path)
        if st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode) or not _is_private(path.parent):
            return None
        doc = json.loads(path.read_text())
        pointer = Pointer(pid=int(doc["pid"]), role=str(doc["role"]), health_url=doc.get("health_url"),
                          state_dir=str(doc["state_dir"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if check_alive and not _alive(pointer.pid):
        return None
    return pointer


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
