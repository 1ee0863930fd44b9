"""Garbage-collector settings for the long-running processes (the daemon, the dedup worker and the
signature worker processes).

A 10,000-row batch allocates hundreds of thousands of short-lived objects (rows, field dicts,
documents). With CPython's default thresholds ``(700, 10, 10)`` that means hundreds of young
collections per batch, and every hundredth of them a full one that walks every live object,
start-up state included. Nearly all of these objects die by reference counting, not by the
collector, so that work finds little. Measured on 10,000 plain-sync documents: building them
took 110–125 ms with the defaults and 62–64 ms with :func:`settle`.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

YOUNG_THRESHOLD = 50_000
"""Allocations (net of frees) between young collections: CPython's default is 700."""

FULL_COLLECTION_EVERY_S = 300.0
"""Seconds between the full collections of a process in batch mode (:func:`settle` with
``batches=True``, see :func:`after_batch`): what bounds how long cyclic garbage is kept. Five
minutes keeps that to a few hundred batches' leftovers (a dedup batch leaves a few hundred cyclic
objects: ~1,000 found over 3,000 records at 100,000 listings), for one pass over the heap (~1 s for
a dedup worker holding 1,000,000 tracked objects) every five minutes of work."""

HEAP_GROWTH = 4
"""In batch mode, a full collection also comes as soon as the frozen objects have grown this many
times since the last one (the safety valve for a batch that leaves much cyclic garbage). 4 rather
than 2: a starting dedup worker fills its document cache from nothing, and each doubling would
cost a full pass over a heap that holds no garbage (4 full collections, 0.6 s, over the first
3,000 records of the 20,000-listing bench)."""

GROWTH_CHECK_EVERY_S = 10.0
"""Seconds between two checks of :data:`HEAP_GROWTH` in batch mode. Counting the frozen objects
(``gc.get_freeze_count``) walks every one of them: ~11 ms for 1,000,000, which after every batch
would cost a realtime worker's one-record batches more than the rest of their handling. Every 10 s
it is ~0.1% of a core, and the valve reacts at most 10 s late."""

_batches = False
_last_full = 0.0
_last_check = 0.0
_live_after_full = 0


def settle(*, batches: bool = False) -> None:
    """Collect once, freeze what is alive (start-up state: modules, settings, pools; Python's
    ``gc.freeze``) so later full collections skip it, and collect young objects every
    :data:`YOUNG_THRESHOLD` net allocations instead of every 700. Reference cycles are still
    collected, only less often. Call it once a process has finished starting.

    Args:
        batches: the process works in batches and calls :func:`after_batch` after each (the dedup
            worker, ``nearsync dedup``): the automatic collector is switched off (``gc.disable``)
            and :func:`after_batch` collects instead (see there). Not for the indexing daemon or
            ``reindex``, whose batches keep little alive: a signed 20,000-ad reindex measured no
            gain (3,077-3,268 against 3,115-4,040 docs/s, 2 rounds alternated, load ~1.5).
    """
    global _batches, _last_full, _last_check, _live_after_full
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
    _batches, _last_full = batches, time.monotonic()
    _last_check, _live_after_full = _last_full, gc.get_freeze_count()
    if batches:
        gc.disable()


def after_batch(now: float | None = None) -> bool:
    """In batch mode (:func:`settle` with ``batches=True``): freeze what is alive after a batch
    (``gc.freeze``, no scan), and collect in full (``gc.unfreeze``, ``gc.collect``, freeze again)
    every :data:`FULL_COLLECTION_EVERY_S` or when the frozen objects have grown :data:`HEAP_GROWTH`
    times since the last full collection (checked every :data:`GROWTH_CHECK_EVERY_S`), whichever
    comes first.

    Why: the dedup worker's batches allocate and keep many tracked objects (decoded candidate
    documents and their scoring values, cached; the batch's pairs) and free nearly all of the rest
    by reference counting; the collector found ~1,000 cyclic objects over 3,000 records at 100,000
    dense listings while scanning the survivors again and again: 330 young and 29 middle-generation
    collections, 2.8-3.0 s of 11-13 s of the worker's CPU (``gc.callbacks``). With the automatic
    collector off, a batch's objects are never scanned unless they are still alive at a full
    collection; they are still freed by reference counting when they die (evicted, dropped).
    What waits is cyclic garbage (tracebacks, some library objects): until the next full
    collection, at most :data:`FULL_COLLECTION_EVERY_S`, or sooner if the heap has grown :data:`HEAP_GROWTH` times.

    Args:
        now: the monotonic clock in seconds (default ``time.monotonic()``; tests pass their own).
    Returns:
        False when the process is not in batch mode (nothing done: the automatic collector works
        as before), else True.
    """
    global _last_full, _last_check, _live_after_full
    if not _batches:
        return False
    now = time.monotonic() if now is None else now
    gc.freeze()
    full = now - _last_full >= FULL_COLLECTION_EVERY_S
    if not full and now - _last_check >= GROWTH_CHECK_EVERY_S:
        _last_check = now
        full = gc.get_freeze_count() > HEAP_GROWTH * _live_after_full
    if full:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _last_full, _last_check, _live_after_full = now, now, gc.get_freeze_count()
    return True


@contextlib.contextmanager
def settled() -> Iterator[None]:
    """:func:`settle` (not in batch mode) for the duration of a ``with`` block, for a job run inside
    a longer-lived process (``nearsync evaluate`` called from the test suite or a notebook): on exit
    every frozen object is handed back to the collector (``gc.unfreeze``, which has no partial form:
    what an earlier :func:`settle` froze too), the thresholds restored and the collector switched
    back on if it was (an earlier batch-mode :func:`settle`), so that what the block froze can
    still be collected once it is garbage."""
    global _batches
    before, enabled = gc.get_threshold(), gc.isenabled()
    settle()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
        if enabled:
            gc.enable()
        _batches = False


def freeze_for_exit(result: T) -> T:
    """Freeze every live object (``gc.freeze``) as a command-line process is about to exit, and
    return ``result`` unchanged (the exit code, so ``sys.exit(freeze_for_exit(main()))`` reads as
    one step).

    The interpreter's shutdown runs full collections, which walk every live object and find
    nothing: what is alive at exit is freed by reference counting as the modules are torn down.
    Frozen objects sit in the permanent generation, which those collections skip. Measured on
    ``nearsync evaluate``: 3.9 s from the command's return to the process's end after a
    25,000-listing run (~800,000 compared pairs, the documents and memos still alive), about 1 s
    after a 5,000-listing run and 0.2-0.3 s with the heap frozen (same run, interleaved; the same
    idea as Instagram's ``gc.freeze`` at fork, applied at exit). Only for the console entry
    (:func:`daemon.cli.console`): an embedding process, such as the test suite calling
    :func:`daemon.cli.main`, keeps its collector as it was.
    """
    gc.freeze()
    return result
