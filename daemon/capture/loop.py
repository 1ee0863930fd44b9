"""The queue loop shared by the indexing daemon and the dedup worker.

One dedicated autocommit connection LISTENs and holds the worker's liveness lock; work happens on
a small pool. The tracking table is the source of truth and NOTIFY only a hint: on every
(re)connect the loop LISTENs first and then drains what is pending, and it polls every
``poll_interval_s`` in case a notification was missed.

Modes (same code path, different flush trigger):
* ``realtime``: on wake, claim and process micro-batches of ``batch_size`` until the queue is empty.
* ``batch``: on wake, gather for ``window_s`` seconds, then process everything in bulks of
  ``bulk_size`` rows (10,000 by default, split across the lanes).

Transient errors (database or index down) retry the batch in hand with exponential backoff
(tenacity) and never acknowledge anything meanwhile; per-record errors are the handler's to report
and go the dead-letter way. SIGTERM/SIGINT finish the batch in hand and return.

Per-record isolation: any other exception raised by the handler (a bug, or data it cannot cope with)
does not fail the batch. The loop bisects it (:func:`process_isolating`, which the dedup sweep
uses too): each half is
handled again, a failing half is split again, and only a record that fails *alone* is reported as
failed (retried, then dead-lettered) with its own error; every other record is processed and
acknowledged as usual. Both handlers are idempotent and their results depend on the records only
(the dedup worker's links and flags do not depend on how records are batched), so handling part of
a batch twice changes nothing. One bad record in a batch of n costs about 2·log2(n) extra handler
calls over shrinking halves.

Concurrency: a loop may keep several batches in flight (``concurrency``, one *lane* each). Every
lane has a worker id of its own, registered and kept alive by the one LISTEN connection, so lanes
claim disjoint rows exactly as separate workers would; one lane's waits on the database then overlap
another lane's CPU work. Nothing else changes: acks stay version-checked per lane, and a handler that
must serialise a step (the dedup worker's per-table lock) does so as it would across workers.

Backpressure: in realtime mode the batch size adapts between a floor and a ceiling
(:class:`BatchSizer`): it grows while batches come back full and fast (a deep queue) and halves
when a batch takes longer than the target duration, so memory stays bounded by the ceiling whatever
the backlog and latency stays near the target. ``last_loop_at`` (``/healthz``) is refreshed each
time the loop turns: on wake/poll, after each batch and before each retry.

Crashes and hangs: the stall watchdog (:mod:`daemon.capture.watchdog`) exits the process, with its
stacks, when the event loop stops running, and pings systemd's ``WATCHDOG=1`` while it runs. A
change whose worker stopped with it in hand is counted by the claim that takes it over, handled
alone from the second stop and dead-lettered at the third (:mod:`daemon.capture.poison`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import statistics
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg
import sdnotify
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from daemon import heap
from daemon.backends.base import TransientIndexError
from daemon.config import DaemonSettings
from daemon.logs import get_logger
from daemon.db.pool import IdleCheck, configure_session
from daemon.db.queries import query
from daemon.capture.poison import IsolationGate, poison_error, screen
from daemon.capture.queue import Claimed, Queue, enqueue, hold_worker_lock, register_worker
from daemon.capture.watchdog import StallWatchdog

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError, PoolTimeout, TransientIndexError, ConnectionError, TimeoutError)


@dataclass
class BatchSizer:
    """Adaptive batch size: grow on full fast batches, shrink on slow ones.

    Attributes:
        limit: the current batch size (rows). floor / ceiling: its bounds (rows).
        target_s: the batch duration (s) to hold; a batch slower than this halves ``limit``, a full
            batch faster than ``target_s / 2`` grows it by half.
    """

    limit: int
    floor: int
    ceiling: int
    target_s: float = 1.0

    @classmethod
    def for_settings(cls, settings: DaemonSettings) -> BatchSizer:
        """Start at ``batch_size`` within :meth:`~daemon.config.DaemonSettings.batch_bounds`
        (default floor ``batch_size // 10``, ceiling ``batch_size * 8``), holding ``batch_target_s``."""
        floor, ceiling = settings.batch_bounds()
        return cls(min(max(settings.batch_size, floor), ceiling), floor, ceiling, settings.batch_target_s)

    def update(self, claimed: int, limit: int, duration_s: float) -> int:
        """Adjust after a batch of ``claimed`` rows (claimed with ``limit``) that took ``duration_s``.

        Returns:
            the new limit.
        """
        if duration_s > self.target_s:
            self.limit = max(self.floor, min(self.limit, limit) // 2)
        elif claimed >= limit and duration_s < self.target_s / 2:
            self.limit = min(self.ceiling, max(self.limit, limit + limit // 2, limit + 1))
        return self.limit


class LoopObserver(Protocol):
    """What the loop reports to (see :class:`daemon.http.metrics.LoopMetrics`)."""

    def observe_batch(self, *, claimed: int, done_lags_s: Sequence[float], failed: int, dead: int,
                      counts: dict[str, int], duration_s: float, limit: int) -> None:
        """One acknowledged batch."""

    def observe_retry(self, error: BaseException) -> None:
        """A whole-batch retry after a transient error."""

    def observe_poison(self, dead: int) -> None:
        """``dead`` rows dead-lettered as poison records (:mod:`daemon.capture.poison`)."""


@dataclass
class BatchResult:
    """What a handler did with a claimed batch.

    Attributes:
        done: rows to acknowledge (processed, or harmlessly stale).
        failed: ``(row, error text)`` for per-record failures (retried, then dead-lettered).
        follow_up: rows to put on the next queue (``next_queue``) in the same transaction as the ack.
        counts: named counters for the batch log line (e.g. indexed, deleted, stale).
    """

    done: list[Claimed] = field(default_factory=list)
    failed: list[tuple[Claimed, str]] = field(default_factory=list)
    follow_up: list[Claimed] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def merge(self, other: BatchResult) -> BatchResult:
        """This result and ``other`` (of a disjoint part of the same batch) as one: lists
        concatenated, counts added.

        Returns:
            a new :class:`BatchResult`.
        """
        counts = dict(self.counts)
        for k, v in other.counts.items():
            counts[k] = counts.get(k, 0) + v
        return BatchResult(self.done + other.done, self.failed + other.failed, self.follow_up + other.follow_up,
                           counts)

    def of_table(self, batch: Sequence[Claimed], table: str) -> list[Claimed]:
        """The rows of ``batch`` that belong to ``table``; every other row is recorded as failed
        (retried, then dead-lettered) with an error naming both tables.

        Args:
            batch: the claimed rows. table: the handler's table (``schema.table``).

        Returns:
            The rows of ``table``, in batch order.
        """
        mine = [c for c in batch if c.table == table]
        self.failed += [(c, f"table {c.table} is not the configured source {table}") for c in batch if c.table != table]
        return mine


class BatchHandler(Protocol):
    """Processes one claimed batch; may raise a transient error (the loop retries the batch).

    Any other exception makes the loop handle the batch again in halves to isolate the record(s)
    that fail alone (see the module docstring), so ``process`` must be idempotent and must accept
    any non-empty part of a batch.
    """

    async def process(self, conn: psycopg.AsyncConnection[Any], batch: Sequence[Claimed]) -> BatchResult:
        """Handle ``batch`` (rows of one queue, oldest first) using ``conn`` for reads."""

    # A handler may also define ``close()`` (no arguments, no result): :meth:`QueueLoop.session`
    # calls it when the session ends, to release what the batches used (the indexer's signature
    # workers), and the next batch of a later session acquires it again.


async def process_isolating(handler: BatchHandler, conn: psycopg.AsyncConnection[Any], batch: Sequence[Claimed], *,
                            log: Any, alone: str, transient: tuple[type[BaseException], ...] = TRANSIENT_ERRORS,
                            on_split: Callable[[], None] | None = None) -> BatchResult:
    """``handler.process(conn, batch)``, bisecting the batch when the handler raises (module
    docstring): the queue loop's and the dedup sweep's one way to keep a bad record from failing
    the others of its batch.

    A non-transient exception (one not in ``transient``) makes the two halves of ``batch`` be
    handled apart, recursively; a single record that still fails is logged with its traceback
    (event ``alone``, with ``record_id``, ``table`` and ``error``) and reported in ``failed`` with
    its own error (``"ExceptionType: message"``). The results of the parts are merged
    (:meth:`BatchResult.merge`); ``counts["split"]`` counts the splits.

    Args:
        handler: the batch handler. conn: the autocommit connection it reads with.
        batch: claimed rows (non-empty).
        log: a structlog logger. alone: the event logged for a record that fails alone (what
            becomes of it: retried and dead-lettered, or left to the sweep's next pass).
        transient: the exceptions raised at once instead of bisecting (default
            :data:`TRANSIENT_ERRORS`: the caller retries the whole batch).
        on_split: called before each split (the queue loop's liveness tick).
    Returns:
        the handler's result for the whole batch.
    Raises:
        an exception of ``transient``, at once.
    """
    try:
        return await handler.process(conn, batch)
    except transient:
        raise
    except Exception as e:  # noqa: BLE001 - a bug or bad data must not fail the batch's other records
        error = f"{type(e).__name__}: {e}"
        if len(batch) == 1:
            c = batch[0]
            log.exception(alone, record_id=c.record_id, table=c.table, error=error)
            return BatchResult(failed=[(c, error)])
        log.warning("batch handler failed; handling the batch in halves to isolate the failing record(s)",
                    rows=len(batch), error=error[:300])
    if on_split is not None:
        on_split()
    mid = len(batch) // 2
    kw: dict[str, Any] = {"log": log, "alone": alone, "transient": transient, "on_split": on_split}
    result = (await process_isolating(handler, conn, batch[:mid], **kw)).merge(
        await process_isolating(handler, conn, batch[mid:], **kw))
    result.counts["split"] = result.counts.get("split", 0) + 1
    return result


class QueueLoop:
    """Runs a :class:`BatchHandler` over one queue until stopped.

    Args:
        dsn: database DSN (never logged).
        queue_name: ``index`` or ``dedup``.
        handler: the batch handler.
        settings: ``[daemon]`` settings (mode, window, sizes, retries).
        next_queue: queue that acknowledged ``follow_up`` rows are put on, if any.
        bulk_size: rows in flight in batch mode, split across the lanes: each lane claims
            ``bulk_size // concurrency`` rows at a time (at least ``batch_size``), so one large
            transaction is worked on by every lane at once and memory stays bounded the same.
        name: logger name.
        concurrency: batches in flight at once (lanes; see the module docstring), 1 or more.
    """

    def __init__(self, dsn: str, queue_name: str, handler: BatchHandler, settings: DaemonSettings, *,
                 next_queue: str | None = None, bulk_size: int = 10_000, name: str = "nearsync.loop",
                 concurrency: int = 1) -> None:
        self.dsn = dsn
        self.queue_name = queue_name
        self.handler = handler
        self.settings = settings
        self.next_queue = next_queue
        self.log = get_logger(name)
        self.concurrency = max(1, concurrency)
        self.bulk_size = max(bulk_size // self.concurrency, settings.batch_size)
        self.lanes: list[Queue] = []
        """One :class:`Queue` client (worker id) per lane; empty until the LISTEN connection is up."""
        self.wake = asyncio.Event()
        self.stopping = False
        self.ready = asyncio.Event()
        self.idle = asyncio.Event()
        """Set while the loop waits for a change with no window open and no drain running (cleared
        when a wake or a poll finding rows due opens a window or a drain): the moment from which the
        next change seen opens a fresh batch window."""
        self.totals: dict[str, int] = {"batches": 0, "claimed": 0, "acked": 0, "failed": 0, "dead": 0}
        self.last_loop_at = time.monotonic()
        self.sizer = BatchSizer.for_settings(settings)
        self.observer: LoopObserver | None = None
        self._lanes_busy = 0
        """Lanes inside a claim → process → ack cycle right now."""
        self._claims_found = 0
        """Claims that returned rows, ever; a lane that found nothing retries when this moves."""
        self._lane_news = asyncio.Event()
        """Set (and replaced) when a lane claims rows or ends a cycle; see :meth:`_drain_lane`."""
        idle_check = IdleCheck()
        self._pool = AsyncConnectionPool(dsn, min_size=1, max_size=self.concurrency + 1, open=False, timeout=10,
                                         kwargs={"autocommit": True}, check=idle_check.check, reset=idle_check.reset,
                                         configure=configure_session)
        self._notifier = sdnotify.SystemdNotifier()
        self._gate = IsolationGate()
        """Lanes hold rows together, or one lane holds one suspect alone (:mod:`daemon.capture.poison`)."""

    # -- lifecycle -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to finish the batch in hand and return."""
        self.stopping = True
        self.wake.set()
        self._pulse_lanes()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT call :meth:`stop`."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[QueueLoop]:
        """Open the pool and the LISTEN/liveness connection without running the main loop.

        For one-shot jobs (reindex) that call :meth:`drain` themselves. Releases claims on exit,
        then calls the handler's ``close()`` when it has one (see :class:`BatchHandler`).
        """
        await self._pool.open(wait=False)
        listener = asyncio.create_task(self._listen(), name="nearsync-listen")
        try:
            await self.ready.wait()
            async with StallWatchdog(self.settings.stall_timeout_s, self._notifier).running():
                yield self
        finally:
            self.stopping = True
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await listener
            with contextlib.suppress(Exception):
                if self.lanes:
                    async with self._pool.connection() as conn:
                        for lane in self.lanes:
                            await lane.release(conn)
            await self._pool.close()
            close = getattr(self.handler, "close", None)  # BatchHandler's optional hook
            if close is not None:
                close()

    async def run(self) -> None:
        """Listen, drain, and process until :meth:`stop`; releases claims on the way out."""
        async with self.session():
            while not self.stopping:
                woken = True
                self.idle.set()
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout=self.settings.poll_interval_s)
                except TimeoutError:
                    woken = False
                self.wake.clear()
                self.tick()
                if self.stopping:
                    break
                if self.settings.mode == "batch":
                    if not woken and not await self._has_due():
                        continue
                    self.idle.clear()
                    await self._sleep(self.settings.window_s)  # the window opens at the first change seen
                self.idle.clear()
                await self.drain(stop_when_stopping=True)
        self.idle.clear()
        self._notifier.notify("STOPPING=1")
        self.log.info("stopped", **self.totals)

    def tick(self) -> None:
        """The loop turned: refresh ``last_loop_at`` and ping the systemd watchdog (which the stall
        watchdog's beat also pings while the event loop runs)."""
        self.last_loop_at = time.monotonic()
        self._notifier.notify("WATCHDOG=1")

    def _before_retry(self, rs: Any) -> None:
        error = rs.outcome.exception() if rs.outcome else None
        self.tick()
        if error is not None and self.observer is not None:
            self.observer.observe_retry(error)
        self.log.warning("transient error, retrying", attempt=rs.attempt_number,
                         error=f"{type(error).__name__}: {error}" if error is not None else None)

    async def _has_due(self) -> bool:
        """Whether anything is due on our queue (errors count as yes: the drain will retry)."""
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("has_due"), {"queue": self.queue_name})
                row = await cur.fetchone()
                return bool(row and row[0])
        except Exception:  # noqa: BLE001
            return True

    async def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.stopping and (left := end - time.monotonic()) > 0:
            await asyncio.sleep(min(left, 0.2))

    async def _listen(self) -> None:
        """Own connection: register/lock the worker id, LISTEN, wake the loop on each notification."""
        delay = self.settings.retry_backoff_s
        while not self.stopping:
            try:
                async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                    await self._hold_lanes(conn)
                    channel = self.lanes[0].channel
                    await conn.execute(query("listen").format(channel=sql.Identifier(channel)))
                    self.log.info("listening", channel=channel, worker=self.lanes[0].worker_id,
                                  lanes=[q.worker_id for q in self.lanes], mode=self.settings.mode)
                    delay = self.settings.retry_backoff_s
                    if not self.ready.is_set():
                        self._notifier.notify("READY=1")
                    self.ready.set()
                    self.wake.set()  # drain whatever is pending after (re)connecting
                    while not self.stopping:
                        async for _ in conn.notifies(timeout=self.settings.poll_interval_s):
                            self.wake.set()
                        await conn.execute(query("ping"))  # liveness of the LISTEN connection
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - reconnect on anything
                self.log.warning("listen connection lost", error=f"{type(e).__name__}: {e}", retry_in_s=round(delay, 2))
                await self._sleep(delay)
                delay = min(delay * 2, 10.0)

    async def _hold_lanes(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Register a worker id per lane (first time) and take each lane's liveness lock on ``conn``;
        a lane whose id is taken (our old session still holds it) gets a new id."""
        def client(wid: int) -> Queue:
            return Queue(self.queue_name, wid, self.settings.max_attempts, self.settings.retry_backoff_s)

        if not self.lanes:
            self.lanes = [client(await register_worker(conn)) for _ in range(self.concurrency)]
        for i, lane in enumerate(self.lanes):
            if not await hold_worker_lock(conn, lane.worker_id):
                self.lanes[i] = client(await register_worker(conn))
                await hold_worker_lock(conn, self.lanes[i].worker_id)

    # -- work --------------------------------------------------------------------------------------

    async def drain(self, *, stop_when_stopping: bool = False) -> int:
        """Process batches until the queue has nothing due; returns rows claimed.

        With ``concurrency`` > 1 every lane drains at once (each claims its own batches); returns
        when all of them found nothing due. An error other than a transient one (which is retried)
        cancels the other lanes and propagates.
        """
        if self.concurrency == 1:
            return await self._drain_lane(0, stop_when_stopping)
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(self._drain_lane(i, stop_when_stopping), name=f"nearsync-lane-{i}")
                     for i in range(self.concurrency)]
        return sum(t.result() for t in tasks)

    async def _drain_lane(self, lane: int, stop_when_stopping: bool) -> int:
        """Drain on one lane; returns rows claimed.

        A lane whose claim found nothing does not give up while another lane is mid-cycle: that
        lane's relay may hold the change-log rows (``SKIP LOCKED`` hid them) or have just moved them.
        It waits until some lane claims rows (then claims again) or no lane is busy (then returns).
        Waiting on claims rather than on cycles keeps two empty lanes from waking each other forever.
        """
        total = 0
        while not (stop_when_stopping and self.stopping):
            limit = self.sizer.limit if self.settings.mode == "realtime" else self.bulk_size
            found_before = self._claims_found
            self._lanes_busy += 1
            try:
                n = await self.run_batch_with_retry(limit, lane=lane)
            finally:
                self._lanes_busy -= 1
                self._pulse_lanes()
            total += n
            if n:
                self.tick()
                continue
            while self._lanes_busy and self._claims_found == found_before and not self.stopping:
                await self._lane_news.wait()
            if self._claims_found == found_before:
                break
        return total

    def _pulse_lanes(self) -> None:
        """Wake every lane waiting in :meth:`_drain_lane`."""
        news, self._lane_news = self._lane_news, asyncio.Event()
        news.set()

    async def run_batch_with_retry(self, limit: int, *, lane: int = 0) -> int:
        """One claim → process → ack cycle, retried with exponential backoff on transient errors.

        Each retry halves the batch size (not below ``limit // 8`` nor the sizer's floor), so a batch
        too large for a slow or overloaded index (request timeouts) gets through instead of being
        retried as is forever; in realtime mode the sizer keeps the smaller size and grows it back
        on fast batches.
        """
        floor = max(1, min(limit, max(self.sizer.floor, limit // 8)))
        size = limit
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(TRANSIENT_ERRORS),
            wait=wait_exponential(multiplier=self.settings.retry_backoff_s, max=30),
            stop=lambda _state: self.stopping,
            reraise=True,
            before_sleep=self._before_retry,
        ):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    size = max(floor, size // 2)
                    if self.settings.mode == "realtime":
                        self.sizer.limit = min(self.sizer.limit, size)
                return await self.run_batch(size, lane=lane)
        return 0  # pragma: no cover - AsyncRetrying always returns or raises

    async def process_isolating(self, conn: psycopg.AsyncConnection[Any], batch: Sequence[Claimed]) -> BatchResult:
        """:func:`process_isolating` with this loop's handler and logger: a record that fails
        alone is retried, then dead-lettered (its ``failed`` entry); each split refreshes
        ``last_loop_at``.

        Args:
            conn: the lane's autocommit connection. batch: claimed rows (non-empty).
        Returns:
            the handler's result for the whole batch.
        Raises:
            a transient error from the handler, at once (the loop retries the whole batch).
        """
        return await process_isolating(self.handler, conn, batch, log=self.log, on_split=self.tick,
                                       alone="record failed alone; it is retried, then dead-lettered")

    async def run_batch(self, limit: int, *, lane: int = 0) -> int:
        """One claim → process → ack cycle on lane ``lane`` (0 ≤ lane < ``concurrency``); returns
        the number of rows claimed (0: nothing due).

        Claimed rows are screened first (:func:`~daemon.capture.poison.screen`): poison records are
        dead-lettered, a suspect is handled alone (:meth:`IsolationGate.alone`), the rest as a batch.
        """
        while not self.lanes:
            if self.stopping:
                return 0
            await asyncio.sleep(0.05)
        queue = self.lanes[lane]
        t0 = time.perf_counter()
        async with self._pool.connection() as conn, self._gate.shared():
            batch = await queue.claim(conn, limit)
            if not batch:
                return 0
            self._claims_found += 1
            self._pulse_lanes()
            s = screen(batch, self.settings.max_takeovers, isolating_elsewhere=self._gate.isolating)
            if s.suspect is not None:
                suspect = s.suspect

                async def give_back() -> None:
                    await queue.release_rows(conn, [suspect, *s.release])
                    await self._bury(conn, queue, s.poison)

                async with self._gate.alone(give_back):
                    row = await queue.claim_row(conn, suspect)
                    if row is not None:
                        self.log.warning("handling a suspect record alone: its worker stopped with it in hand",
                                         record_id=row.record_id, table=row.table, takeovers=row.takeovers)
                        await self._handle(conn, queue, lane, [row], t0, limit)
                return len(batch)
            if s.release:
                await queue.release_rows(conn, s.release)
            await self._bury(conn, queue, s.poison)
            if s.handle:
                await self._handle(conn, queue, lane, s.handle, t0, limit)
        heap.after_batch()  # what the batch left alive (cached documents) out of later collections
        return len(batch)

    async def _bury(self, conn: psycopg.AsyncConnection[Any], queue: Queue, poison: Sequence[Claimed]) -> None:
        """Dead-letter poison records now (see :mod:`daemon.capture.poison`)."""
        if not poison:
            return
        async with conn.transaction():
            dead = await queue.fail(conn, [(c, poison_error(c.takeovers)) for c in poison], at_once=True)
        self.totals["dead"] += len(dead)
        if self.observer is not None:
            self.observer.observe_poison(len(dead))
        for c in poison:
            self.log.error("poison record dead-lettered: its worker stopped with it in hand, the last time alone",
                           record_id=c.record_id, table=c.table, takeovers=c.takeovers)

    async def _handle(self, conn: psycopg.AsyncConnection[Any], queue: Queue, lane: int, batch: Sequence[Claimed],
                      t0: float, limit: int) -> None:
        """Process claimed rows, acknowledge them and report failures; then the batch's figures."""
        t_claim = time.perf_counter()
        result = await self.process_isolating(conn, batch)
        t_proc = time.perf_counter()
        async with conn.transaction():
            await queue.ack(conn, result.done)
            if self.next_queue and result.follow_up:
                await enqueue(conn, self.next_queue, result.follow_up)
            dead = await queue.fail(conn, result.failed) if result.failed else []
        now = time.time()
        duration_s = time.perf_counter() - t0
        lags_s = [max(0.0, now - c.changed_at.timestamp()) for c in result.done]
        lags = [x * 1000 for x in lags_s]
        if self.settings.mode == "realtime":
            self.sizer.update(len(batch), limit, duration_s)
        if self.observer is not None:
            self.observer.observe_batch(claimed=len(batch), done_lags_s=lags_s, failed=len(result.failed),
                                        dead=len(dead), counts=result.counts, duration_s=duration_s,
                                        limit=self.sizer.limit if self.settings.mode == "realtime" else limit)
        self.totals["batches"] += 1
        self.totals["claimed"] += len(batch)
        self.totals["acked"] += len(result.done)
        self.totals["failed"] += len(result.failed)
        self.totals["dead"] += len(dead)
        for k, v in result.counts.items():
            self.totals[k] = self.totals.get(k, 0) + v
        self.log.info(
            "batch", queue=queue.name, lane=lane, claimed=len(batch), acked=len(result.done), failed=len(result.failed),
            dead_lettered=len(dead), **result.counts,
            claim_ms=round((t_claim - t0) * 1000, 1), process_ms=round((t_proc - t_claim) * 1000, 1),
            total_ms=round(duration_s * 1000, 1), next_limit=self.sizer.limit,
            lag_p50_ms=round(statistics.median(lags), 1) if lags else None,
            lag_max_ms=round(max(lags), 1) if lags else None)
        if result.failed:
            for c, err in result.failed[:5]:
                self.log.warning("record failed", record_id=c.record_id, table=c.table, error=err[:500])
