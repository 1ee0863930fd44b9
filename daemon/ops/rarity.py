"""``nearsync rarity refresh``: build a corpus snapshot (token rarity, large blocks) from the index
and make it active.

The dedup worker weighs title words by their rarity in the indexed corpus (see
:mod:`daemon.scoring.rarity`). So that flags stay a function of the data rather than of the order
records were processed in, the frequencies are a snapshot: this command reads every live document
of the table's index, counts each title word's document frequency with the scorer's own
tokenisation, and stores the counts as a new version, made active in one transaction
(:func:`daemon.db.rarity.store_snapshot`). A running worker picks the new version up at its next
batch. On a backend that holds the signed documents in PostgreSQL (a
:class:`~daemon.backends.base.CorpusReader`) it reads only their titles, scopes and super tokens,
in one query; on the others, whole documents through :meth:`~daemon.backends.base.IndexBackend.get`
in chunks of :data:`READ_CHUNK`. The counts, and so the snapshot, are the same either way.

The same pass counts every candidate-key block (:class:`~daemon.signatures.blocks.BlockCounter`:
the documents of a scope holding a key) and stores those larger than ``[dedup] max_block`` with the
snapshot; the worker's candidate lookups leave them out (block purging, see
:data:`daemon.dedup.settings.MAX_BLOCK`). With ``max_block`` 0 none is stored.

A new snapshot changes scores and candidates, as a signature change does: flags are a function of the data and of
the active snapshot. Records deduplicated before the refresh keep the flags of the old one until
they are processed again; ``requeue=True`` puts every live document on the dedup queue, so the
worker re-scores the whole table with the new one.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from tqdm import tqdm

from daemon.backends.base import CorpusReader, CorpusRow, IndexBackend
from daemon.config import Settings
from daemon.db.rarity import store_snapshot
from daemon.dedup.settings import dedup_options
from daemon.ops.requeue import live_ids, requeue_for_dedup
from daemon.scoring.rarity import FrequencyCounter
from daemon.signatures.blocks import BlockCounter

READ_CHUNK = 1000
"""Documents read from the backend per ``get`` call while counting, on a backend that is no
:class:`~daemon.backends.base.CorpusReader` (bounds memory, not results)."""


async def _read_documents(backend: IndexBackend, table: str, ids: list[str]) -> AsyncIterator[list[CorpusRow]]:
    """The documents ``ids`` of ``table`` read whole through ``backend.get`` in chunks of
    :data:`READ_CHUNK`, each reduced to a :data:`~daemon.backends.base.CorpusRow` (its keys all
    given: the counter keeps the super tokens); ids no longer live are left out."""
    for start in range(0, len(ids), READ_CHUNK):
        docs = await backend.get(table, ids[start:start + READ_CHUNK])
        yield [(doc.fields.get("title"), doc.scope, doc.keys) for doc in docs.values()]


async def refresh_rarity(settings: Settings, backend: IndexBackend, *, table: str | None = None,
                         requeue: bool = False, progress: bool = True, max_block: int | None = None,
                         ) -> dict[str, Any]:
    """Count the title words and the candidate-key blocks of every live document of ``table`` and
    store the counts as the table's new active snapshot.

    Args:
        settings: validated settings (the DSN). backend: an opened index backend.
        table: tracked table name (``schema.table``); default the configured source table.
        requeue: also put every live document (the ids of ``backend.iter_versions``) on the dedup
            queue, so the worker re-scores the whole table with the new snapshot.
        progress: show a tqdm bar on stderr (documents counted).
        max_block: the block-size bound (None: ``[dedup] max_block``; 0: no block is stored).
    Returns:
        ``{"table", "version", "documents", "tokens", "max_block", "large_blocks", "requeued", "seconds"}``.
    Raises:
        ConfigError: an invalid ``[dedup]`` table.
        psycopg.Error, TransientIndexError: the database or the index failed (nothing is stored then).
    """
    bound = dedup_options(settings).max_block if max_block is None else max_block
    t0 = time.perf_counter()
    table = table or settings.source.qualified
    counter = FrequencyCounter()
    blocks = BlockCounter() if bound > 0 else None
    ids: list[str] | None = None
    if isinstance(backend, CorpusReader):
        total = await backend.corpus_size(table)
        corpus = backend.iter_corpus(table)
    else:
        ids = await live_ids(backend, table)
        total, corpus = len(ids), _read_documents(backend, table, ids)
    with tqdm(total=total, unit="docs", disable=not progress, desc="rarity") as bar:
        async for rows in corpus:
            for title, scope, keys in rows:
                counter.add(title)
                if blocks is not None:
                    blocks.add(table, scope, keys)
            bar.update(len(rows))
    if requeue and ids is None:
        ids = await live_ids(backend, table)
    hashes, dfs = counter.arrays()
    large = blocks.larger_than(bound) if blocks is not None else None
    async with await psycopg.AsyncConnection.connect(settings.require_dsn(), autocommit=True) as conn:
        version = await store_snapshot(conn, table, counter.documents, hashes, dfs, max_block=bound,
                                       large_blocks=large)
        if requeue:
            await requeue_for_dedup(conn, table, ids or [])
    return {"table": table, "version": version, "documents": counter.documents, "tokens": int(len(hashes)),
            "max_block": bound, "large_blocks": 0 if large is None else int(len(large)),
            "requeued": len(ids or ()) if requeue else 0, "seconds": round(time.perf_counter() - t0, 2)}
