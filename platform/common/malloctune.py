"""glibc malloc settings for a long-running controller holding a big heap.

Why: Python hands every allocation over 512 bytes to malloc. glibc then
(1) gives each thread that allocates its own arena, up to 8 per CPU, and
(2) raises its mmap threshold after a big block is freed, so the next
ones of that size come from an arena instead of mmap. A controller with
a dozen threads that renders an 11 MB nginx.conf and sends megabyte Lua
payloads now and then ends up with many half-empty arenas and big freed
blocks held in them: resident memory grows by tens of megabytes over a
few reloads although the Python heap does not (bench/bench_ingress.py).
Two arenas, and a fixed 1 MiB mmap threshold (blocks that large are
mapped and unmapped whole, which costs a system call per megabyte-sized
allocation: rare here), keep resident memory near what is in use.

``tune()`` uses ``mallopt`` through ctypes, so it needs no environment
variables set before the process starts; it does nothing where glibc's
``mallopt`` is missing (musl, other systems) and never raises.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["tune"]

log = logging.getLogger(__name__)

# From glibc's malloc.h.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

ARENAS = 2
MMAP_THRESHOLD = 1 << 20
TRIM_THRESHOLD = 4 << 20


def tune() -> bool:
    """Apply the settings above; True if glibc took all of them."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = all(mallopt(param, value) == 1 for param, value in (
        (_M_ARENA_MAX, ARENAS), (_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD)))
    if not ok:
        log.debug("mallopt refused a setting; malloc keeps its defaults for it")
    return ok
