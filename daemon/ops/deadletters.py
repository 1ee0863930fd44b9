"""``nearsync deadletter list|retry|purge``: inspect and requeue records that failed for good."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from daemon.config import Settings
from daemon.db.queries import query


async def list_dead(settings: Settings, *, limit: int = 100) -> list[dict[str, Any]]:
    """Dead letters, oldest first: id, queue, table_name, record_id, op, seq, attempts, error, times."""
    async with await psycopg.AsyncConnection.connect(settings.require_dsn(), autocommit=True) as conn:
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(query("dead_letter_list"), {"limit": limit})
        return list(await cur.fetchall())


async def absent_dead(settings: Settings, ids: list[int]) -> list[int]:
    """Of ``ids``, those that name no dead letter (ascending; ``[]`` when all do): what a retry or a
    purge of those ids would leave untouched."""
    async with await psycopg.AsyncConnection.connect(settings.require_dsn(), autocommit=True) as conn:
        cur = await conn.execute(query("dead_letter_ids_absent"), {"ids": ids})
        return [int(r[0]) for r in await cur.fetchall()]


async def retry_dead(settings: Settings, ids: list[int] | None = None) -> int:
    """Put dead letters (all, or ``ids``) back on their queue with a fresh sequence; returns how many."""
    async with await psycopg.AsyncConnection.connect(settings.require_dsn(), autocommit=True) as conn:
        cur = await conn.execute(query("dead_letter_retry"), {"ids": ids})
        n = len(await cur.fetchall())
        for channel in ("nearsync", "nearsync_dedup"):
            await conn.execute(query("notify"), {"channel": channel, "payload": "retry"})
        return n


async def purge_dead(settings: Settings, ids: list[int] | None = None) -> int:
    """Delete dead letters (all, or ``ids``); returns how many."""
    async with await psycopg.AsyncConnection.connect(settings.require_dsn(), autocommit=True) as conn:
        cur = await conn.execute(query("dead_letter_purge"), {"ids": ids})
        return cur.rowcount
