"""``nearsync reindex``: full rebuild, verify and repair of the index from the source table.

A full reindex walks the table by keyset pagination on the id and puts each page on the index
queue with a fresh change sequence, then drains the queue through the daemon's own batch path.
Going through the queue is what makes it safe beside live writes: a concurrent change either
waits on the page's upsert of its tracking row and then gets a newer sequence, or is read
by the page's processing, so an older read can never overwrite a newer change. The last key done
is checkpointed in ``nearsync.job_checkpoints``, so an interrupted reindex resumes where it stopped.

``verify`` compares table and index (counts, ids both ways, and a sample of documents' fields);
``repair`` queues what differs (missing → upsert, orphaned → delete, drifted → upsert) and drains.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row
from tqdm import tqdm

from daemon.backends.base import IndexBackend
from daemon.config import Settings
from daemon.queries import query
from daemon.service import build_indexer
from daemon.tables import SourceTable, load_rows
from daemon.tracking import INDEX_QUEUE


def _job(table: SourceTable) -> str:
    return f"reindex:{table.name}"


async def reindex(settings: Settings, backend: IndexBackend, *, page_size: int = 5000, resume: bool = True,
                  from_scratch: bool = False, progress: bool = True,
                  on_page: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Rebuild the index of the source table; resumable. Returns counts and rate (rows/s).

    Args:
        page_size: rows queued and drained per page.
        resume: continue from the checkpoint if one exists (else start over).
        from_scratch: clear the table's documents first (implies not resuming).
        progress: show a tqdm bar (rows, rows/s, ETA) on stderr.
        on_page: called with the number of rows done after each page (tests use it to interrupt).

    Raises:
        SchemaError, ConfigError, psycopg.OperationalError.
    """
    indexer = await build_indexer(settings, backend)
    table, loop = indexer.table, indexer.loop
    conv = table.id_converter()
    t0 = time.perf_counter()
    async with await psycopg.AsyncConnection.connect(settings.require_dsn(), autocommit=True) as conn:
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(table.formatted("count_rows"))
        total = int((await cur.fetchone() or {"n": 0})["n"])
        await cur.execute(query("checkpoint_get"), {"job": _job(table)})
        cp = await cur.fetchone()
        if from_scratch or not resume or cp is None:
            last_key, done = None, 0
            if from_scratch:
                await backend.clear(table.name)
        else:
            last_key, done = cp["last_key"], int(cp["done"])
        bar = tqdm(total=total, initial=min(done, total), unit="rows", disable=not progress, desc="reindex",
                   dynamic_ncols=True)
        async with loop.session():
            while True:
                await cur.execute(table.formatted("enqueue_page"), {
                    "after": last_key, "after_value": conv(last_key) if last_key is not None else None,
                    "limit": page_size, "table_name": table.name})
                page = await cur.fetchone()
                assert page is not None
                if not page["queued"]:
                    break
                await loop.drain()
                last_key = page["last_key"]
                done += int(page["queued"])
                bar.update(int(page["queued"]))
                await cur.execute(query("checkpoint_put"), {"job": _job(table), "last_key": last_key,
                                                            "done": done, "total": total})
                if on_page is not None:
                    on_page(done)
            orphans = await _orphans(conn, table, backend)
            if orphans:
                await _enqueue_fresh(conn, table, [(rid, "D") for rid in orphans])
                await loop.drain()
        bar.close()
        await cur.execute(query("checkpoint_delete"), {"job": _job(table)})
    elapsed = time.perf_counter() - t0
    return {"table": table.name, "rows": done, "orphans_removed": len(orphans), "seconds": round(elapsed, 2),
            "rows_per_s": round(done / elapsed, 1) if elapsed > 0 else None,
            "indexed": await backend.count(table.name)}


async def _enqueue_fresh(conn: psycopg.AsyncConnection[Any], table: SourceTable, items: list[tuple[str, str]]) -> None:
    for i in range(0, len(items), 5000):
        chunk = items[i:i + 5000]
        await conn.execute(query("enqueue_fresh"), {"queue": INDEX_QUEUE, "table": table.name,
                                                    "record_ids": [r for r, _ in chunk], "ops": [o for _, o in chunk]})


async def _orphans(conn: psycopg.AsyncConnection[Any], table: SourceTable, backend: IndexBackend) -> list[str]:
    """Ids in the index that are not in the table."""
    orphans: list[str] = []
    chunk: list[str] = []

    async def flush() -> None:
        cur = await conn.execute(table.formatted("ids_present"), {"ids": table.convert_ids(chunk)})
        present = {r[0] for r in await cur.fetchall()}
        orphans.extend(r for r in chunk if r not in present)
        chunk.clear()

    async for rid, _version in backend.iter_versions(table.name):
        try:
            table.id_converter()(rid)
        except ValueError:
            orphans.append(rid)
            continue
        chunk.append(rid)
        if len(chunk) >= 5000:
            await flush()
    if chunk:
        await flush()
    return orphans


async def verify(settings: Settings, backend: IndexBackend, *, sample: int = 200, repair: bool = False,
                 page_size: int = 5000, seed: int = 0) -> dict[str, Any]:
    """Compare index and table; with ``repair``, queue the differences and drain them.

    Returns:
        ``{"rows", "indexed", "missing", "orphans", "drifted", "sampled", "drift": bool,
        "repaired": bool, "examples": {...}}`` — ``missing``: active rows not in the index;
        ``orphans``: documents with no active row; ``drifted``: sampled documents whose fields differ
        from the row.
    """
    indexer = await build_indexer(settings, backend)
    table = indexer.table
    conv = table.id_converter()
    rng = random.Random(seed)
    missing: list[str] = []
    drifted: list[str] = []
    inactive: set[str] = set()
    sampled = 0
    rows_seen = 0
    async with await psycopg.AsyncConnection.connect(settings.require_dsn(), autocommit=True) as conn:
        last: str | None = None
        while True:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(table.formatted("id_page"), {"after": last, "after_value": conv(last) if last else None,
                                                           "limit": page_size})
            ids = [r["record_id"] for r in await cur.fetchall()]
            if not ids:
                break
            last = ids[-1]
            rows_seen += len(ids)
            rows = await load_rows(conn, table, ids)
            docs = await backend.get(table.name, ids)
            for rid in ids:
                row = rows.get(rid)
                active = row is not None and table.is_active(row)
                if not active:
                    inactive.add(rid)
                    continue
                if rid not in docs:
                    missing.append(rid)
                elif rng.random() < sample / max(1, page_size):
                    sampled += 1
                    if docs[rid].fields != table.fields_of(row):
                        drifted.append(rid)
        index_ids: list[str] = []
        async for rid, _ in backend.iter_versions(table.name):
            index_ids.append(rid)
        orphans = await _orphans(conn, table, backend)
        orphans += [rid for rid in index_ids if rid in inactive]
        indexed = len(index_ids)
        report: dict[str, Any] = {
            "table": table.name, "rows": rows_seen, "active_rows": rows_seen - len(inactive), "indexed": indexed,
            "missing": len(missing), "orphans": len(orphans), "drifted": len(drifted), "sampled": sampled,
            "examples": {"missing": missing[:5], "orphans": orphans[:5], "drifted": drifted[:5]},
        }
        report["drift"] = bool(missing or orphans or drifted)
        report["repaired"] = False
        if repair and report["drift"]:
            await _enqueue_fresh(conn, table, [(r, "U") for r in missing + drifted] + [(r, "D") for r in orphans])
            async with indexer.loop.session():
                await indexer.loop.drain()
            report["repaired"] = True
    return report
