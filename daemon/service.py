"""Wiring: settings → source table, document builder, backend and queue loop for each process.

The CLI and the tests build processes here, so both run exactly the same code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_exponential

from daemon.backends.base import (IndexBackend, KeyedSearchIndex, TransientIndexError, TwoStoreIndex,
                                  preferred_write_rows)
from daemon.backends.factory import create_backend
from daemon.config import Settings
from daemon.errors import ConfigError
from daemon.dedup.settings import dedup_options
from daemon.capture.documents import DocumentBuilder, SignaturePool, require_signatures
from daemon.capture.indexer import IndexHandler
from daemon.logs import get_logger
from daemon.capture.loop import QueueLoop
from daemon.db.queries import query
from daemon.capture.source import SourceTable, inspect_source
from daemon.capture.queue import DEDUP_QUEUE, INDEX_QUEUE
from daemon.signatures import SignatureParams

T = TypeVar("T")
_log = get_logger("nearsync.service")


def validate_settings(settings: Settings) -> Settings:
    """Validate the sections read only by the processes that use them (``[dedup]`` and
    ``[signatures]``), so that every command fails fast on a bad value, not only the daemons.

    Returns:
        ``settings`` unchanged.
    Raises:
        ConfigError: naming the first invalid key (e.g. ``dedup.duplicate_threshold``).
    """
    dedup_options(settings)
    SignatureParams.from_mapping(settings.signatures)
    return settings


def dedup_enabled(settings: Settings) -> bool:
    """Whether indexed records are queued for the dedup worker (``dedup.enabled``, default false)."""
    return dedup_options(settings).enabled


async def open_source(settings: Settings) -> SourceTable:
    """Connect once and validate the source table and migrations.

    Raises:
        psycopg.OperationalError: bad DSN / server down. SchemaError: missing table or migration.
    """
    async with await psycopg.AsyncConnection.connect(settings.require_dsn(), connect_timeout=10) as conn:
        return await inspect_source(conn, settings.source)


def unavailable(e: BaseException) -> bool:
    """Whether ``e`` says a server is unreachable or restarting (worth waiting for), as opposed to a
    configuration error: an index that cannot be reached (:class:`TransientIndexError`), or a
    PostgreSQL connection error without a server answer (refused, reset, timed out) or with class 57P
    (shutting down, starting up). Wrong credentials or a missing database are not."""
    if isinstance(e, TransientIndexError):
        return True
    if isinstance(e, psycopg.OperationalError):
        state = getattr(e, "sqlstate", None)
        return state is None or state.startswith("57P")
    return False


async def when_available(what: str, make: Callable[[], Awaitable[T]], *, max_wait_s: float = 10.0) -> T:
    """``await make()``, retried with exponential backoff (0.2 s doubling up to ``max_wait_s``) for
    as long as it fails with an :func:`unavailable` error, logging each wait; any other error is
    raised at once. For daemons starting while the database or the index is down (after a crash
    or a restart), which then start instead of exiting; stop them with SIGTERM.

    Args:
        what: what is awaited, for the log (``"index"``, ``"database"``).
        make: the coroutine factory.
    Returns:
        What ``make()`` returned (retries by tenacity's ``AsyncRetrying``).
    """

    def log_wait(state: RetryCallState) -> None:
        e = state.outcome.exception() if state.outcome else None
        _log.warning("unavailable at start, waiting", what=what, error=f"{type(e).__name__}: {e}"[:300],
                     retry_in_s=round(state.next_action.sleep, 1) if state.next_action else None)

    async for attempt in AsyncRetrying(retry=retry_if_exception(unavailable), reraise=True, before_sleep=log_wait,
                                       wait=wait_exponential(multiplier=0.2, max=max_wait_s)):
        with attempt:
            return await make()
    raise AssertionError("unreachable: AsyncRetrying returns or raises")  # pragma: no cover


@asynccontextmanager
async def opened_backend(settings: Settings, *, wait: bool = False) -> AsyncIterator[IndexBackend]:
    """The configured backend, opened, closed on exit.

    Args:
        wait: keep retrying ``open`` while the index is unreachable (daemons; see
            :func:`when_available`) instead of raising TransientIndexError at once.
    """
    backend = create_backend(settings)
    if wait:
        await when_available("index", backend.open)
    else:
        await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


@dataclass
class Indexer:
    """An indexing daemon ready to run: ``await indexer.loop.run()``."""

    loop: QueueLoop
    backend: IndexBackend
    table: SourceTable
    signer: SignaturePool | None = None
    """The handler's signature worker pool (call ``start()`` to start its processes ahead of work)."""


async def build_indexer(settings: Settings, backend: IndexBackend) -> Indexer:
    """Validate everything (fail fast) and build the indexing loop over an opened backend.

    Unless ``[daemon] batch_floor`` is set, a backlog is claimed in batches of at least the index
    backend's preferred write size (:meth:`~daemon.config.DaemonSettings.for_write_rows`) and, with
    a signature pool, at least the pool's ``min_parallel`` rows: a batch halved below it (one over
    ``batch_target_s``, e.g. the first batch of a reindex while the workers start) would be signed
    inline, on the daemon's one core, with the workers idle (a 20,000-ad reindex signed its second
    batch, 250 rows, that way). Fewer waiting rows are still claimed at once.

    Raises:
        ConfigError, SchemaError, psycopg.OperationalError.
    """
    if dedup_enabled(settings):
        require_signatures(settings, "the dedup queue (dedup.enabled = true)")
    table = await open_source(settings)
    builder = DocumentBuilder.from_settings(settings, table)
    builder.warm()  # the signature code's first-call costs (~130 ms) before ready, not on the first insert
    builder = replace(builder, encoder=backend.document_encoder)  # run with the signatures
    write_rows = preferred_write_rows(backend) if builder.signed else None
    handler = IndexHandler(table, builder, backend, settings.daemon.chunk_rows_for(signed=builder.signed,
                                                                                   preferred=write_rows))
    pool_rows = handler.signer.min_parallel if handler.signer.workers >= 2 else 0
    loop = QueueLoop(settings.require_dsn(), INDEX_QUEUE, handler,
                     settings.daemon.for_write_rows(max(write_rows or 0, pool_rows) or None),
                     next_queue=DEDUP_QUEUE if dedup_enabled(settings) else None, name="nearsync.indexer",
                     concurrency=settings.daemon.concurrency_for(INDEX_QUEUE))
    return Indexer(loop, backend, table, handler.signer)


async def status(settings: Settings) -> dict[str, Any]:
    """Pending count and oldest pending age (lag, s) per queue, dead letters per queue, indexed count,
    and ``pg_notification_queue_usage()`` (fraction 0-1 of the NOTIFY queue in use); with
    ``index.candidate_store = "postgres"`` also ``candidate_store``: ``{"postgres": documents}``
    (the signed documents in PostgreSQL, beside ``indexed`` in the search index); once a dedup
    worker with the sweep on has started (:mod:`daemon.dedup.sweep`) also ``sweep``: ``{"passes",
    "after_id" (the last record id handed out, "" at a pass's start), "pass_started_at" (ISO 8601),
    "last_pass_s" (the last pass's duration, s, or None), "resting" (True: the last pass saw no
    change and nothing changed since, so the sweep waits for a change), "records" (the live records
    a pass walks), "position" (those up to the cursor), "eta_s" (s left in the current pass at its
    rate so far, or None at a pass's start or while resting)}``; ``passes`` counts the passes whose
    last chunk has been processed.

    Raises:
        ConfigError, psycopg.OperationalError, SchemaError.
    """
    validate_settings(settings)
    table = await open_source(settings)
    async with await psycopg.AsyncConnection.connect(settings.require_dsn(), autocommit=True) as conn:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query("queue_status"))
            queues = {r["queue"]: {k: r[k] for k in ("pending", "oldest_age_s", "claimed", "retrying")}
                      for r in await cur.fetchall()}
            await cur.execute(query("dead_letter_count"))
            dead = {r["queue"]: r["n"] for r in await cur.fetchall()}
            await cur.execute(table.formatted("count_rows"))
            rows = (await cur.fetchone() or {}).get("n", 0)
            await cur.execute(query("notification_queue_usage"))
            usage = float(next(iter((await cur.fetchone() or {0: 0.0}).values())))
            await cur.execute(query("sweep_status"), {"table": table.name})
            sweep = await cur.fetchone()
    for q in (INDEX_QUEUE, DEDUP_QUEUE):
        queues.setdefault(q, {"pending": 0, "oldest_age_s": 0.0, "claimed": 0, "retrying": 0})
        queues[q]["dead_letters"] = dead.get(q, 0)
    extra: dict[str, Any] = {}
    async with opened_backend(settings) as backend:
        indexed = await backend.count(table.name)
        if isinstance(backend, TwoStoreIndex):
            extra["candidate_store"] = {"postgres": (await backend.store_counts(table.name))[1]}
    if sweep is not None:
        position, records, age_s = sweep["position"], sweep["records"], sweep["pass_age_s"]
        extra["sweep"] = {"passes": sweep["passes"], "after_id": sweep["after_id"],
                          "pass_started_at": sweep["pass_started_at"].isoformat(), "last_pass_s": sweep["last_pass_s"],
                          "resting": sweep["resting"], "records": records, "position": position,
                          "eta_s": (round(max(0, records - position) * age_s / position, 1)
                                    if position > 0 and age_s > 0 and not sweep["resting"] else None)}
    return {"table": table.name, "rows": rows, "indexed": indexed, "backend": settings.index.backend,
            "notification_queue_usage": usage, "queues": queues, **extra}


