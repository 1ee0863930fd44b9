"""The garbage-collector settings of daemon.heap: ``settled()`` must leave the process as it found it."""

from __future__ import annotations

import gc

from daemon import heap


def test_settled_applies_then_restores_the_collector_settings() -> None:
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    kept = [[object()] for _ in range(100)]  # alive when the block starts: frozen by it
    with heap.settled():
        assert gc.get_threshold()[0] == heap.YOUNG_THRESHOLD
        assert gc.get_freeze_count() >= frozen_before + len(kept)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0  # handed back to the collector (gc.unfreeze)


def test_settled_restores_on_error() -> None:
    before = gc.get_threshold()
    try:
        with heap.settled():
            raise RuntimeError("job failed")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_freeze_for_exit_returns_its_argument_and_freezes_the_live_heap() -> None:
    kept = [[object()] for _ in range(100)]  # alive at the call: frozen by it
    try:
        assert heap.freeze_for_exit(3) == 3  # the exit code passes through
        assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()  # the test process goes on: hand the objects back to the collector


def test_batch_mode_collects_after_batches_only_and_frees_cycles_at_the_full_collection() -> None:
    """settle(batches=True) switches the automatic collector off; after_batch freezes what is alive;
    a reference cycle that became garbage waits for the full collection, which comes after
    FULL_COLLECTION_EVERY_S or once the frozen objects have grown HEAP_GROWTH times (counted every
    GROWTH_CHECK_EVERY_S). Without batch mode (a plain settle, or none) after_batch does nothing;
    settled() gives the collector back as it was."""
    import time
    import weakref

    class Node:
        pass

    thresholds = gc.get_threshold()
    assert heap.after_batch() is False and gc.get_freeze_count() == 0  # no batch mode: nothing done
    try:
        heap.settle(batches=True)
        assert not gc.isenabled()
        start = time.monotonic()
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector can free it
        gone = weakref.ref(a)
        assert heap.after_batch(now=start)
        assert gc.get_freeze_count() > 0
        del a, b
        assert heap.after_batch(now=start + 1.0)  # before the period, the heap not grown: kept
        assert gone() is not None
        assert heap.after_batch(now=start + heap.FULL_COLLECTION_EVERY_S + 1.0)
        assert gone() is None  # the full collection freed the cycle
        c, d = Node(), Node()
        c.other, d.other = d, c
        gone = weakref.ref(c)
        del c, d
        grown = [[i] for i in range(heap.HEAP_GROWTH * gc.get_freeze_count() + 10)]  # the heap grows past the bound
        later = start + heap.FULL_COLLECTION_EVERY_S + 1.0
        assert heap.after_batch(now=later + 1.0)  # the growth is not counted within GROWTH_CHECK_EVERY_S
        assert gone() is not None
        assert heap.after_batch(now=later + heap.GROWTH_CHECK_EVERY_S)
        assert gone() is None and len(grown) > 0  # collected early: the frozen objects had grown past it
    finally:
        gc.unfreeze()
        gc.enable()
        with heap.settled():  # leaves the module out of batch mode, the collector as found
            pass
    assert gc.isenabled() and heap.after_batch() is False
    heap.settle()  # a plain settle: not batch mode
    try:
        assert gc.isenabled() and heap.after_batch() is False
    finally:
        gc.unfreeze()
        with heap.settled():
            pass
        gc.set_threshold(*thresholds)  # the test process's collector as it was
