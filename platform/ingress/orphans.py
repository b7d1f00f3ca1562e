"""Find and stop nginx workers orphaned by a master that died (kill -9, OOM).

A worker does not die with its master: it keeps the listening sockets and
serves with the state it had, and a new master cannot bind the same ports
until it is gone. The new master's launcher cannot know the old workers'
pids (it is a new process), so it finds them by what they hold: any process
whose title is an nginx worker and that has one of *our* listening sockets
open (a TCP port we listen on, or one of our unix sockets) is an orphan of
ours. Workers of other nginx instances on the machine are never touched.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

from platformd.ingress import procfs

log = logging.getLogger(__name__)

TCP_LISTEN = "0A"


def _listening_inodes(ports: set[int], unix_paths: set[str]) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == TCP_LISTEN and int(local.rsplit(":", 1)[1], 16) in ports:
                inodes.add(inode)
    try:
        for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 8 and fields[7] in unix_paths:
                inodes.add(fields[6])
    except OSError:
        pass
    return inodes


def _holds(pid: int, inodes: set[str]) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


def find_orphaned_workers(ports: set[int], unix_paths: set[str]) -> set[int]:
    """Pids of nginx workers holding our sockets whose master is gone."""
    inodes = _listening_inodes(ports, unix_paths)
    if not inodes:
        return set()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == os.getpid() or not procfs.title(pid).startswith("nginx: worker process"):
            continue
        if _holds(pid, inodes) and not _master_alive(pid):
            found.add(pid)
    return found


def _master_alive(worker: int) -> bool:
    """True when the worker's parent is still an nginx master."""
    fields = procfs.stat_fields(worker)
    return fields is not None and procfs.title(int(fields[1])).startswith("nginx: master process")


def stop_orphaned_workers(ports: set[int], unix_paths: set[str], grace: float = 2.0) -> set[int]:
    """QUIT orphans and wait until they let go of our listening sockets.

    On QUIT a worker closes its listeners at once and then finishes the
    requests it is serving (bounded by ``worker_shutdown_timeout``), so the
    new master can bind without cutting anyone off. A worker still holding a
    listener after ``grace`` seconds is stuck and gets SIGKILL. Returns the
    pids that were found.
    """
    inodes = _listening_inodes(ports, unix_paths)
    orphans = find_orphaned_workers(ports, unix_paths)
    if not orphans:
        return orphans
    log.warning("nginx workers orphaned by a dead master hold our sockets; asking them to quit: %s",
                sorted(orphans))
    for pid in orphans:
        _signal(pid, signal.SIGQUIT)
    deadline = time.monotonic() + grace
    holding = set(orphans)
    while holding and time.monotonic() < deadline:
        time.sleep(0.02)
        holding = {pid for pid in holding if _exists(pid) and _holds(pid, inodes)}
    for pid in holding:
        log.warning("orphaned nginx worker %d did not release its sockets in %.1fs; killing it", pid, grace)
        _signal(pid, signal.SIGKILL)
    return orphans


def _exists(pid: int) -> bool:
    fields = procfs.stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
