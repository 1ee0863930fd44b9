"""The dedup worker's sweep: while its queue is idle, the worker processes the table's live records
again, a few per second, one pass over the table after another.

Why: flags are a function of the data, except for two rules that see the table as it was when a
record was processed (docs/architecture.md, "Dedup worker"): the candidate cap (a record is compared
with its best ``candidate_cap`` candidates of that moment) and ``exhaustive_below`` (a scope that
has grown past it is no longer compared whole). A pass over the settled table gives exactly the
links, clusters and flags of a clean pass (``bench/bench_history.py``); ``nearsync dedup --requeue``
makes one at once, and the sweep makes it without an operator, at ``[dedup] sweep_per_s`` records
per second (:data:`daemon.dedup.settings.SWEEP_PER_S`; 0: off).

How: each ``nearsync dedup`` worker runs one :class:`Sweeper` beside its queue loop. Every
``chunk / sweep_per_s`` seconds (and never more than half of the time: a chunk that took longer is
followed by a pause as long), when the loop is idle (waiting for a change, no batch in hand), it
takes the next ``chunk`` record ids of the table's sweep cursor (named query ``sweep_next``,
``nearsync.dedup_sweeps``, migration 0023: under the cursor row's lock, so workers share one pass
and never sweep the same records) and hands them to the loop's handler as one batch, on a connection
of its own. Nothing goes through the queue: no tracking rows, no acknowledgements, no lag. A record
swept while a change of it is processed is handled as two workers handle it (the per-table dedup
lock and the revalidation under it). A chunk that fails is logged and left to the next pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import math
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg

from daemon.backends.base import IndexBackend, KeyedSearchIndex, TransientIndexError
from daemon.capture.loop import BatchHandler
from daemon.capture.queue import Claimed
from daemon.db.pool import configure_session
from daemon.db.queries import query
from daemon.logs import get_logger

log = get_logger("nearsync.sweep")

MAX_CHUNK = 100
"""The most records one sweep batch holds (at high ``sweep_per_s`` the chunks come more often)."""

RETRY_S = 5.0
"""Seconds before the sweep tries again after the database or the index failed."""


def chunk_size(per_s: float) -> int:
    """Records per sweep batch for ``per_s`` records per second: about one second's worth, at least
    1 and at most :data:`MAX_CHUNK`.

    Args:
        per_s: ``[dedup] sweep_per_s`` (> 0).
    Returns:
        ``ceil(per_s)`` clamped to 1..:data:`MAX_CHUNK`.
    """
    return max(1, min(MAX_CHUNK, math.ceil(per_s)))


class Sweeper:
    """Processes the table's live records again while the worker's queue is idle (module docstring).

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
        """Records processed by the sweep since start."""

    async def run(self) -> None:
        """Sweep until :attr:`stopping` (cancel the task to stop at once: a chunk in hand rolls back).
        Transient failures (database or index down) are logged and retried after :data:`RETRY_S`
        on a new connection; a failure of one chunk is logged with its first and last ids and the
        sweep goes on; any other error is logged and retried the same way, so the sweep never
        ends while the worker runs."""
        while not self.stopping():
            try:
                async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                    await configure_session(conn)
                    await conn.execute(query("sweep_start"), {"table": self.table})
                    await self._sweep(conn)
            except (psycopg.OperationalError, psycopg.InterfaceError, TransientIndexError) as e:
                log.warning("sweep paused: database or index unavailable", table=self.table, error=str(e),
                            retry_s=RETRY_S)
                await asyncio.sleep(RETRY_S)
            except Exception as e:  # noqa: BLE001 — the sweep is best effort: it must not end unseen
                log.error("sweep failed; retrying", table=self.table, error=f"{type(e).__name__}: {e}",
                          retry_s=RETRY_S)
                await asyncio.sleep(RETRY_S)

    async def _sweep(self, conn: psycopg.AsyncConnection[Any]) -> None:
        # A chunk every interval_s, the time a chunk takes included, so the rate is per_s while a
        # chunk takes less than interval_s; after a chunk that took longer, a pause as long as it
        # took, so the sweep uses at most half of the worker's idle time. A tick that finds the loop
        # busy is skipped, not made up.
        next_at = time.monotonic()
        spent = 0.0
        while not self.stopping():
            now = time.monotonic()
            next_at = max(next_at + self.interval_s, now + spent)
            await asyncio.sleep(next_at - now)
            if self.stopping() or not self.idle.is_set():
                spent = 0.0
                continue
            t0 = time.monotonic()
            await self.step(conn)
            took = time.monotonic() - t0
            spent = took if took > self.interval_s else 0.0

    async def step(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Take the next chunk of the cursor and process it (whether or not the loop is idle).

        Returns:
            The records processed (0 at the end of a pass, or for an empty table).
        Raises:
            psycopg.OperationalError, TransientIndexError: the database or the index failed (the
            chunk is skipped in this pass; the cursor has moved past it).
        """
        row = await (await conn.execute(query("sweep_next"), {"table": self.table, "limit": self.chunk})).fetchone()
        if row is None:  # no cursor row (the table's row was deleted meanwhile): make it again
            await conn.execute(query("sweep_start"), {"table": self.table})
            return 0
        ids, done, passes, last_pass_s = row
        if ids:
            now = dt.datetime.now(dt.timezone.utc)
            batch = [Claimed(self.table, rid, "U", 0, now, 0) for rid in ids]
            t0 = time.perf_counter()
            try:
                await self.handler.process(conn, batch)
            except (psycopg.OperationalError, psycopg.InterfaceError, TransientIndexError):
                raise
            except Exception as e:  # noqa: BLE001 — one bad chunk must not stop the sweep or the worker
                log.error("sweep chunk failed; left to the next pass", table=self.table, first=ids[0], last=ids[-1],
                          records=len(ids), error=f"{type(e).__name__}: {e}")
                return 0
            self.swept += len(ids)
            log.debug("swept", table=self.table, records=len(ids), ms=round((time.perf_counter() - t0) * 1000, 1))
        if done:
            log.info("sweep pass finished", table=self.table, passes=passes, seconds=round(last_pass_s or 0.0, 1))
        return len(ids)


def sweep_rate(per_s: float, backend: IndexBackend, table: str) -> float:
    """The sweep's rate for a worker on ``backend``: ``per_s`` (``[dedup] sweep_per_s``), or 0 on a
    search backend that keeps the candidate keys in its own documents (``index.candidate_store =
    "search"``): the sweep walks the PostgreSQL lookup rows (``nearsync.document_lookup``), which
    that store does not write. Logs why the sweep is off there (``nearsync dedup --requeue`` makes the
    same pass at once)."""
    if per_s > 0 and isinstance(backend, KeyedSearchIndex):
        log.warning("sweep off: it needs the candidate keys in PostgreSQL (index.candidate_store = \"postgres\", "
                    "the default); run nearsync dedup --requeue for a pass over the table", table=table)
        return 0.0
    return per_s


@contextlib.asynccontextmanager
async def sweeping(dsn: str, table: str, handler: BatchHandler, per_s: float, idle: asyncio.Event,
                   stopping: Callable[[], bool]) -> AsyncIterator[Sweeper | None]:
    """Run a :class:`Sweeper` in a task for the duration of the block (none when ``per_s`` is 0);
    the task is cancelled when the block ends (a chunk in hand rolls back: it is done again by a
    later pass). Yields the sweeper, or None when off."""
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
