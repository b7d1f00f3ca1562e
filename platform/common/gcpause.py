"""Keeping Python's cyclic garbage collector off bulk work: the one switch.

Translating, viewing and listing routes at 10,000 Ingresses, decoding a
list page of 500 EndpointSlices, and a node proxy sync of 10,000 Services
allocate hundreds of thousands of objects, none in reference cycles
(reference counting frees them all), yet the allocations trigger
collections that walk the whole heap, informer stores included: a third of
a translation's time, two thirds of a cold routes section, 3-4x the parse
of a list page. The collector is one switch per process, so every user
goes through ``paused``: it is reentrant and shared by threads, the
collector is off while anyone is inside, and runs again only when the last
user leaves, if it was on before the first came (one user can never turn it
back on in the middle of another's work).

Pausing alone only postpones the walk: the objects made while paused wait
in the youngest generation, so the first collection afterwards walks all
of them (0.2-0.4 s after a translation at 10,000 Ingresses), the next
generation's walks them again, and sooner or later a full collection walks
the whole heap. So the last user to leave also *freezes* everything alive
(``gc.freeze``, constant time): frozen objects are never walked by a
collection, and are still freed by reference counting as usual, so a
replaced model goes as it did before. What freezing gives up is collecting
*cycles* among frozen objects: garbage cycles that happen to be waiting at
that moment stay until the next full collection. To bound that, once the
frozen population has grown by ``FULL_SHARE`` since the last full
collection (the share CPython itself waits for before a full collection),
and at least ``FULL_INTERVAL`` seconds have passed since it (or since the
first freeze, which only sets the baseline), the leaving user unfreezes
everything and collects it in full (0.25-0.5 s at 10,000 Ingresses), then
freezes the survivors. The interval keeps that walk rare and away from
start-up: a controller whose stores fill up, or a benchmark that grows
its cluster, would otherwise pay it right away, for garbage cycles that
are rare here (our model and the API objects have none). Objects that live and die by reference counting (the
model, replaced on each sync) do not grow the population, so this happens
about as often as the heap really grows.

Freezing is process-wide: objects other code made are frozen too, which
only spares them the same walks (and holds their garbage cycles, if any,
until the next full collection here).
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Callable

__all__ = ["FULL_FLOOR", "FULL_INTERVAL", "FULL_SHARE", "paused"]

# Growth of the frozen population, as a share of it after the last full
# collection, that triggers the next one (CPython's own threshold for full
# collections: long_lived_pending > long_lived_total / 4).
FULL_SHARE = 0.25
# A population below this counts as this big: a small heap's growth is
# cheap to leave until it is worth a collection.
FULL_FLOOR = 100_000
# Seconds between full collections at least: leaked cycles are bounded by
# what 10 minutes make, and a sync pays the walk at most that often.
FULL_INTERVAL = 600.0


class _CyclicGcPause:
    def __init__(self, full_share: float = FULL_SHARE, full_interval: float = FULL_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._was_enabled = False
        self.full_share = full_share
        self.full_interval = full_interval
        self._clock = clock
        self._last_full = 0.0  # when the baseline was set (clock)
        # Frozen after the last full collection; None until the first freeze,
        # which sets it without a collection (the first full sync should not
        # pay a walk of everything it just built).
        self._baseline: int | None = None
        # Objects frozen since the baseline was last checked, counting none
        # that died since: an upper bound of the growth, counted on the
        # small unfrozen generations as they are frozen. (Counting the
        # frozen population walks all of it, 40-100 ms at 10,000 Ingresses,
        # so that is done only when this bound is reached.)
        self._pending = 0
        self.full_collections = 0  # how many times leaving collected in full (diagnostics)

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
                self._freeze()
                gc.enable()

    def _freeze(self) -> None:
        if self._baseline is None:
            gc.freeze()
            self._baseline, self._last_full = gc.get_freeze_count(), self._clock()
            return
        self._pending += _unfrozen()
        gc.freeze()
        limit = max(self._baseline, FULL_FLOOR) * self.full_share
        if self._pending <= limit or self._clock() - self._last_full < self.full_interval:
            return
        self._pending = 0
        if gc.get_freeze_count() <= self._baseline + limit:
            return  # most of what was frozen since has been freed already
        # Collect what freezing kept from being collected (see module docstring).
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._baseline, self._last_full = gc.get_freeze_count(), self._clock()
        self.full_collections += 1


def _unfrozen() -> int:
    """How many objects the collector tracks outside the frozen set: what
    ``gc.freeze`` would add now (made since the last freeze and alive, or
    dead in cycles)."""
    return sum(len(gc.get_objects(generation)) for generation in range(3))


paused = _CyclicGcPause()
