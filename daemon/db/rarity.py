"""Corpus snapshots in PostgreSQL (``nearsync.rarity_snapshots``, migrations 0014 and 0019): store, read.

A snapshot is one row: the sorted title-word hashes and their document frequencies packed as
little-endian ``int64`` / ``int32`` bytes (see ``sql/migrations/rarity_snapshots.sql``), so a
snapshot of a million words is read in one fetch and unpacked by ``numpy.frombuffer`` without a
Python object per word; and the candidate-key blocks larger than its ``max_block``, packed the same
way (``sql/migrations/snapshot_large_blocks.sql``). Counting and the weights are pure
(:mod:`daemon.scoring.rarity`, :mod:`daemon.signatures.blocks`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg

from daemon.db.queries import query
from daemon.scoring import ScoringConfig
from daemon.scoring.rarity import Rarity
from daemon.signatures.blocks import LargeBlocks


async def store_snapshot(conn: psycopg.AsyncConnection[Any], table: str, documents: int,
                         hashes: np.ndarray, dfs: np.ndarray, *, max_block: int = 0,
                         large_blocks: np.ndarray | None = None) -> int:
    """Store a snapshot of ``table`` and make it the active one, in one transaction (the previous
    active one is deactivated, then every inactive one of the table dropped), and mark the table
    changed for the dedup sweep (named query ``sweep_changed_locking``: scores and candidates follow
    the snapshot, so a resting sweep makes a pass with it, :mod:`daemon.dedup.sweep`).

    Args:
        conn: a connection (autocommit or not; the writes run in a transaction or savepoint).
        table: tracked table name (``schema.table``). documents: N, the documents counted.
        hashes: ascending word hashes (``int64``). dfs: their document frequencies (``int32``).
        max_block: the block-size bound ``large_blocks`` exceed (0: no purging).
        large_blocks: identities of the candidate-key blocks larger than ``max_block``
            (:func:`~daemon.signatures.blocks.key_hash`, ``int64``; None: none).
    Returns:
        The new snapshot's version.
    Raises:
        psycopg.Error: on a database error (nothing is changed then).
    """
    async with conn.transaction():
        await conn.execute(query("rarity_deactivate"), {"table": table})
        cur = await conn.execute(query("rarity_insert"), {
            "table": table, "documents": documents, "tokens": len(hashes),
            "token_hashes": np.ascontiguousarray(hashes, dtype="<i8").tobytes(),
            "dfs": np.ascontiguousarray(dfs, dtype="<i4").tobytes(), "max_block": int(max_block),
            "large_blocks": np.sort(np.asarray(large_blocks if large_blocks is not None else (), dtype="<i8")).tobytes()})
        row = await cur.fetchone()
        assert row is not None  # INSERT ... RETURNING
        await conn.execute(query("rarity_prune"), {"table": table})
        # scores change: the sweep may not rest (and no pass starts until this commits)
        await conn.execute(query("sweep_changed_locking"), {"table": table})
    return int(row[0])


async def active_version(conn: psycopg.AsyncConnection[Any], table: str) -> int | None:
    """The version of ``table``'s active snapshot, or None when it has none (one indexed lookup).

    Raises:
        psycopg.Error: on a database error.
    """
    cur = await conn.execute(query("rarity_active_version"), {"table": table})
    row = await cur.fetchone()
    return None if row is None else int(row[0])


async def load_active(conn: psycopg.AsyncConnection[Any], table: str) -> Rarity | None:
    """``table``'s active snapshot, or None when it has none.

    Raises:
        psycopg.Error: on a database error.
    """
    cur = await conn.execute(query("rarity_load"), {"table": table})
    row = await cur.fetchone()
    if row is None:
        return None
    version, documents, hashes, dfs, max_block, large = row
    return Rarity(version, documents, np.frombuffer(hashes, dtype="<i8").astype(np.int64),
                  np.frombuffer(dfs, dtype="<i4").astype(np.int32),
                  LargeBlocks(np.frombuffer(large, dtype="<i8").tolist(), max_block))


async def following(conn: psycopg.AsyncConnection[Any], table: str, scoring: ScoringConfig, *,
                    purging: bool = False) -> ScoringConfig:
    """``scoring`` with ``table``'s active snapshot attached: ``scoring`` itself when ``rarity`` is 0
    and ``purging`` is off (no query at all) or the active version is the one attached (one indexed
    lookup), else a new configuration with the snapshot read (or with none, when the table has none
    any more).

    Args:
        purging: the caller purges large blocks (``[dedup] max_block`` > 0), so it needs the
            snapshot's :class:`~daemon.signatures.blocks.LargeBlocks` even without rarity.
    Raises:
        psycopg.Error: on a database error.
    """
    if scoring.rarity <= 0.0 and not purging:
        return scoring
    version = await active_version(conn, table)
    if version == (None if scoring.snapshot is None else scoring.snapshot.version):
        return scoring
    return scoring.with_snapshot(await load_active(conn, table) if version is not None else None)
