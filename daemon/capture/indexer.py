"""The indexing daemon: claimed changes → rows loaded in one query → documents → backend write.

A change whose row is gone, or no longer active (``source.active_column``), becomes a delete.
Rows whose signature cannot be computed, and documents the index rejects permanently, are
reported as failed (retried, then dead-lettered) while the rest of the batch is indexed.
Indexed records — and records whose write was stale, see :meth:`IndexHandler.process` — are
put on the dedup queue in the acknowledging transaction when ``dedup.enabled`` is true.

A large batch is built in parts on the signature worker processes and each part is written as
soon as it is built, so the index writes overlap the building of the parts after it. Nothing is
acknowledged before the whole batch is handled (the loop acknowledges after :meth:`process`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from daemon.backends.base import DeleteOp, IndexBackend, IndexDocument, Outcome
from daemon.capture.documents import DocumentBuilder, SignaturePool
from daemon.config import DaemonSettings
from daemon.errors import RecordError
from daemon.logs import get_logger
from daemon.capture.loop import TRANSIENT_ERRORS, BatchResult
from daemon.capture.source import SourceTable, load_rows
from daemon.capture.queue import Claimed

_log = get_logger("nearsync.indexer")


@dataclass
class IndexHandler:
    """:class:`daemon.capture.loop.BatchHandler` for the ``index`` queue.

    Args:
        table: the source table. builder: document builder. backend: an opened index backend.
        chunk_rows: rows per part of a large batch: each part is written as soon as it is built,
            while the next ones are built (0: the default of
            :meth:`~daemon.config.DaemonSettings.chunk_rows_for`, 250 signed and 2,500 in plain sync;
            ``[daemon] index_chunk_rows`` / ``NEARSYNC_INDEX_CHUNK_ROWS`` set it).
    """

    table: SourceTable
    builder: DocumentBuilder
    backend: IndexBackend
    chunk_rows: int = 0
    signer: SignaturePool = field(init=False)

    def __post_init__(self) -> None:
        self.signer = SignaturePool(self.builder)
        if self.chunk_rows <= 0:
            self.chunk_rows = DaemonSettings().chunk_rows_for(signed=self.builder.signed)

    def close(self) -> None:
        """Shut the signature workers down and wait for them to exit (:meth:`SignaturePool.close`);
        :class:`~daemon.capture.loop.QueueLoop` calls it when its session ends, so that no process
        (``run``, ``reindex``, ``evaluate``, the demo) ends with a worker half started, which would
        print a traceback. A later large batch starts the workers again."""
        self.signer.close()

    async def process(self, conn: psycopg.AsyncConnection[Any], batch: Sequence[Claimed]) -> BatchResult:
        """Load, sign and write one batch; see the module docstring."""
        result = BatchResult(counts={"indexed": 0, "deleted": 0, "stale": 0})
        mine = result.of_table(batch, self.table.name)
        wanted = [c.record_id for c in mine if c.op == "U"]
        try:
            rows = await load_rows(conn, self.table, wanted)
        except (ValueError, psycopg.errors.DataException):
            rows = await self._load_one_by_one(conn, mine, result)
        deletes: list[DeleteOp] = []
        by_key: dict[tuple[str, str], Claimed] = {}
        failed_ids = {f.record_id for f, _ in result.failed}
        to_build: list[tuple[Claimed, dict[str, Any]]] = []
        for c in mine:
            if c.record_id in failed_ids:
                continue
            by_key[(c.table, c.record_id)] = c
            row = rows.get(c.record_id) if c.op == "U" else None
            if row is None or not self.table.is_active(row):
                deletes.append(DeleteOp(c.table, c.record_id, c.seq))
            else:
                to_build.append((c, row))
        outcomes, errors, upserted, partial = await self._build_and_write(to_build, deletes, result)
        failed_keys = {(c.table, c.record_id) for c, _ in result.failed}  # incl. rows that could not be signed
        for key, c in by_key.items():
            if key in failed_keys:
                continue
            outcome = outcomes.get(key)
            if outcome is None and partial:
                continue  # not written: stays claimed by us and is claimed again with the next batch
            if outcome is Outcome.FAILED or outcome is None:
                result.failed.append((c, errors.get(key, "no outcome from the index backend")))
                continue
            result.done.append(c)
            is_delete = key not in upserted
            # A stale write still goes to the dedup queue: the index may hold this very version from
            # an attempt that died before its acknowledgement (kill -9, the database restarting
            # under the ack), and then nothing else would tell the worker. The worker reads the
            # record's state from the index, so a superseded version costs one redundant look.
            result.counts["stale" if outcome is Outcome.STALE else "deleted" if is_delete else "indexed"] += 1
            result.follow_up.append(Claimed(c.table, c.record_id, "D" if is_delete else "U", c.seq,
                                            c.changed_at, 0))
        return result

    async def _build_and_write(self, to_build: Sequence[tuple[Claimed, dict[str, Any]]], deletes: Sequence[DeleteOp],
                               result: BatchResult) -> tuple[dict[tuple[str, str], Outcome], dict[tuple[str, str], str],
                                                             set[tuple[str, str]], bool]:
        """Build documents in parts of ``chunk_rows`` and write each part as soon as it is built
        (with ``deletes`` in the first write), so writing overlaps the building of later parts.

        Rows whose signature cannot be computed are appended to ``result.failed`` once their part
        is written (a part cut short by a transient error reports nothing: it is handled again).

        Returns:
            ``(outcomes, errors, upserted keys, partial)`` merged over the writes. ``partial`` is
            true when a transient error stopped the writes after at least one part was written:
            the records of the parts not written have no outcome.
        Raises:
            a transient error (see :data:`daemon.capture.loop.TRANSIENT_ERRORS`) before anything was written.
        """
        outcomes: dict[tuple[str, str], Outcome] = {}
        errors: dict[tuple[str, str], str] = {}
        upserted: set[tuple[str, str]] = set()
        pending = list(deletes)
        pos = 0
        items = [(row, c.seq) for c, row in to_build]
        try:
            async with contextlib.aclosing(self.signer.build_chunks(items, self.chunk_rows)) as parts:
                async for part in parts:
                    upserts: list[IndexDocument] = []
                    unsigned: list[tuple[Claimed, str]] = []
                    for (c, _), doc in zip(to_build[pos:pos + len(part)], part, strict=True):
                        if isinstance(doc, RecordError):
                            unsigned.append((c, str(doc)))
                        else:
                            upserts.append(doc)
                    written = await self.backend.write(upserts, pending)
                    result.failed += unsigned  # reported with their part: a part not written reports nothing
                    pos += len(part)
                    pending = []
                    outcomes |= written.outcomes
                    errors |= written.errors
                    upserted |= {(d.table, d.record_id) for d in upserts}
        except TRANSIENT_ERRORS as e:
            if not outcomes:
                raise
            _log.warning("index write failed after part of the batch was written; the rest is retried",
                         written=len(outcomes), error=f"{type(e).__name__}: {e}"[:300])
            return outcomes, errors, upserted, True
        return outcomes, errors, upserted, False

    async def _load_one_by_one(self, conn: psycopg.AsyncConnection[Any], batch: Sequence[Claimed],
                               result: BatchResult) -> dict[str, dict[str, Any]]:
        """Fallback when the batch load fails on bad ids: isolate the bad ones as failures."""
        rows: dict[str, dict[str, Any]] = {}
        for c in batch:
            if c.op != "U":
                continue
            try:
                rows |= await load_rows(conn, self.table, [c.record_id])
            except (ValueError, psycopg.errors.DataException) as e:
                result.failed.append((c, f"cannot load row: {e}"))
        return rows
