"""gcpause: the collector is off during bulk work, and what it made is frozen afterwards."""

from __future__ import annotations

import gc
import weakref

import pytest

from platformd.common import gcpause


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def pause():
    """A private pause; the process's collector state is restored afterwards."""
    was_enabled = gc.isenabled()
    gc.enable()
    gc.unfreeze()
    yield gcpause._CyclicGcPause(full_share=0.05, full_interval=0)
    gc.unfreeze()
    gc.collect()
    (gc.enable if was_enabled else gc.disable)()


def _garbage_cycle() -> weakref.ref:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_the_collector_is_off_while_anyone_is_inside(pause):
    with pause:
        assert not gc.isenabled()
        with pause:
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer user is still inside
    assert gc.isenabled()


def test_leaving_freezes_what_was_made_inside(pause):
    with pause:
        pass  # the first freeze sets the baseline
    with pause:
        kept = [Node() for _ in range(5000)]
    unfrozen = {id(obj) for generation in range(3) for obj in gc.get_objects(generation)}
    assert not any(id(node) in unfrozen for node in kept)  # no collection will walk them
    del kept


def test_a_collector_that_was_off_stays_off_and_nothing_is_frozen(pause):
    gc.disable()
    with pause:
        kept = [Node() for _ in range(1000)]
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0
    del kept


def test_frozen_garbage_cycles_are_collected_once_the_frozen_population_grows(pause):
    with pause:
        pass
    baseline = gc.get_freeze_count()
    cycle = _garbage_cycle()
    with pause:
        pass
    gc.collect()
    assert cycle() is not None  # frozen: full collections do not see it
    assert pause.full_collections == 0
    grow = int(max(baseline, gcpause.FULL_FLOOR) * pause.full_share) + 1000
    with pause:
        kept = [Node() for _ in range(grow)]
    assert pause.full_collections == 1
    assert cycle() is None
    del kept


def test_growth_between_pauses_counts_too(pause):
    """Objects made outside the pause (an informer's) are frozen at the next exit, and counted."""
    with pause:
        pass
    cycle = _garbage_cycle()
    with pause:
        pass  # the cycle is frozen
    grow = int(max(gc.get_freeze_count(), gcpause.FULL_FLOOR) * pause.full_share) + 1000
    kept = [Node() for _ in range(grow)]
    gc.collect(1)  # normal collections move them to older generations first
    assert cycle() is not None and pause.full_collections == 0
    with pause:
        pass
    assert pause.full_collections == 1
    assert cycle() is None
    del kept


def test_growth_that_died_since_does_not_collect(pause):
    with pause:
        pass
    limit = int(max(gc.get_freeze_count(), gcpause.FULL_FLOOR) * pause.full_share)
    for _ in range(4):  # frozen in all: twice the limit; alive at any time: half of it
        with pause:
            made = [Node() for _ in range(limit // 2)]
        del made  # freed by reference counting, frozen or not
    assert pause.full_collections == 0


def test_full_collections_wait_for_the_interval():
    """Growth alone does not collect within FULL_INTERVAL of the last full collection (or the baseline)."""
    now = [0.0]
    was_enabled = gc.isenabled()
    gc.enable()
    gc.unfreeze()
    pause = gcpause._CyclicGcPause(full_share=0.05, full_interval=600, clock=lambda: now[0])
    try:
        with pause:
            pass
        cycle = _garbage_cycle()
        grow = int(max(gc.get_freeze_count(), gcpause.FULL_FLOOR) * pause.full_share) + 1000
        with pause:
            kept = [Node() for _ in range(grow)]
        assert pause.full_collections == 0 and cycle() is not None  # grown, but too soon
        now[0] = 601.0
        with pause:
            pass
        assert pause.full_collections == 1 and cycle() is None
        del kept
    finally:
        gc.unfreeze()
        gc.collect()
        (gc.enable if was_enabled else gc.disable)()


def test_gcpause_is_the_only_switch_of_the_collector():
    """Two switches would turn the collector back on in the middle of each
    other's work: every pause in the product goes through ``gcpause.paused``."""
    from pathlib import Path

    package = Path(gcpause.__file__).resolve().parents[1]
    switching = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                       if "gc.disable(" in p.read_text() or "gc.enable(" in p.read_text())
    assert switching == ["common/gcpause.py"]