CANDIDATE_STORE_SHARE = 0.9
"""Least share of the search index's documents PostgreSQL's candidate store must hold for the dedup
worker and the check API to start (:func:`require_candidate_store`). The two stores are written by
the same write, so in service they differ only by the batches in flight and the rare record the
search server alone refused; far fewer means the store was never filled (the index was built with
``candidate_store = "search"``, and an indexer already running with ``"postgres"`` has added only
the changes since) or a reindex is still filling it."""


async def require_candidate_store(backend: IndexBackend, table: str) -> None:
    """Fail fast when the candidates would be read from a store that lacks most of them (at least
    :data:`CANDIDATE_STORE_SHARE` of the documents of ``table`` must be there; an empty index passes):

    * a backend writing two stores (``index.candidate_store = "postgres"``,
      :class:`~daemon.backends.base.TwoStoreIndex`) whose PostgreSQL store holds fewer than that
      share of the search index's documents (an index built with ``"search"``, or a reindex not
      finished);
    * a search backend keeping the keys in its documents (``"search"``,
      :class:`~daemon.backends.base.KeyedSearchIndex`) whose documents mostly have no keys (an
      index written with ``"postgres"`` and switched back without a reindex: the dedup worker would
      find no candidate and flag nothing).

    Other backends (the PostgreSQL one): nothing to check. Call only where signatures are on (the
    dedup worker, the check API): a plain sync writes no keys.

    Raises:
        ConfigError: at ``index.candidate_store``, saying to run ``nearsync reindex``.
        TransientIndexError: a store unreachable.
    """
    if isinstance(backend, TwoStoreIndex):
        searched, keyed = await backend.store_counts(table)
        if keyed < CANDIDATE_STORE_SHARE * searched:
            raise ConfigError("index.candidate_store", f'is "postgres", but PostgreSQL holds the candidate keys of '
                              f"{keyed:,} documents of {table} against {searched:,} in the search index (an index built "
                              'with "search", or a reindex not finished): run `nearsync reindex` to the end, or set it '
                              'back to "search"')
    elif isinstance(backend, KeyedSearchIndex):
        searched, keyed = await backend.count(table), await backend.keyed_count(table)
        if keyed < CANDIDATE_STORE_SHARE * searched:
            raise ConfigError("index.candidate_store", f'is "search", but only {keyed:,} of the {searched:,} documents of '
                              f"{table} in the search index hold candidate keys (an index written with \"postgres\", "
                              'or a reindex not finished): run `nearsync reindex` to the end, or set it back to '
                              '"postgres"')


