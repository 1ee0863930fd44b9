"""The dedup worker's sweep: while the dedup queue is idle, the worker processes the table's live
records again, a few per second, one pass over the table after another until a pass sees no change;
then it rests until something the flags depend on changes.

Why: flags are a function of the data, except for two rules that see the table as it was when a
record was processed (docs/architecture.md, "Dedup worker"): the candidate cap (a record is compared
with its best ``candidate_cap`` candidates of that moment) and ``exhaustive_below`` (a scope that
has grown past it is no longer compared whole). A pass over the settled table gives exactly the
links, clusters and flags of a clean pass (``bench/bench_history.py``); ``nearsync dedup --requeue``
makes one at once, and the sweep makes it without an operator, at ``[dedup] sweep_per_s`` records
per second and worker (:data:`daemon.dedup.settings.SWEEP_PER_S`; 0: off).

How: each ``nearsync dedup`` worker runs one :class:`Sweeper` beside its queue loop. Every
``chunk / sweep_per_s`` seconds (a chunk is a quarter of a second's worth of records), when the
worker's loop is idle (waiting for a change) and no change is due on the table's dedup queue (so a
worker does not sweep while another one works through changes under the same per-table lock), it
takes the next ``chunk`` record ids of the table's sweep cursor (named query ``sweep_next``,
``nearsync.dedup_sweeps``, migration 0023: under the cursor row's lock, so workers share one pass and
never sweep the same records) and hands them to the loop's handler as one batch, on a connection of
its own. After a chunk it pauses at least as long as the chunk took, so the sweep never takes more
than half of the worker's time. Nothing goes through the queue: no tracking rows, no
acknowledgements, no lag. A record swept while a change of it is processed is handled as two workers
handle it (the per-table dedup lock and the revalidation under it). A chunk that fails is handled in
halves, as the queue loop does, and a record that fails alone is logged and left to the next pass.

When it rests: a pass over a table that nothing changed while it ran gives the clean pass's flags,
and another one would change nothing. So the cursor row (migration 0024) keeps ``changed``: set by
each batch of real changes the worker processes (in its transaction), by a worker starting or its
sweep reconnecting (its settings may be new), by a record the sweep could not process, by a
moderator's decision and by a new corpus snapshot (named queries ``sweep_changed``,
``sweep_changed_locking``), and cleared by a pass's first chunk. It also counts the pass's chunks
handed out and reported processed (``sweep_chunk_done``). Back at the start, the sweep rests when
every chunk of the pass that just ended was processed and ``changed`` is still clear:
``sweep_next`` hands out nothing until ``changed`` is set, and the sweeper asks again every
:data:`REST_POLL_S`. A chunk still unreported keeps it waiting, for at most :data:`CHUNK_LEASE_S`
after the last hand-out; then the chunk counts as lost with its worker (killed, or stopped for good)
and a new pass starts. A change that only reached the index (its dedup change dead-lettered) sets
nothing until the dead letter is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import psycopg

from daemon import heap
from daemon.backends.base import IndexBackend, KeyedSearchIndex
from daemon.capture.loop import TRANSIENT_ERRORS, BatchHandler, process_isolating
from daemon.capture.queue import DEDUP_QUEUE, REPLAY_SEQ, Claimed
from daemon.db.pool import configure_session
from daemon.db.queries import query
from daemon.logs import get_logger

log = get_logger("nearsync.sweep")

MAX_CHUNK = 100
"""The most records one sweep batch holds (at high ``sweep_per_s`` the chunks come more often)."""

CHUNKS_PER_S = 4
"""Chunks per second at most: a chunk holds a quarter of a second's worth of records, so a change
arriving while one is processed waits for few records (each 1-5 ms on generated ads, ~10-90 ms on a
near-duplicate-dense catalogue, the most for records of large components)."""

RETRY_S = 5.0
"""Seconds before the sweep tries again after the database or the index failed."""

_RETRYABLE: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, psycopg.InterfaceError)
"""What pauses the sweep instead of failing a record: the queue loop's transient errors and a
connection that broke."""

REST_POLL_S = 5.0
"""Seconds between two looks at a resting sweep's cursor row (is the table changed?): one indexed
single-row read, and the queue's ``has_due``."""

CHUNK_LEASE_S = 120.0
"""Seconds after the last hand-out that a pass's chunk not yet reported processed keeps the sweep
from resting or starting the next pass. A chunk takes a few seconds at most, longer only while it
waits for the dedup lock behind a large queue batch; one not reported by then was lost with its
worker, and the next pass starts (a pass started while one was only slow is wasted, not wrong)."""

