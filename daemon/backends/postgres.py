"""The PostgreSQL index backend: the embedded default, needing nothing but the source database.

Documents live in ``nearsync.documents`` (one row per record, tombstones for deletes), each with
its candidate keys in a ``bigint[]`` column (``key_hashes``, under a GIN index, migration 0010) as
signed 64-bit xxh64 hashes of ``table \\x1f scope \\x1f key``, so a lookup on the hashes is blocked by
table and scope at once. A write is one transaction: version-checked upserts (keys included) and
tombstones. The keys are written only with the version, in the same row and under its lock, so two
writers of one record cannot leave stale keys (see ``upsert_documents``). Queries are the named
ones in ``sql/queries/pg_index.sql``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from daemon.backends.base import (
    Candidate,
    CandidateQuery,
    DeleteOp,
    SCOPE_KEY,
    IndexDocument,
    Outcome,
    TransientIndexError,
    WriteResult,
    lookup_keys,
)
from daemon.backends.pg_encoding import (
    ARRAY_COLUMNS,
    EncodedDocument,
    encode,
    encode_document,
    key_hashes,
    packed_slices,
)
from daemon.logs import get_logger
from daemon.db.arrays import Int4Array, Int8Array
from daemon.db.pool import IdleCheck, configure_session
from daemon.db.queries import query

log = get_logger("nearsync.backend.postgres")

_TRANSIENT = (psycopg.OperationalError, PoolTimeout)


class PostgresBackend:
    """:class:`~daemon.backends.base.IndexBackend` on PostgreSQL tables.

    Args:
        dsn: libpq connection string of the database holding the ``nearsync`` schema.
        pool_size: max connections (default 4).
        connect_timeout_s: how long to wait for a connection before raising TransientIndexError.
    """

    name = "postgres"
    document_encoder = staticmethod(encode_document)
    """Run by the indexer's signature workers (see :mod:`daemon.backends.pg_encoding`)."""

    def __init__(self, dsn: str, *, pool_size: int = 4, connect_timeout_s: float = 10.0) -> None:
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
        return WriteResult(outcomes, errors)

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

    @staticmethod
    def _doc(table: str, r: Sequence[Any]) -> IndexDocument:
        """A document from a row starting ``record_id, version, scope, fields, signature, keys,
        bottomk, minhash`` (the column order of ``get_documents`` and ``candidates``)."""
        record_id, version, scope, fields, signature, keys, *arrays = r[:8]
        signature = signature or {}
        for name, value in zip(ARRAY_COLUMNS, arrays, strict=True):  # stored apart (see upsert_documents)
            if value is not None:
                signature[name] = list(value)
        return IndexDocument(table=table, record_id=record_id, version=version, fields=fields or {},
                             scope=scope or {}, keys=keys or [], signature=signature)

    async def get(self, table: str, record_ids: Sequence[str]) -> dict[str, IndexDocument]:
        """Live documents by id. Raises TransientIndexError when unreachable."""
        try:
            async with self._pool.connection() as conn, conn.cursor(binary=True) as cur:
                await cur.execute(query("get_documents"), {"table": table, "record_ids": list(record_ids)})
                return {r[0]: self._doc(table, r) for r in await cur.fetchall()}
        except _TRANSIENT as e:
            raise TransientIndexError(str(e)) from e

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
        """Records sharing ``min_match`` hashed keys in the same scope, best first (see protocol)."""
        hashes = sorted(key_hashes(table, scope, lookup_keys(keys)))
        if not hashes:
            return []
        try:
            async with self._pool.connection() as conn, conn.cursor(binary=True) as cur:
                await cur.execute(query("candidates"), {"table": table, "keys": Int8Array(hashes), "min_match": min_match,
                                                        "limit": limit, "exclude_id": exclude_id,
                                                        "exclude_source": exclude_source})
                return [Candidate(r[0], r[8], self._doc(table, r)) for r in await cur.fetchall()]
        except _TRANSIENT as e:
            raise TransientIndexError(str(e)) from e

    async def candidates_many(self, table: str, queries: Sequence[CandidateQuery], *, min_match: int = 1,
                              limit: int = 100) -> list[list[Candidate]]:
        """:meth:`candidates` for several lookups in one query and round trip (named
        ``candidates_many``: one GIN index scan per lookup with that lookup's keys, then the best
        ``limit`` per lookup with their documents). Returns one list per query, in order. Raises
        TransientIndexError when unreachable."""
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
            async with self._pool.connection() as conn, conn.cursor(binary=True) as cur:
                await cur.execute(query("candidates_many"), {
                    "table": table, "qids": Int4Array(qids), "keys": Int8Array(hashes), "min_match": min_match,
                    "limit": limit, "exclude_ids": [q.exclude_id for q in queries],
                    "exclude_sources": [q.exclude_source for q in queries]})
                rows = await cur.fetchall()
        except _TRANSIENT as e:
            raise TransientIndexError(str(e)) from e
        for qid, matched, *doc in rows:
            out[qid].append(Candidate(doc[0], matched, self._doc(table, doc)))
        return out

    async def scope_members(self, table: str, queries: Sequence[CandidateQuery], *,
                            limit: int) -> list[list[Candidate] | None]:
        """Every document of each query's scope when it holds at most ``limit`` (see protocol), in one
        query (named ``scope_members``: an index-only count of at most ``limit + 1`` key rows per
        scope, then the members of the small ones). Raises TransientIndexError when unreachable."""
        out: list[list[Candidate] | None] = [None for _ in queries]
        if not queries:
            return out
        hashes = [next(iter(key_hashes(table, q.scope, [SCOPE_KEY]))) for q in queries]
        try:
            async with self._pool.connection() as conn, conn.cursor(binary=True) as cur:
                await cur.execute(query("scope_members"), {
                    "table": table, "qids": Int4Array(list(range(len(queries)))), "keys": Int8Array(hashes),
                    "limit": limit, "exclude_ids": [q.exclude_id for q in queries],
                    "exclude_sources": [q.exclude_source for q in queries],
                    "tok_qids": Int4Array([i for i, q in enumerate(queries) for _ in q.tokens]),
                    "toks": [t for q in queries for t in q.tokens]})
                rows = await cur.fetchall()
        except _TRANSIENT as e:
            raise TransientIndexError(str(e)) from e
        for qid, n, *doc in rows:
            if n > limit:
                continue
            found = out[qid]
            if found is None:
                found = out[qid] = []
            if doc[0] is not None:
                found.append(Candidate(doc[0], 1, self._doc(table, doc)))
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
        """Every live ``(record_id, version)``, streamed with a server-side cursor."""
        async with self._pool.connection() as conn, conn.transaction():
            async with conn.cursor(name="nearsync_iter_versions") as cur:
                await cur.execute(query("iter_versions"), {"table": table})
                async for rid, version in cur:
                    yield rid, version

    async def clear(self, table: str) -> None:
        """Remove every document (keys included) of ``table``."""
        async with self._pool.connection() as conn:
            await conn.execute(query("clear_documents"), {"table": table})