async def build_worker(settings: Settings, backend: IndexBackend) -> QueueLoop:
    """Validate everything (fail fast) and build the dedup worker loop over an opened backend.

    A backlog is worked in batches of ``[daemon] batch_size`` however long each takes (the batch
    floor is raised to it unless ``batch_floor`` is set, as :meth:`DaemonSettings.for_write_rows`
    does for the indexer): every batch re-reads and re-clusters the components around its records
    (up to ``dedup.max_component`` records each on a near-duplicate-dense catalogue, whatever the
    batch's size), so a batch halved for being over ``batch_target_s`` pays that cost again for half
    the records. Flags do not depend on the batch size. A record arriving behind a backlog waits
    for one such batch.

    Raises:
        ConfigError (also :func:`require_candidate_store`), SchemaError, psycopg.OperationalError.
    """
    from daemon.dedup.worker import DedupHandler

    require_signatures(settings, "the dedup worker")
    table = await open_source(settings)
    options = dedup_options(settings)
    DocumentBuilder.from_settings(settings, table)  # same validation as the indexer
    await require_candidate_store(backend, table.name)
    handler = DedupHandler(table.name, backend, options)
    return QueueLoop(settings.require_dsn(), DEDUP_QUEUE, handler,
                     settings.daemon.for_write_rows(settings.daemon.batch_size), name="nearsync.dedup",
                     concurrency=settings.daemon.concurrency_for(DEDUP_QUEUE))