QUIET_PASS_S = 60.0
"""A pass that took less than this is logged at debug level, a longer one at info (a table smaller
than a chunk completes a pass on every tick)."""


def chunk_size(per_s: float) -> int:
    """Records per sweep batch for ``per_s`` records per second: a quarter of a second's worth
    (:data:`CHUNKS_PER_S`), at least 1 and at most :data:`MAX_CHUNK`.

    Args:
        per_s: ``[dedup] sweep_per_s`` (> 0).
    Returns:
        ``ceil(per_s / CHUNKS_PER_S)`` clamped to 1..:data:`MAX_CHUNK`.
    """
    return max(1, min(MAX_CHUNK, math.ceil(per_s / CHUNKS_PER_S)))


class Sweeper:
    """Processes the table's live records again while the dedup queue is idle (module docstring).

    Args:
        dsn: database DSN (never logged).
        table: the tracked table (``schema.table``).
        handler: the queue loop's handler (``DedupHandler``): its ``process`` gets each chunk.
        per_s: records per second (``[dedup] sweep_per_s``, > 0).
        idle: set while the queue loop waits for a change (``QueueLoop.idle``).
        stopping: returns True once the worker is stopping.
    """

    def __init__(self, dsn: str, table: str, handler: BatchHandler, per_s: float, idle: asyncio.Event,
                 stopping: Callable[[], bool]) -> None:
        self.dsn = dsn
        self.table = table
        self.handler = handler
        self.chunk = chunk_size(per_s)
        self.interval_s = self.chunk / per_s
        self.idle = idle
        self.stopping = stopping
        self.swept = 0
        """Records processed by the sweep since start (those that failed alone not counted)."""
        self.resting = False
        """True while the last :meth:`step` found the sweep resting (module docstring)."""
        self.passes: int | None = None
        """The table's passes completed, as the last chunk reported processed read them (None before)."""

    async def run(self) -> None:
        """Sweep until :attr:`stopping` (cancel the task to stop at once: a chunk in hand rolls back
        and is done again by a later pass). Transient failures (database or index down) are logged
        and retried after :data:`RETRY_S` on a new connection; any other error is logged and retried
        the same way, so the sweep never ends unseen while the worker runs."""
        while not self.stopping():
            try:
                async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                    await configure_session(conn)
                    await conn.execute(query("sweep_start"), {"table": self.table})
                    await self._sweep(conn)
            except _RETRYABLE as e:
                log.warning("sweep paused: database or index unavailable", table=self.table, error=str(e),
                            retry_s=RETRY_S)
                await asyncio.sleep(RETRY_S)
            except Exception as e:  # noqa: BLE001 — the sweep is best effort: it must not end unseen
                log.error("sweep failed; retrying", table=self.table, error=f"{type(e).__name__}: {e}",
                          retry_s=RETRY_S)
                await asyncio.sleep(RETRY_S)

    async def _sweep(self, conn: psycopg.AsyncConnection[Any]) -> None:
        # A chunk every interval_s, and after each chunk a pause at least as long as it took: the
        # rate is per_s while a chunk takes at most half of interval_s, and the sweep never takes
        # more than half of the time. A tick that finds the worker or the queue busy is skipped.
        next_at = time.monotonic()
        while not self.stopping():
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            next_at += self.interval_s
            if self.stopping() or not self.idle.is_set() or await self._queue_due(conn):
                next_at = max(next_at, time.monotonic())
                continue
            t0 = time.monotonic()
            await self.step(conn)
            now = time.monotonic()
            next_at = max(next_at, now + (REST_POLL_S if self.resting else now - t0))

    async def _queue_due(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        row = await (await conn.execute(query("has_due"), {"queue": DEDUP_QUEUE})).fetchone()
        return bool(row and row[0])

    async def step(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Take the next chunk of the cursor and process it (whether or not the queue is idle), then
        report it processed (named query ``sweep_chunk_done``, which also counts the pass when the
        chunk ended one).

        Args:
            conn: an autocommit connection set up by :func:`~daemon.db.pool.configure_session`.
        Returns:
            The records of the chunk processed without error (0 for a chunk with none: the end of a
            pass that the previous chunk filled exactly, an empty table, no cursor row, or a resting
            sweep, see :attr:`resting`). A record that failed marks the table changed, so the next
            pass takes it again and the sweep does not rest before it succeeds.
        Raises:
            psycopg.Error (a transient one: the loop's ``TRANSIENT_ERRORS``, or a broken connection)
            or TransientIndexError: the database or the index failed; the cursor has moved past the
            chunk, which stays unreported, so this pass does not let the sweep rest and the next
            one takes the chunk again.
        """
        row = await (await conn.execute(query("sweep_next"), {"table": self.table, "limit": self.chunk,
                                                              "lease_s": CHUNK_LEASE_S})).fetchone()
        if row is None:  # no cursor row (the table's row was deleted meanwhile): make it again
            await conn.execute(query("sweep_start"), {"table": self.table})
            return 0
        ids, last, last_pass_s, resting, pass_no = row
        if resting != self.resting:
            log.info("sweep resting: nothing changed since the last pass began" if resting
                     else "sweep resumed: the table changed", table=self.table)
            self.resting = resting
        done = 0
        if ids:
            now = dt.datetime.now(dt.timezone.utc)
            t0 = time.perf_counter()
            done = await self._process([Claimed(self.table, rid, "U", REPLAY_SEQ, now, 0) for rid in ids], conn)
            self.swept += done
            if done < len(ids):
                await conn.execute(query("sweep_changed"), {"table": self.table})
            heap.after_batch()  # as the queue loop after a batch (the worker runs with the collector in batch mode)
            log.debug("swept", table=self.table, records=len(ids), ms=round((time.perf_counter() - t0) * 1000, 1))
        if ids or last:  # processed (a transient error raised above leaves the chunk unreported)
            row = await (await conn.execute(query("sweep_chunk_done"), {
                "table": self.table, "pass_no": pass_no, "chunk": bool(ids), "last": bool(last)})).fetchone()
            self.passes = row[0] if row else None
        if last:
            (log.info if (last_pass_s or 0.0) >= QUIET_PASS_S else log.debug)(
                "sweep pass finished", table=self.table, passes=self.passes,
                seconds=round(last_pass_s or 0.0, 1))
        return done

    async def _process(self, batch: Sequence[Claimed], conn: psycopg.AsyncConnection[Any]) -> int:
        """``handler.process`` on ``batch`` through the queue loop's
        :func:`~daemon.capture.loop.process_isolating` (bisecting on a non-transient error): a
        record failing alone is logged and left to the next pass. Returns the records processed
        without error. Raises: a transient error (:data:`_RETRYABLE`), at once."""
        result = await process_isolating(self.handler, conn, batch, log=log, transient=_RETRYABLE,
                                         alone="sweep: record failed alone; left to the next pass")
        return len(result.done)


def sweep_rate(per_s: float, backend: IndexBackend, table: str) -> float:
    """The sweep's rate for a worker on ``backend``, and a warning when the sweep cannot run there.

    Args:
        per_s: ``[dedup] sweep_per_s`` (records per second, 0: off).
        backend: the worker's opened index backend.
        table: the tracked table (``schema.table``), for the log line.
    Returns:
        ``per_s``, or 0.0 on a search backend that keeps the candidate keys in its own documents
        (``index.candidate_store = "search"``): the sweep walks the PostgreSQL lookup rows
        (``nearsync.document_lookup``), which that store does not write (``nearsync dedup
        --requeue`` makes the same pass at once).
    """
    if per_s > 0 and isinstance(backend, KeyedSearchIndex):
        log.warning("sweep off: it needs the candidate keys in PostgreSQL (index.candidate_store = \"postgres\", "
                    "the default); run nearsync dedup --requeue for a pass over the table", table=table)
        return 0.0
    return per_s


@contextlib.asynccontextmanager
async def sweeping(dsn: str, table: str, handler: BatchHandler, per_s: float, idle: asyncio.Event,
                   stopping: Callable[[], bool]) -> AsyncIterator[Sweeper | None]:
    """Run a :class:`Sweeper` in a task for the duration of the block.

    Args:
        dsn, table, handler, per_s, idle, stopping: as :class:`Sweeper` takes them; ``per_s`` 0
            (or below): no sweep.
    Yields:
        The running sweeper, or None when off. On exit the task is cancelled (a chunk in hand rolls
        back: a later pass does it again).
    """
    if per_s <= 0:
        yield None
        return
    sweeper = Sweeper(dsn, table, handler, per_s, idle, stopping)
    task = asyncio.create_task(sweeper.run(), name="nearsync-sweep")
    log.info("sweep on", table=table, records_per_s=per_s, chunk=sweeper.chunk)
    try:
        yield sweeper
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
