"""Pausing Python's cyclic garbage collector around bulk model work.

Translating, viewing and listing routes at 10,000 Ingresses allocate
hundreds of thousands of objects, none in reference cycles (reference
counting frees them all), yet the allocations trigger collections that
walk the whole heap, informer stores included: a third of a translation's
time, two thirds of a cold routes section. ``paused`` is reentrant and
shared by threads: the collector runs again when the last user leaves, if
it was on before the first came.
"""

from __future__ import annotations

import gc
import threading

__all__ = ["paused"]


class _CyclicGcPause:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._was_enabled = False

    def __enter__(self) -> None:
        with self._lock:
            if self._active == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._active += 1

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0 and self._was_enabled:
                gc.enable()


paused = _CyclicGcPause()
