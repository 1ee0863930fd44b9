"""The indexing daemon: claimed changes → rows loaded in one query → documents → backend write.

A change whose row is gone, or no longer active (``source.active_column``), becomes a delete.
Rows whose signature cannot be computed, and documents the index rejects permanently, are
reported as failed (retried, then dead-lettered) while the rest of the batch is indexed.
Indexed records — and records whose write was stale, see :meth:`IndexHandler.process` — are
put on the dedup queue in the acknowledging transaction when ``dedup.enabled`` is true.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from daemon.backends.base import DeleteOp, IndexBackend, IndexDocument, Outcome
from daemon.documents import DocumentBuilder, SignaturePool
from daemon.errors import RecordError
from daemon.loop import BatchResult
from daemon.tables import SourceTable, load_rows
from daemon.tracking import Claimed


@dataclass
class IndexHandler:
    """:class:`daemon.loop.BatchHandler` for the ``index`` queue.

    Args:
        table: the source table. builder: document builder. backend: an opened index backend.
    """

    table: SourceTable
    builder: DocumentBuilder
    backend: IndexBackend
    signer: SignaturePool = field(init=False)

    def __post_init__(self) -> None:
        self.signer = SignaturePool(self.builder)

    async def process(self, conn: psycopg.AsyncConnection[Any], batch: Sequence[Claimed]) -> BatchResult:
        """Load, sign and write one batch; see the module docstring."""
        result = BatchResult(counts={"indexed": 0, "deleted": 0, "stale": 0})
        mine = [c for c in batch if c.table == self.table.name]
        for c in batch:
            if c.table != self.table.name:
                result.failed.append((c, f"table {c.table} is not the configured source {self.table.name}"))
        wanted = [c.record_id for c in mine if c.op == "U"]
        try:
            rows = await load_rows(conn, self.table, wanted)
        except (ValueError, psycopg.errors.DataException):
            rows = await self._load_one_by_one(conn, mine, result)
        upserts: list[IndexDocument] = []
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
        built = await self.signer.build([(row, c.seq) for c, row in to_build])
        for (c, _), doc in zip(to_build, built, strict=True):
            if isinstance(doc, RecordError):
                result.failed.append((c, str(doc)))
                del by_key[(c.table, c.record_id)]
            else:
                upserts.append(doc)
        written = await self.backend.write(upserts, deletes)
        upserted = {(d.table, d.record_id) for d in upserts}
        for key, c in by_key.items():
            outcome = written.outcomes.get(key)
            if outcome is Outcome.FAILED or outcome is None:
                result.failed.append((c, written.errors.get(key, "no outcome from the index backend")))
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
