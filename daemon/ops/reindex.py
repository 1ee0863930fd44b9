"""``nearsync reindex``: full rebuild, verify and repair of the index from the source table.

A full reindex walks the table by keyset pagination on the id and puts each page on the index
queue with a fresh change sequence, then drains the queue through the daemon's own batch path.
Going through the queue is what makes it safe beside live writes: a concurrent change either
waits on the page's upsert of its tracking row and then gets a newer sequence, or is read
by the page's processing, so an older read can never overwrite a newer change. The last key done
is checkpointed in ``nearsync.job_checkpoints``, so an interrupted reindex resumes where it stopped.

On the PostgreSQL backend the rebuild is in place. On the search backends (Elasticsearch,
OpenSearch) it is a zero-downtime rebuild into a new index version (see :mod:`daemon.backends.search_admin`):

1. ``begin_rebuild`` creates ``<alias>_v{N+1}`` and points ``<alias>_next`` at it (resuming reuses
   the version ``<alias>_next`` already points to; starting over deletes it first);
2. every process writing through a search backend re-reads the aliases before each bulk write, so
   running daemons dual-write live changes to the live version and the new one from their next
   batch on (no waiting, no notification needed), and so does this process while it drains pages;
3. every page goes through the queue as above, written to both versions with fresh sequences;
4. ``finish_rebuild`` moves the alias to the new version and drops ``<alias>_next`` in one atomic
   ``_aliases`` request: readers see the old or the new version, never an error or a mix;
5. documents with no active row are removed and versions beyond ``index.keep_versions`` (default 2)
   are deleted, keeping the previous one for :func:`rollback`.

Documents are never cleared and rewritten in place on a search backend (``delete_by_query`` leaves
tombstones that would make the rewrite stale): ``from_scratch`` is implied by the new version.

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

from daemon.backends.base import IndexBackend, PlannerStatistics, TwoStoreIndex, VersionedIndex
from daemon.config import Settings
from daemon.errors import ConfigError, RecordError
from daemon.db.queries import query
from daemon.service import build_indexer
from daemon.capture.documents import coerce_numbers
from daemon.dedup.settings import typed_fields
from daemon.capture.source import SourceTable, load_rows
from daemon.capture.queue import INDEX_QUEUE, enqueue_fresh


PROGRESS_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} docs [{elapsed}, {rate_fmt}, ETA {remaining}]"
"""The reindex progress bar (tqdm): documents done of total, elapsed time, docs/s (tqdm's moving
average over recent pages) and the time left at that rate (ETA)."""


def _job(table: SourceTable) -> str:
    return f"reindex:{table.name}"


def search_backend(backend: IndexBackend) -> VersionedIndex | None:
    """``backend`` if it keeps versioned indices behind an alias (search backends), else None."""
    return backend if isinstance(backend, VersionedIndex) else None


async def _refresh(backend: IndexBackend) -> None:
    """Make recent writes visible to search where the backend needs it (search backends); recreate
    the alias first if the index was wiped (so that reading it reports drift instead of failing)."""
    search = search_backend(backend)
    if search is not None:
        await search.refresh_write_targets()
        await search.refresh()


async def reindex(settings: Settings, backend: IndexBackend, *, page_size: int = 5000, resume: bool = True,
                  from_scratch: bool = False, progress: bool = True,
                  on_page: Callable[[int], Any] | None = None, versioned: bool | None = None) -> dict[str, Any]:
    """Rebuild the index of the source table; resumable. Returns counts and rate (rows/s).

    Args:
        page_size: rows queued and drained per page.
        resume: continue from the checkpoint if one exists (else start over).
        from_scratch: clear the table's documents first (implies not resuming). Ignored on search
            backends, which always build a new version.
        progress: show a tqdm bar (:data:`PROGRESS_FORMAT`: docs done, docs/s, ETA) on stderr.
        on_page: called with the number of rows done after each page (tests use it to interrupt).
        versioned: build a new index version and swap the alias (default: when ``backend`` is a
            search backend); False rewrites in place (what :func:`rollback` uses to catch up).

    Returns:
        ``{"table", "rows", "orphans_removed", "seconds", "rows_per_s", "indexed"}``; on a versioned
        rebuild also ``"index"`` (the new live version), ``"previous"`` (the versions the alias
        pointed to before), ``"pruned"`` (deleted versions) and ``"resumed_version"``.

    Raises:
        SchemaError, ConfigError, psycopg.OperationalError; TransientIndexError /
        PermanentIndexError from the search server's alias administration.
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
        search = search_backend(backend) if versioned is not False else None
        if versioned and search is None:
            raise ConfigError("index.backend", "a versioned rebuild needs a search backend")
        if from_scratch or not resume or cp is None:
            last_key, done = None, 0
            if from_scratch and search is None:
                await backend.clear(table.name)
        else:
            last_key, done = cp["last_key"], int(cp["done"])
        extra: dict[str, Any] = {}
        if search is not None:
            target, resumed = await search.begin_version(resume=last_key is not None)
            if not resumed:
                last_key, done = None, 0
            await search.refresh_write_targets()  # this process dual-writes from its first page
            extra = {"index": target, "resumed_version": resumed}
        await cur.execute(table.formatted("max_key"))
        upto = (await cur.fetchone() or {}).get("max_key")  # later inserts are the daemon's
        bar = tqdm(total=total, initial=min(done, total), unit="docs", disable=not progress, desc="reindex",
                   dynamic_ncols=True, bar_format=PROGRESS_FORMAT)
        async with loop.session():
            while True:
                await cur.execute(table.formatted("enqueue_page"), {
                    "after": last_key, "after_value": conv(last_key) if last_key is not None else None,
                    "upto": upto, "upto_value": conv(upto) if upto is not None else None,
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
            if search is not None:
                await search.refresh()
                extra["previous"] = await search.finish_version(extra["index"])
                await search.refresh_write_targets()
            await _refresh(backend)
            orphans = await _orphans(conn, table, await _index_ids(backend, table))
            if orphans:
                await _enqueue_fresh(conn, table, [(rid, "D") for rid in orphans])
                await loop.drain()
        bar.close()
        await cur.execute(query("checkpoint_delete"), {"job": _job(table)})
        if isinstance(backend, PlannerStatistics):  # PostgreSQL backend: statistics of the rebuilt table
            await backend.refresh_statistics()
    if search is not None:
        extra["pruned"] = await search.prune_versions()
    elapsed = time.perf_counter() - t0
    await _refresh(backend)
    return {"table": table.name, "rows": done, "orphans_removed": len(orphans), "seconds": round(elapsed, 2),
            "rows_per_s": round(done / elapsed, 1) if elapsed > 0 else None,
            "indexed": await backend.count(table.name), **extra}


async def rollback(settings: Settings, backend: IndexBackend, *, page_size: int = 5000,
                   progress: bool = True) -> dict[str, Any]:
    """Point the search alias back at the previous kept version, then bring that version up to date.

    The swap is atomic (one ``_aliases`` request). The previous version lacks the changes made since
    it stopped being live, so an in-place pass (:func:`reindex` with ``versioned=False``: every row
    queued with a fresh sequence, orphans deleted) catches it up; until it finishes, readers may see
    documents as of the previous version.

    Returns:
        ``{"index": the version now live, "previous": versions the alias pointed to before,
        "catch_up": the report of the in-place pass}``.

    Raises:
        ConfigError: ``backend`` is not a search backend. PermanentIndexError: no older version kept.
        SchemaError, psycopg.OperationalError, TransientIndexError.
    """
    search = search_backend(backend)
    if search is None:
        raise ConfigError("index.backend", "--rollback needs a search backend (elasticsearch or opensearch)")
    target, previous = await search.rollback_version()
    await search.refresh_write_targets()
    report = await reindex(settings, backend, page_size=page_size, resume=False, progress=progress, versioned=False)
    return {"index": target, "previous": previous, "catch_up": report}


async def _enqueue_fresh(conn: psycopg.AsyncConnection[Any], table: SourceTable, items: list[tuple[str, str]]) -> None:
    """Put ``(record_id, op)`` items back on the index queue (:func:`daemon.capture.queue.enqueue_fresh`)."""
    await enqueue_fresh(conn, INDEX_QUEUE, table.name, items)


async def _index_ids(backend: IndexBackend, table: SourceTable) -> list[str]:
    """Every live record id of ``table`` in the index."""
    return [rid async for rid, _version in backend.iter_versions(table.name)]


async def _orphans(conn: psycopg.AsyncConnection[Any], table: SourceTable, index_ids: list[str]) -> list[str]:
    """Those of ``index_ids`` that are not in the table (checked in chunks of 5,000)."""
    orphans: list[str] = []
    chunk: list[str] = []

    async def flush() -> None:
        cur = await conn.execute(table.formatted("ids_present"), {"ids": table.convert_ids(chunk)})
        present = {r[0] for r in await cur.fetchall()}
        orphans.extend(r for r in chunk if r not in present)
        chunk.clear()

    convert = table.id_converter()
    for rid in index_ids:
        try:
            convert(rid)
        except ValueError:
            orphans.append(rid)
            continue
        chunk.append(rid)
        if len(chunk) >= 5000:
            await flush()
    if chunk:
        await flush()
    return orphans


def _stored_fields(table: SourceTable, row: dict[str, Any], typed: Any) -> dict[str, Any] | None:
    """The fields the indexer would store for ``row`` (numbers and ``numeric`` / ``date`` fields
    coerced as :func:`~daemon.capture.documents.coerce_numbers` does), or None when it would refuse
    the row (so an indexed document of it counts as drifted)."""
    try:
        return coerce_numbers(table.fields_of(row), typed)
    except RecordError:
        return None


async def verify(settings: Settings, backend: IndexBackend, *, sample: int = 200, repair: bool = False,
                 page_size: int = 5000, seed: int = 0) -> dict[str, Any]:
    """Compare index and table; with ``repair``, queue the differences and drain them.

    Returns:
        ``{"rows", "indexed", "missing", "orphans", "drifted", "sampled", "drift": bool,
        "repaired": bool, "examples": {...}}`` — ``missing``: active rows not in the index (not in
        both stores of a :class:`~daemon.backends.base.TwoStoreIndex`);
        ``orphans``: documents with no active row; ``drifted``: sampled documents whose fields differ
        from the row (in either store of a ``TwoStoreIndex``).
    """
    indexer = await build_indexer(settings, backend)
    table = indexer.table
    typed = typed_fields(settings)
    conv = table.id_converter()
    rng = random.Random(seed)
    missing: list[str] = []
    drifted: list[str] = []
    inactive: set[str] = set()
    sampled = 0
    rows_seen = 0
    await _refresh(backend)  # search backends: make every write so far visible to search
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
            held = await backend.held_by_both(table.name, ids) if isinstance(backend, TwoStoreIndex) else docs.keys()
            expected: dict[str, dict[str, Any]] = {}  # the sampled records: the fields their rows give
            for rid in ids:
                row = rows.get(rid)
                active = row is not None and table.is_active(row)
                if not active:
                    inactive.add(rid)
                    continue
                if rid not in docs or rid not in held:
                    missing.append(rid)
                elif row is not None and rng.random() < sample / max(1, page_size):
                    expected[rid] = _stored_fields(table, row, typed)
            copies = [docs]
            if isinstance(backend, TwoStoreIndex) and expected:
                # the search index's copies too: the users' queries read those
                copies.append(await backend.search_documents(table.name, list(expected)))
            sampled += len(expected)
            drifted += [rid for rid, fields in expected.items()
                        if any(rid not in c or c[rid].fields != fields for c in copies)]
        index_ids = await _index_ids(backend, table)
        orphans = await _orphans(conn, table, index_ids)
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
