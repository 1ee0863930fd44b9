"""A pass of the dedup worker over the whole table: every live document of the index back on the
dedup queue.

Used by ``nearsync dedup --requeue`` and ``nearsync rarity refresh --requeue``. Flags are a function
of the data except for what the candidate cap and ``exhaustive_below`` saw while the table grew
(docs/architecture.md, "Dedup worker"); a pass over the settled table gives exactly the links,
clusters and flags of a clean pass, and takes a changed snapshot or ``[dedup]`` / ``[scoring]``
setting into every flag.
"""

from __future__ import annotations

from typing import Any

import psycopg

from daemon.backends.base import IndexBackend
from daemon.capture.queue import CHANNELS, DEDUP_QUEUE, enqueue_fresh
from daemon.db.queries import query


async def live_ids(backend: IndexBackend, table: str) -> list[str]:
    """The record ids of every live document of ``table`` in the index (``backend.iter_versions``),
    in the backend's order.
    Raises:
        TransientIndexError: the index is unreachable."""
    return [rid async for rid, _ in backend.iter_versions(table)]


async def requeue_for_dedup(conn: psycopg.AsyncConnection[Any], table: str, ids: list[str]) -> int:
    """Put ``ids`` of ``table`` on the dedup queue with fresh sequences (a pending or claimed row of
    a record is reset, :func:`~daemon.capture.queue.enqueue_fresh`) and wake the dedup workers with
    one NOTIFY on the queue's channel. ``conn`` in autocommit mode (each chunk of ids commits on its
    own, so a pass over millions of records holds no long transaction).

    Returns:
        The number of records queued (``len(ids)``).
    Raises:
        psycopg.Error: on a database error (the chunks queued before it stay queued; running the
        command again queues the rest, and a record queued twice is processed once).
    """
    await enqueue_fresh(conn, DEDUP_QUEUE, table, [(rid, "U") for rid in ids])
    await conn.execute(query("notify"), {"channel": CHANNELS[DEDUP_QUEUE], "payload": table})
    return len(ids)
