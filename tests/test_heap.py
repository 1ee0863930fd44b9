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
