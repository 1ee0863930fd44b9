"""The tracking/claiming protocol (a transactional outbox read at least once).

* The triggers (``sql/migrations/change_log.sql``) append one row per changed record to the index-free
  ``nearsync.change_log`` in the user's transaction (one change sequence value per statement).
* :meth:`Queue.claim` of the index queue relays the log into ``nearsync.index_tracking`` in one
  statement (delete, latest change per record, upsert, claimed at once): repeated changes of a
  record coalesce into one pending row, and a change is always in exactly one table.
* A worker registers an id and holds advisory lock ``(28275, id)`` on its LISTEN connection for as
  long as it lives; a claim whose holder lost its lock is claimable again, so a ``kill -9`` loses
  nothing and needs no lease timeout.
* :meth:`Queue.claim` takes due rows with ``FOR UPDATE SKIP LOCKED`` and commits at once (the claim
  is the ``claimed_by`` column, not a held lock, so user writes never wait for us).
* :meth:`Queue.ack` deletes a row only if its sequence is still the claimed one: a change that
  arrived mid-batch bumped the sequence and cleared the claim, and stays pending.
* :meth:`Queue.fail` counts a per-record failure with exponential backoff; after ``max_attempts``
  the row moves to ``nearsync.dead_letters``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from daemon.db.queries import query

INDEX_QUEUE = "index"
DEDUP_QUEUE = "dedup"
CHANNELS = {INDEX_QUEUE: "nearsync", DEDUP_QUEUE: "nearsync_dedup"}
REPLAY_SEQ = 0
"""The sequence of a :class:`Claimed` that was not claimed from a queue but made up to process a record
again (the dedup sweep, :mod:`daemon.dedup.sweep`): no change of the table stands behind it. Real
changes draw their sequence from ``nearsync.change_seq``, which starts at 1."""
RELAY_LIMIT = 20_000
"""Change-log rows moved into the index queue per :func:`relay` (one statement; ~0.1 s at this size)."""


@dataclass(frozen=True, slots=True)
class Claimed:
    """One claimed tracking row.

    Attributes:
        table: ``schema.table``. record_id: text id. op: ``"U"`` (upsert) or ``"D"`` (delete).
        seq: change sequence (the external version). changed_at: when the change was recorded.
        attempts: failures so far.
        takeovers: times a worker stopped (crash, kill, stall watchdog) while holding this change,
            counted by the claim that took it over (see :mod:`daemon.capture.poison`).
    """

    table: str
    record_id: str
    op: str
    seq: int
    changed_at: dt.datetime
    attempts: int
    takeovers: int = 0


@dataclass(frozen=True)
class Queue:
    """Client of one queue (``index`` or ``dedup``) of the tracking table for worker ``worker_id``.

    All methods take an autocommit async connection and open their own short transactions.
    """

    name: str
    worker_id: int
    max_attempts: int = 3
    backoff_s: float = 0.2

    @property
    def channel(self) -> str:
        """The NOTIFY channel that wakes this queue's workers."""
        return CHANNELS[self.name]

    async def claim(self, conn: psycopg.AsyncConnection[Any], limit: int) -> list[Claimed]:
        """Claim up to ``limit`` due rows, oldest change first (also re-claims our own leftovers).

        For the index queue, the rows already queued come first; when they fall short of ``limit``,
        ``relay_claim`` relays up to :data:`RELAY_LIMIT` change-log rows (all pending changes of a
        record coalesce) and claims the oldest of them in the same statement (see
        ``sql/queries/queue.sql``); should it claim none of the rows it queued, ``claim`` runs again (the
        drain would otherwise stop short). Each statement runs in its own autocommit transaction.

        Returns:
            the claimed rows sorted by sequence, one per record: when the relay gave a record the
            first statement claimed a newer change (its row now holds that change, claimed by us),
            the newer one (a batch with both wrote the record twice in one statement, which
            PostgreSQL refuses: ``ON CONFLICT DO UPDATE command cannot affect row a second time``).

        Raises:
            psycopg.OperationalError: the database is unreachable (the loop retries with backoff).
        """
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query("claim"), {"queue": self.name, "worker": self.worker_id, "limit": limit})
            rows = await cur.fetchall()
            if self.name == INDEX_QUEUE and len(rows) < limit:
                await cur.execute(query("relay_claim"), {"worker": self.worker_id, "limit": limit - len(rows),
                                                         "relay_limit": max(RELAY_LIMIT, limit)})
                relayed = await cur.fetchall()
                rows += [r for r in relayed if r["record_id"] is not None]
                if relayed[0]["moved"] and not rows:  # it queued rows but claimed none (see relay_claim)
                    await cur.execute(query("claim"), {"queue": self.name, "worker": self.worker_id, "limit": limit})
                    rows = await cur.fetchall()
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        for r in rows:  # the relay may have given a record claimed by the first statement a newer change
            k = (r["table_name"], r["record_id"])
            if k not in latest or r["seq"] > latest[k]["seq"]:
                latest[k] = r
        out = [_claimed(r) for r in latest.values()]
        out.sort(key=lambda c: c.seq)
        return out

    async def ack(self, conn: psycopg.AsyncConnection[Any], done: Iterable[Claimed]) -> None:
        """Version-checked delete of processed rows (call inside the caller's transaction: the
        named query ``ack_plan`` sets the plan of ``ack`` for that transaction only)."""
        by_table = _by_table(done)
        if by_table:
            await conn.execute(query("ack_plan"))
        for table, items in by_table.items():
            await conn.execute(query("ack"), {"queue": self.name, "table": table,
                                              "record_ids": [c.record_id for c in items],
                                              "seqs": [c.seq for c in items]})

    async def fail(self, conn: psycopg.AsyncConnection[Any], failed: Sequence[tuple[Claimed, str]], *,
                   at_once: bool = False) -> list[str]:
        """Count failures; move rows at ``max_attempts`` to the dead-letter table.

        Args:
            failed: ``(row, error text)`` pairs (the text is cut at 4,000 characters).
            at_once: dead-letter every row of ``failed`` now, whatever its attempts (a poison
                record, see :mod:`daemon.capture.poison`).
        Returns:
            the record ids that were dead-lettered now.
        """
        dead: list[str] = []
        by_table: dict[str, list[tuple[Claimed, str]]] = {}
        for c, err in failed:
            by_table.setdefault(c.table, []).append((c, err))
        for table, items in by_table.items():
            ids = [c.record_id for c, _ in items]
            await conn.execute(query("fail"), {
                "queue": self.name, "table": table, "record_ids": ids, "seqs": [c.seq for c, _ in items],
                "errors": [e[:4000] for _, e in items], "backoff_s": self.backoff_s})
            cur = await conn.execute(query("dead_letter"), {"queue": self.name, "table": table, "record_ids": ids,
                                                            "max_attempts": 0 if at_once else self.max_attempts})
            dead += [r[0] for r in await cur.fetchall()]
        return dead

    async def release(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Give back every claim of ours (on shutdown)."""
        await conn.execute(query("release"), {"queue": self.name, "worker": self.worker_id})

    async def claim_row(self, conn: psycopg.AsyncConnection[Any], row: Claimed) -> Claimed | None:
        """Claim ``row`` again (same record, same sequence) unless another live worker holds it or
        a newer change replaced it; returns it as claimed now (its ``takeovers`` as counted), or None."""
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query("claim_row"), {"queue": self.name, "worker": self.worker_id, "table": row.table,
                                                   "record_id": row.record_id, "seq": row.seq})
            r = await cur.fetchone()
        return None if r is None else _claimed(r)

    async def release_rows(self, conn: psycopg.AsyncConnection[Any], rows: Iterable[Claimed]) -> None:
        """Give back our claims of ``rows`` (those whose sequence is still the one claimed), so that
        another lane or worker may take them, and no takeover is counted for them should this worker
        stop before it would have handled them."""
        for table, items in _by_table(rows).items():
            await conn.execute(query("release_rows"), {"queue": self.name, "table": table, "worker": self.worker_id,
                                                       "record_ids": [c.record_id for c in items],
                                                       "seqs": [c.seq for c in items]})


async def relay(conn: psycopg.AsyncConnection[Any], limit: int = RELAY_LIMIT) -> int:
    """Move up to ``limit`` rows of ``nearsync.change_log`` into the index queue, coalesced per
    record, claiming none (named query ``relay_claim``); safe to run from several workers at once.

    Returns:
        the number of log rows moved (0 when the log is empty).
    """
    cur = await conn.execute(query("relay_claim"), {"relay_limit": limit, "limit": 0, "worker": None})
    row = await cur.fetchone()
    return int(row[-1]) if row else 0


async def enqueue(conn: psycopg.AsyncConnection[Any], queue: str, items: Iterable[Claimed]) -> int:
    """Put records on ``queue`` keeping their sequence (a newer pending row wins); returns the count."""
    n = 0
    for table, group in _by_table(items).items():
        await conn.execute(query("enqueue"), {
            "queue": queue, "table": table, "record_ids": [c.record_id for c in group],
            "ops": [c.op for c in group], "seqs": [c.seq for c in group],
            "changed_ats": [c.changed_at for c in group]})
        await conn.execute(query("notify"), {"channel": CHANNELS[queue], "payload": table})
        n += len(group)
    return n


ENQUEUE_FRESH_CHUNK = 5_000
"""Records per ``enqueue_fresh`` statement of :func:`enqueue_fresh` (bounds one statement's arrays)."""


async def enqueue_fresh(conn: psycopg.AsyncConnection[Any], queue: str, table: str,
                        items: Sequence[tuple[str, str]]) -> None:
    """Put records on ``queue`` with a fresh sequence (named query ``enqueue_fresh``: a pending or
    claimed row of the record is reset to this op), :data:`ENQUEUE_FRESH_CHUNK` records per
    statement; sends no NOTIFY (the caller does, once, if a worker should wake now).

    Args:
        queue: :data:`INDEX_QUEUE` or :data:`DEDUP_QUEUE`. table: tracked table name (``schema.table``).
        items: ``(record_id, op)`` pairs, op ``"U"`` or ``"D"``.
    Raises:
        psycopg.Error: on a database error.
    """
    for i in range(0, len(items), ENQUEUE_FRESH_CHUNK):
        chunk = items[i:i + ENQUEUE_FRESH_CHUNK]
        await conn.execute(query("enqueue_fresh"), {"queue": queue, "table": table,
                                                    "record_ids": [r for r, _ in chunk], "ops": [o for _, o in chunk]})


async def register_worker(conn: psycopg.AsyncConnection[Any]) -> int:
    """Allocate a worker id from ``nearsync.worker_seq``."""
    cur = await conn.execute(query("register_worker"))
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def hold_worker_lock(conn: psycopg.AsyncConnection[Any], worker_id: int) -> bool:
    """Take the session advisory lock that says worker ``worker_id`` is alive; False if taken."""
    cur = await conn.execute(query("lock_worker"), {"worker": worker_id})
    row = await cur.fetchone()
    return bool(row and row[0])


def _claimed(r: dict[str, Any]) -> Claimed:
    """A claimed row as ``claim``, ``relay_claim`` and ``claim_row`` return it (``relay_claim`` has no
    ``takeovers``: its rows were never held)."""
    return Claimed(r["table_name"], r["record_id"], r["op"], r["seq"], r["changed_at"], r["attempts"],
                   r.get("takeovers") or 0)


def _by_table(items: Iterable[Claimed]) -> dict[str, list[Claimed]]:
    out: dict[str, list[Claimed]] = {}
    for c in items:
        out.setdefault(c.table, []).append(c)
    return out
