"""The PostgreSQL index backend: the embedded default, needing nothing but the source database.

Documents live in ``nearsync.documents`` (one row per record, tombstones for deletes); the candidate
keys of each live signed document in a narrow row of ``nearsync.document_lookup`` (migration 0020:
version, scope, source and a ``bigint[]`` of keys under a GIN index, so a lookup's ~600 hits visit
~0.4 kB rows rather than ~2 kB documents rows) as signed 64-bit xxh64 hashes of
``table \\x1f scope \\x1f key``, so a lookup on the hashes is blocked by table and scope at once. A
write is one transaction: version-checked upserts and tombstones, each one statement that also
writes or removes the lookup rows. The keys are written only with the version, from the statement
that applied it and under the documents row's lock, so two writers of one record cannot leave stale
keys (see ``upsert_documents``). Queries are the named
ones in ``sql/queries/pg_index.sql``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from daemon.backends.base import (
    Candidate,
    CandidateQuery,
    CandidateScreen,
    CorpusRow,
    DeleteOp,
    SCOPE_KEY,
    IndexDocument,
    Outcome,
    TransientIndexError,
    WriteResult,
    lookup_keys,
)
from daemon.backends.doc_cache import DEFAULT_CACHED_DOCUMENTS, DocumentCache, RawJsonbLoader
from daemon.backends.pg_encoding import (
    ARRAY_COLUMNS,
    EncodedDocument,
    encode,
    encode_document,
    key_hashes,
    keys_of,
    packed_slices,
)
from daemon.errors import ConfigError
from daemon.logs import get_logger
from daemon.db import jsoncodec
from daemon.db.arrays import INT8_ARRAY_OID, Int4Array, Int8Array, PackedInt8ArrayLoader
from daemon.db.pool import IdleCheck, configure_session
from daemon.db.queries import query

log = get_logger("nearsync.backend.postgres")

_TRANSIENT = (psycopg.OperationalError, PoolTimeout)

ANALYZE_FIRST_AT = 200
"""Documents this process writes before it first brings the index table's planner statistics up to
date; later, as many as the table held at the last time (see :meth:`PostgresBackend.write`)."""


ITER_FETCH_ROWS = 5000
"""Rows per ``FETCH`` of :meth:`PostgresBackend.iter_versions` (psycopg's default is 100): a
reindex's orphan check and ``reindex --verify`` read every id of the table, and at 100 rows a fetch
that was one round trip per 100 documents (10,000 for a million). 5,000 ``(record_id, version)``
pairs are a few hundred kB in memory, whatever the catalogue."""


SCREEN_RECHECK_S = 60.0
"""How often (s) :meth:`PostgresBackend._screen_pays` reads the index's size again."""


class PostgresBackend:
    """:class:`~daemon.backends.base.IndexBackend` on PostgreSQL tables (and
    :class:`~daemon.backends.base.PlannerStatistics`, :class:`~daemon.backends.base.CorpusReader`).

    Args:
        dsn: libpq connection string of the database holding the ``nearsync`` schema.
        pool_size: max connections (default 4).
        connect_timeout_s: how long to wait for a connection before raising TransientIndexError.
        cached_documents: most decoded documents kept in memory (LRU, default
            :data:`~daemon.backends.doc_cache.DEFAULT_CACHED_DOCUMENTS`, 30,000; ~6.5-8 kB each for a
            product listing with its MinHash and scoring values; ``0``: no cache), keyed by ``(table, record_id, version)`` so
            an entry is never stale (see :mod:`daemon.backends.doc_cache`). ``[index]
            cached_documents`` sets it. It also bounds the part cache of candidates read in part
            for a :class:`CandidateScreen` (~1 kB each).

    Lookups after a bulk load: until ``nearsync.documents`` and ``nearsync.document_lookup`` are analysed, PostgreSQL takes it to be
    tiny and may answer a candidate lookup by testing every key against every document (2.5 s for
    one call of 500 lookups on 500 documents); and the candidate-key index's pending list stays
    nearly full until the next vacuum, which every key scan reads whole (56 µs per key scan against
    3 µs once merged, on 2,173 documents). Autovacuum fixes both within a minute or so; :meth:`write`
    does not wait for it: once this process has written :data:`ANALYZE_FIRST_AT` documents, and
    later as many as the table held at the previous time (it may have doubled since), it runs
    ``ANALYZE`` and merges the pending list (:meth:`refresh_statistics`). That is a few times
    during a bulk load and about ``log2`` of the writes over a process's life.

    Documents returned by :meth:`get`, :meth:`candidates`, :meth:`candidates_many` and
    :meth:`scope_members` are shared objects: the same :class:`IndexDocument` goes to every lookup of
    a call that found it, and to later calls while it is cached. Callers must not mutate them.
    """

    name = "postgres"
    document_encoder = staticmethod(encode_document)
    """Run by the indexer's signature workers (see :mod:`daemon.backends.pg_encoding`)."""

    def __init__(self, dsn: str, *, pool_size: int = 4, connect_timeout_s: float = 10.0,
                 cached_documents: int = DEFAULT_CACHED_DOCUMENTS) -> None:
        if not isinstance(cached_documents, int) or isinstance(cached_documents, bool) or cached_documents < 0:
            raise ConfigError("index.cached_documents", f"must be a whole number >= 0, got {cached_documents!r}")
        self._cache = DocumentCache(cached_documents)
        self._part_cache = DocumentCache(cached_documents)  # partial documents of a CandidateScreen
        self._part_shape: tuple[tuple[str, ...], tuple[str, ...]] | None = None  # the keys they hold
        self._screen_checked: dict[str, tuple[float, bool]] = {}  # table -> (when, whether the screen pays)
        self.decoded = 0
        """Documents parsed so far (read because the cache did not hold their version; the
        benchmarks report it per record)."""
        self.screened = 0
        """Candidate documents read in part for a :class:`CandidateScreen` so far (:meth:`_document_parts`)."""
        self.screened_listed = 0
        """Of :attr:`screened`, those read from their ``identifiers`` column alone (migration 0022)."""
        self._written = 0
        self._analyze_at = ANALYZE_FIRST_AT
        idle_check = IdleCheck()  # ping on borrow only after 1 s idle (a round trip per borrow otherwise)
        self._pool = AsyncConnectionPool(dsn, min_size=1, max_size=pool_size, open=False,
                                         timeout=connect_timeout_s, kwargs={"autocommit": True},
                                         check=idle_check.check, reset=idle_check.reset, configure=configure_session)

    async def open(self) -> None:
        """Open the connection pool (tables are created by migration 0001)."""
        await self._pool.open(wait=False)

    async def close(self) -> None:
        """Close the pool."""
        await self._pool.close()

    async def write(self, upserts: Sequence[IndexDocument], deletes: Sequence[DeleteOp]) -> WriteResult:
        """Versioned upserts and tombstones; see the protocol. Per-record outcomes.

        A record whose document cannot be serialised (e.g. NaN) is ``FAILED``. If the batch
        statement fails for a data reason, records are retried one by one to isolate the bad one.

        Raises:
            TransientIndexError: the database is unreachable (retry later).
        """
        outcomes: dict[tuple[str, str], Outcome] = {}
        errors: dict[tuple[str, str], str] = {}
        good: list[tuple[IndexDocument, EncodedDocument]] = []
        for d in upserts:
            try:
                good.append((d, d.encoded if isinstance(d.encoded, EncodedDocument) else encode(d)))
            except (TypeError, ValueError) as e:
                outcomes[(d.table, d.record_id)] = Outcome.FAILED
                errors[(d.table, d.record_id)] = f"document not serialisable: {e}"
        try:
            outcomes |= await self._write_batch(good, deletes)
        except _TRANSIENT as e:
            raise TransientIndexError(f"postgres index unreachable: {e}") from e
        except psycopg.Error as batch_error:
            log.warning("index batch write failed, isolating bad records one by one",
                        error=f"{type(batch_error).__name__}: {batch_error}"[:500])
            for item in good:
                try:
                    outcomes |= await self._write_batch([item], [])
                except _TRANSIENT as e:
                    raise TransientIndexError(f"postgres index unreachable: {e}") from e
                except psycopg.Error as e:
                    k = (item[0].table, item[0].record_id)
                    outcomes[k] = Outcome.FAILED
                    errors[k] = f"{type(e).__name__}: {e}"
            if deletes:
                try:
                    outcomes |= await self._write_batch([], deletes)
                except _TRANSIENT as e:
                    raise TransientIndexError(f"postgres index unreachable: {e}") from e
        self._written += sum(o is Outcome.APPLIED for o in outcomes.values())
        if self._written >= self._analyze_at:
            self._analyze_at = self._written + ANALYZE_FIRST_AT  # no second refresh while this one runs
            await self.refresh_statistics()
        return WriteResult(outcomes, errors)

    async def refresh_statistics(self) -> None:
        """:class:`~daemon.backends.base.PlannerStatistics`: ``ANALYZE`` the documents and lookup
        tables and merge the candidate-key index's pending list (named queries ``analyze_documents``,
        ``merge_pending_keys``; see the class docstring). :meth:`write` calls it by itself next
        after as many more written documents as the table then holds. Failures are
        logged, not raised: the batch is written, and both are optimisations that autovacuum also
        makes (a role that does not own the table gets a warning for the first and an error for the
        second)."""
        step = ANALYZE_FIRST_AT
        try:
            async with self._pool.connection() as conn:
                await conn.execute(query("analyze_documents"))
                cur = await conn.execute(query("documents_reltuples"))
                row = await cur.fetchone()
                step = max(step, int(row[0]) if row else 0)
                await conn.execute(query("merge_pending_keys"))
            log.info("index table statistics refreshed", documents_written=self._written, table_rows=step)
        except (psycopg.Error, PoolTimeout) as e:
            log.warning("could not refresh the index table's statistics", error=f"{type(e).__name__}: {e}"[:300])
        self._analyze_at = self._written + step

    async def _write_batch(self, upserts: Sequence[tuple[IndexDocument, EncodedDocument]],
                           deletes: Sequence[DeleteOp]) -> dict[tuple[str, str], Outcome]:
        outcomes: dict[tuple[str, str], Outcome] = {}
        by_table: dict[str, tuple[list[tuple[IndexDocument, EncodedDocument]], list[DeleteOp]]] = {}
        for item in upserts:
            by_table.setdefault(item[0].table, ([], []))[0].append(item)
        for op in deletes:
            by_table.setdefault(op.table, ([], []))[1].append(op)
        async with self._pool.connection() as conn, conn.transaction():
            for table, (ups, dels) in by_table.items():
                applied: set[str] = set()
                if ups:
                    cur = await conn.execute(query("upsert_documents"), self._upsert_params(table, ups))
                    applied = {r[0] for r in await cur.fetchall()}
                deleted: set[str] = set()
                if dels:
                    cur = await conn.execute(query("delete_documents"), {
                        "table": table, "record_ids": [d.record_id for d in dels],
                        "versions": [d.version for d in dels]})
                    deleted = {r[0] for r in await cur.fetchall()}
                for d, _ in ups:
                    outcomes[(table, d.record_id)] = Outcome.APPLIED if d.record_id in applied else Outcome.STALE
                for op in dels:
                    outcomes[(table, op.record_id)] = Outcome.APPLIED if op.record_id in deleted else Outcome.STALE
        return outcomes

    @staticmethod
    def _upsert_params(table: str, ups: Sequence[tuple[IndexDocument, EncodedDocument]]) -> dict[str, Any]:
        """The parameters of ``upsert_documents``: one array per column, the three ``bigint[]``
        columns as one packed array each with per-row offsets and lengths (no keys: NULL)."""
        encoded = [e for _, e in ups]
        bottomk, bottomk_offs, bottomk_lens = packed_slices([e.bottomk for e in encoded])
        minhash, minhash_offs, minhash_lens = packed_slices([e.minhash for e in encoded])
        hashes, hashes_offs, hashes_lens = packed_slices([e.key_hashes or None for e in encoded])
        return {
            "table": table,
            "record_ids": [d.record_id for d, _ in ups],
            "versions": Int8Array([d.version for d, _ in ups]),
            "scopes": [e.scope for e in encoded],
            "fields": [e.fields for e in encoded],
            "signatures": [e.signature for e in encoded],
            "keys": [e.keys for e in encoded],
            "bottomk": Int8Array(bottomk), "bottomk_offs": Int4Array(bottomk_offs), "bottomk_lens": Int4Array(bottomk_lens),
            "minhash": Int8Array(minhash), "minhash_offs": Int4Array(minhash_offs), "minhash_lens": Int4Array(minhash_lens),
            "key_hashes": Int8Array(hashes), "hashes_offs": Int4Array(hashes_offs), "hashes_lens": Int4Array(hashes_lens),
        }

    def _documents(self, table: str, rows: Sequence[Sequence[Any]]) -> dict[str, IndexDocument]:
        """``{record_id: document}`` from rows ``record_id, version, scope, fields, signature, keys,
        bottomk, minhash`` (the column order of ``get_documents``) read by a :meth:`_cursor`: the JSON
        columns still as text (bytes), parsed only for the documents the cache does not hold."""
        cache = self._cache
        out: dict[str, IndexDocument] = {}
        for r in rows:
            key = (table, r[0], r[1])
            doc = cache.get(key)
            if doc is None:
                doc = self._decode(table, r)
                cache.put(key, doc)
                self.decoded += 1
            out[r[0]] = doc
        return out

    @staticmethod
    def _decode(table: str, r: Sequence[Any]) -> IndexDocument:
        """A document from a row ``record_id, version, scope, fields, signature, keys, bottomk,
        minhash`` whose JSON columns are text (bytes) or NULL.

        Raises:
            ValueError: a JSON column is not valid JSON.
        """
        record_id, version, scope, fields, signature, keys, *arrays = r[:8]
        loads = jsoncodec.loads
        sig = loads(signature) if signature is not None else None
        sig = sig or {}
        for name, value in zip(ARRAY_COLUMNS, arrays, strict=True):  # stored apart (see upsert_documents)
            if value is not None:  # an array('q') from a _cursor (PackedInt8ArrayLoader), kept as it is
                sig[name] = value
        if keys is not None:
            key_list = loads(keys) or []
        else:  # not stored: the signature's own keys (see pg_encoding.keys_of); none for plain sync
            key_list = keys_of(sig) or []
        return IndexDocument(table=table, record_id=record_id, version=version,
                             fields=(loads(fields) if fields is not None else None) or {},
                             scope=(loads(scope) if scope is not None else None) or {},
                             keys=key_list, signature=sig)

    @staticmethod
    def _cursor(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncCursor[Any]:
        """A binary cursor that leaves ``jsonb`` values unparsed (bytes, see :class:`RawJsonbLoader`)
        and reads ``bigint[]`` values as ``array('q')`` (:class:`PackedInt8ArrayLoader`), for
        :meth:`_documents`."""
        cur = conn.cursor(binary=True)
        cur.adapters.register_loader("jsonb", RawJsonbLoader)
        cur.adapters.register_loader(INT8_ARRAY_OID, PackedInt8ArrayLoader)
        return cur

    async def get(self, table: str, record_ids: Sequence[str]) -> dict[str, IndexDocument]:
        """Live documents by id: ``{record_id: document}``, missing and deleted ids absent; cached
        documents of the same version are reused (shared, do not mutate). Raises
        TransientIndexError when unreachable.

        One query (named ``get_documents_known``) that is told the version the cache holds of each
        record: the rows of those still current come without their JSON, so a record the cache
        holds costs PostgreSQL an index probe, not the read (and detoasting) of its document. The
        dedup worker reads mostly such records (a batch's components, its links' ends, re-read
        under its lock).
        """
        ids = list(record_ids)
        held: dict[str, IndexDocument] = {}
        known: list[int | None] = []
        for rid in ids:
            doc = self._cache.newest(table, rid)
            if doc is not None:
                held[rid] = doc
            known.append(doc.version if doc is not None else None)
        try:
            async with self._pool.connection() as conn, self._cursor(conn) as cur:
                await cur.execute(query("get_documents_known"), {"table": table, "record_ids": ids,
                                                                 "known": known})
                rows = await cur.fetchall()
        except _TRANSIENT as e:
            raise TransientIndexError(str(e)) from e
        out = self._documents(table, [r for r in rows if not r[8]])
        for r in rows:
            if r[8]:
                out[r[0]] = held[r[0]]
        return out

    async def get_versions(self, table: str, record_ids: Sequence[str]) -> dict[str, int]:
        """``{record_id: version}`` of live documents (see protocol). Raises TransientIndexError."""
        try:
            async with self._pool.connection() as conn, conn.cursor() as cur:
                await cur.execute(query("get_versions"), {"table": table, "record_ids": list(record_ids)})
                return dict(await cur.fetchall())
        except _TRANSIENT as e:
            raise TransientIndexError(str(e)) from e

    async def get_sketches(self, table: str, record_ids: Sequence[str]) -> dict[str, tuple[int, tuple[int, ...]]]:
        """``{record_id: (version, bottom-k sketch)}`` (see protocol). Raises TransientIndexError."""
        try:
            async with self._pool.connection() as conn, conn.cursor(binary=True) as cur:  # bigint[]: binary parses faster
                await cur.execute(query("get_sketches"), {"table": table, "record_ids": list(record_ids)})
                return {rid: (version, tuple(sk if sk is not None else legacy or ()))
                        for rid, version, sk, legacy in await cur.fetchall()}
        except _TRANSIENT as e:
            raise TransientIndexError(str(e)) from e

    async def candidates(self, table: str, keys: Sequence[str], scope: Mapping[str, str], *, min_match: int = 1,
                         limit: int = 100, exclude_id: str | None = None,
                         exclude_source: str | None = None) -> list[Candidate]:
        """Records sharing ``min_match`` hashed keys in the same scope, best first (see protocol): one
        lookup of :meth:`candidates_many`. Raises TransientIndexError."""
        [found] = await self.candidates_many(table, [CandidateQuery(list(keys), dict(scope), exclude_id, exclude_source)],
                                             min_match=min_match, limit=limit)
        return found

    async def candidates_many(self, table: str, queries: Sequence[CandidateQuery], *, min_match: int = 1,
                              limit: int = 100, screen: CandidateScreen | None = None) -> list[list[Candidate]]:
        """:meth:`candidates` for several lookups in one query (named ``candidates_many``: one GIN
        index scan per lookup and key, then the best ``limit`` per lookup, each hit with its
        candidate's version), then one more for the documents the cache does not hold at that
        version (``get_documents``): two round trips per call whatever the number of lookups. Each
        distinct candidate document is read and parsed at most once per call: lookups that share a
        candidate share its :class:`IndexDocument` object (do not mutate it).

        With a ``screen``, on an index larger than the document cache (:meth:`_screen_pays`), the
        documents the cache does not hold are first read in part (``get_document_parts``: the
        screen's keys only) and only those some lookup's ``screen.keep`` asks for are read whole:
        three round trips. The others come as :attr:`IndexDocument.partial` documents, kept in a
        part cache of their own (:meth:`_document_parts`), never in the document cache.

        The reads are separate statements: a candidate rewritten in between comes with its newer
        document (the dedup worker checks every link against the current versions under its lock
        anyway), one deleted in between is left out.

        Returns:
            One list per query, in order, each best first as :meth:`candidates` would return it.
        Raises:
            TransientIndexError: the database is unreachable.
        """
        out: list[list[Candidate]] = [[] for _ in queries]
        qids: list[int] = []
        hashes: list[int] = []
        for i, q in enumerate(queries):
            found = key_hashes(table, q.scope, lookup_keys(q.keys))
            qids += [i] * len(found)
            hashes += found
        if not hashes or limit <= 0:
            return out
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("candidates_many"), {
                    "table": table, "qids": Int4Array(qids), "keys": Int8Array(hashes), "min_match": min_match,
                    "limit": limit, "exclude_ids": [q.exclude_id for q in queries],
                    "exclude_sources": [q.exclude_source for q in queries]}, binary=True)
                hits = sorted(await cur.fetchall())  # (qid, rn, matched, record_id, version): best first
                docs: dict[str, IndexDocument] = {}
                missing: set[str] = set()
                for *_, record_id, version in hits:
                    cached = self._cache.get((table, record_id, version))
                    if cached is not None:
                        docs[record_id] = cached
                    else:
                        missing.add(record_id)
                if missing and screen is not None and await self._screen_pays(conn, table):
                    parts = await self._document_parts(conn, table, {rid: v for *_, rid, v in hits if rid in missing},
                                                       screen)
                    missing = set()
                    for qid, _rn, _matched, record_id, _version in hits:
                        part = parts.get(record_id)
                        if part is not None and record_id not in missing and screen.keep(qid, part):
                            missing.add(record_id)
                    docs |= {rid: part for rid, part in parts.items() if rid not in missing}
                if missing:
                    async with self._cursor(conn) as dcur:
                        await dcur.execute(query("get_documents"), {"table": table, "record_ids": sorted(missing)})
                        docs |= self._documents(table, await dcur.fetchall())
        except _TRANSIENT as e:
            raise TransientIndexError(str(e)) from e
        for qid, _rn, matched, record_id, _version in hits:
            doc = docs.get(record_id)
            if doc is not None:  # None only for a record deleted between the two reads
                out[qid].append(Candidate(record_id, matched, doc))
        return out

    async def _screen_pays(self, conn: psycopg.AsyncConnection[Any], table: str) -> bool:
        """Whether a :class:`CandidateScreen` pays on this index: when it holds more documents than
        the document cache (the planner's row count of ``nearsync.documents``, or before the first
        ``ANALYZE`` a count of ``table``'s up to one more than the cache holds: named query
        ``count_documents_upto``), rechecked every :data:`SCREEN_RECHECK_S`.

        Where the cache holds the whole index each candidate is read whole at most once anyway, and
        reading it in part first only adds a statement and a read: on Abt-Buy (2,173 listings, a
        cache sized to them by ``nearsync evaluate``) the dedup phase took 3.0-3.7 s with the screen
        against 2.4-3.3 s without. Where it does not, the cache misses recur and most of them are
        screened out (100,000 dense listings, a 30,000-document cache: +28% records/s). Whether the
        screen runs never changes a result (see :func:`daemon.dedup.worker.candidate_screen`)."""
        now = time.monotonic()
        known = self._screen_checked.get(table)
        if known is not None and now < known[0] + SCREEN_RECHECK_S:
            return known[1]
        row = await (await conn.execute(query("documents_reltuples"))).fetchone()
        documents = int(row[0]) if row else -1
        if documents < 0:  # never analysed: counted, up to one more than the cache holds
            row = await (await conn.execute(query("count_documents_upto"),
                                            {"table": table, "limit": self._cache.max_documents + 1})).fetchone()
            documents = int(row[0]) if row else 0
        pays = documents > self._cache.max_documents
        self._screen_checked[table] = (now, pays)
        return pays

    async def _document_parts(self, conn: psycopg.AsyncConnection[Any], table: str, versions: dict[str, int],
                              screen: CandidateScreen) -> dict[str, IndexDocument]:
        """The :attr:`IndexDocument.partial` documents of the records ``versions`` names (record id
        -> the version the lookup saw), with only ``screen``'s fields and signature keys: from the
        part cache when it holds that version, else read (named query ``get_document_parts``,
        counted in :attr:`screened`) and kept there. Records deleted since are absent.

        A document whose ``identifiers`` column (migration 0022: the signature's identifier lists)
        holds every one of ``screen.signature`` comes with those keys alone and no fields (counted
        in :attr:`screened_listed`): a screen reads a field only in place of a missing signature key
        (:attr:`CandidateScreen.fields`), and the signature is not de-TOASTed. Any other comes with
        the screen's fields and signature keys that it has.

        The part cache is a :class:`DocumentCache` of its own, as large as the document cache (a
        partial document is ~1 kB with its scorer's view, against ~7 kB for a whole one), and holds
        the parts of one screen's keys: a screen with other keys empties it first."""
        shape = (screen.fields, screen.signature)
        if shape != self._part_shape:
            if self._part_shape is not None:  # parts of other keys: not this screen's
                self._part_cache = DocumentCache(self._cache.max_documents)
            self._part_shape = shape
        cache = self._part_cache
        out: dict[str, IndexDocument] = {}
        unread = []
        for rid, version in versions.items():
            part = cache.get((table, rid, version))
            if part is None:
                unread.append(rid)
            else:
                out[rid] = part
        if unread:
            async with self._cursor(conn) as cur:
                await cur.execute(query("get_document_parts"), {
                    "table": table, "record_ids": sorted(unread), "field_keys": list(screen.fields),
                    "signature_keys": list(screen.signature)})
                rows = await cur.fetchall()
            loads = jsoncodec.loads
            self.screened += len(rows)
            keys = screen.signature
            for rid, version, identifiers, fields, sig in rows:
                if identifiers is not None:  # every one of the screen's signature keys: no field is read
                    listed = loads(identifiers)
                    part = IndexDocument(table=table, record_id=rid, version=version, fields={},
                                         signature={k: listed[k] for k in keys}, partial=True)
                    self.screened_listed += 1
                else:
                    part = IndexDocument(table=table, record_id=rid, version=version,
                                         fields=(loads(fields) if fields is not None else None) or {},
                                         signature=(loads(sig) if sig is not None else None) or {}, partial=True)
                out[rid] = part
                cache.put((table, rid, version), part)
        return out

    async def scope_members(self, table: str, queries: Sequence[CandidateQuery], *,
                            limit: int, min_match: int = 1) -> list[list[Candidate] | None]:
        """Every document of each query's scope when it holds at most ``limit`` (see protocol), in one
        query (named ``scope_members``: a count of at most ``limit + 1`` of the scope's rows per
        distinct scope through the lookup table's ``document_lookup_scope`` btree index, which stops there whatever the
        scope's size, then the members of the small ones). Each distinct member document comes once per
        call and is parsed only when the cache does not hold its version; queries of one scope share
        its members' :class:`IndexDocument` objects (do not mutate them).

        Returns:
            One entry per query, in order: its members in ``record_id`` order, or None for a scope
            of more than ``limit`` documents.
        Raises:
            TransientIndexError: the database is unreachable.
        """
        out: list[list[Candidate] | None] = [None for _ in queries]
        if not queries:
            return out
        try:
            async with self._pool.connection() as conn, self._cursor(conn) as cur:
                await cur.execute(query("scope_members"), scope_members_params(table, queries, limit=limit,
                                                                               min_match=min_match))
                rows = await cur.fetchall()
        except _TRANSIENT as e:
            raise TransientIndexError(str(e)) from e
        docs = self._documents(table, [r[3:] for r in rows if r[0] is None])
        listed = sorted((r[0], r[2], r[1], r[3]) for r in rows if r[0] is not None)  # (qid, rn, n, record_id)
        for qid, _rn, n, record_id in listed:
            if n > limit:
                continue
            found = out[qid]
            if found is None:
                found = out[qid] = []
            doc = docs.get(record_id) if record_id is not None else None
            if doc is not None:
                found.append(Candidate(record_id, 1, doc))
        return out

    async def count(self, table: str) -> int:
        """Live documents of ``table``."""
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("count_documents"), {"table": table})
                row = await cur.fetchone()
                return int(row[0]) if row else 0
        except _TRANSIENT as e:
            raise TransientIndexError(str(e)) from e

    async def iter_versions(self, table: str) -> AsyncIterator[tuple[str, int]]:
        """Every live ``(record_id, version)``, streamed with a server-side cursor in fetches of
        :data:`ITER_FETCH_ROWS`."""
        async with self._pool.connection() as conn, conn.transaction():
            async with conn.cursor(name="nearsync_iter_versions") as cur:
                cur.itersize = ITER_FETCH_ROWS
                await cur.execute(query("iter_versions"), {"table": table})
                async for rid, version in cur:
                    yield rid, version

    async def corpus_size(self, table: str) -> int:
        """:class:`~daemon.backends.base.CorpusReader`: the live documents of ``table`` (:meth:`count`)."""
        return await self.count(table)

    async def iter_corpus(self, table: str) -> AsyncIterator[list[CorpusRow]]:
        """:class:`~daemon.backends.base.CorpusReader`: every live document's title, scope and super
        tokens (named query ``iter_corpus``, which leaves the rest of the document in the database),
        streamed with a server-side cursor (one transaction: one snapshot of the table) in lists of
        :data:`ITER_FETCH_ROWS` (~0.6 kB of JSON per product listing with its ~23 super tokens:
        ~3 MB per list). The next ``FETCH`` is sent before a list is handed out, so the server reads
        the next rows while the caller counts these (on two cores: 3.0-3.2 s against 3.4-3.9 s for
        a refresh of 100,000 listings, docs/benchmarks.md). The JSON values come as text and are
        parsed here; the document cache is neither read nor filled (a full pass would only evict
        what the dedup worker's lookups need).

        Raises:
            TransientIndexError: the database is unreachable.
        """
        loads = jsoncodec.loads
        try:
            async with self._pool.connection() as conn, conn.transaction():
                cur = conn.cursor(name="nearsync_iter_corpus", binary=True)
                cur.adapters.register_loader("jsonb", RawJsonbLoader)
                async with cur:
                    await cur.execute(query("iter_corpus"), {"table": table})
                    ahead = asyncio.ensure_future(cur.fetchmany(ITER_FETCH_ROWS))
                    try:
                        while rows := await ahead:
                            ahead = asyncio.ensure_future(cur.fetchmany(ITER_FETCH_ROWS))
                            await asyncio.sleep(0)  # let it send the FETCH before the caller counts
                            yield [(loads(title) if title is not None else None, loads(scope) or {},
                                    loads(keys) if keys is not None else []) for title, scope, keys in rows]
                    finally:  # a caller that stopped early: let the fetch in flight end before the cursor closes
                        if not ahead.done():
                            with contextlib.suppress(Exception):
                                await ahead
        except _TRANSIENT as e:
            raise TransientIndexError(str(e)) from e

    async def clear(self, table: str) -> None:
        """Remove every document of ``table`` and its lookup rows (one statement), and forget its cached documents
        (writes after a clear may bring versions again that the cache holds with other content)."""
        try:
            async with self._pool.connection() as conn:
                await conn.execute(query("clear_documents"), {"table": table})
        finally:
            self._cache.drop_table(table)
            self._part_cache.drop_table(table)


def scope_members_params(table: str, queries: Sequence[CandidateQuery], *, limit: int,
                         min_match: int = 1) -> dict[str, Any]:
    """The parameters of the named query ``scope_members`` for ``queries`` (see
    :meth:`PostgresBackend.scope_members`): per query its hashed scope key and its scope as JSON text,
    its exclusions, its title tokens and, when it has tokens, its hashed candidate keys.

    Returns:
        ``{parameter name: value}``, the integer arrays packed (:mod:`daemon.db.arrays`).
    """
    hashes = [next(iter(key_hashes(table, q.scope, [SCOPE_KEY]))) for q in queries]
    lookups = [sorted(key_hashes(table, q.scope, lookup_keys(q.keys))) if q.tokens else [] for q in queries]
    return {"table": table, "qids": Int4Array(list(range(len(queries)))), "keys": Int8Array(hashes),
            "scopes": [jsoncodec.dumps(dict(q.scope)) for q in queries], "limit": limit,
            "exclude_ids": [q.exclude_id for q in queries], "exclude_sources": [q.exclude_source for q in queries],
            "tok_qids": Int4Array([i for i, q in enumerate(queries) for _ in q.tokens]),
            "toks": [t for q in queries for t in q.tokens],
            "key_qids": Int4Array([i for i, found in enumerate(lookups) for _ in found]),
            "lkeys": Int8Array([h for found in lookups for h in found]), "min_match": min_match}
