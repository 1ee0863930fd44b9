"""The PostgreSQL backend's candidate-key lookup table (``nearsync.document_lookup``, migration 0020)
against a real PostgreSQL: it holds exactly one row per live document with keys, with that document's
version, scope, source field and hashed keys, through writes, newer and stale (older-version)
writes, deletes, a write that drops the keys, and a clear followed by a rebuild; and migration 0020
converts existing documents both ways."""

from __future__ import annotations

from typing import Any

import psycopg

from daemon.backends.base import CandidateQuery, DeleteOp, IndexDocument, Outcome
from daemon.backends.pg_encoding import key_hashes
from daemon.backends.postgres import PostgresBackend
from daemon.ops.migrate import downgrade, upgrade
from tests.conftest import make_settings
from tests.test_pg_backend_fetch import be  # noqa: F401  (the fixture: a migrated database's backend)
from tests.test_search_backend import T, doc

OTHER = "public.other_ads"

LookupRow = tuple[str, str, int, dict[str, str], str | None, list[int]]


def lookup_rows(dsn: str) -> list[LookupRow]:
    """Every row of the lookup table, keys sorted, in (table, record id) order."""
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute("SELECT table_name, record_id, version, scope, source, key_hashes "
                         "FROM nearsync.document_lookup ORDER BY table_name, record_id").fetchall()
    return [(t, r, v, s, src, sorted(k)) for t, r, v, s, src, k in rows]


def expected(live: dict[tuple[str, str], IndexDocument]) -> list[LookupRow]:
    """What the lookup table must hold for the live documents ``live``: a row for each one with
    keys, its source field as text (``->>`` of jsonb: a number as its JSON text), its keys hashed as
    the backend hashes them."""
    out: list[LookupRow] = []
    for (table, rid), d in sorted(live.items()):
        if not d.keys:
            continue
        src: Any = d.fields.get("source")
        out.append((table, rid, d.version, d.scope, None if src is None else str(src),
                    sorted(key_hashes(table, d.scope, d.keys))))
    return out


async def test_lookup_rows_follow_writes_deletes_stale_writes_and_a_clear(be: PostgresBackend, fresh_db: str) -> None:
    live: dict[tuple[str, str], IndexDocument] = {}

    async def write(ups: list[IndexDocument], dels: list[DeleteOp] = []) -> dict[tuple[str, str], Outcome]:
        outcomes = (await be.write(ups, dels)).outcomes
        for d in ups:
            if outcomes[(d.table, d.record_id)] is Outcome.APPLIED:
                live[(d.table, d.record_id)] = d
        for op in dels:
            if outcomes[(op.table, op.record_id)] is Outcome.APPLIED:
                live.pop((op.table, op.record_id), None)
        assert lookup_rows(fresh_db) == expected(live)
        return outcomes

    await write([doc("1", 5, ["b1:a", "b2:b"], source="shop-a"), doc("2", 5, ["b1:a", "s0:c"], scope={"user": "7"}),
                 doc("3", 5, ["b1:a"], source=7), doc("4", 5, []),  # 4: plain sync, no keys
                 doc("1", 5, ["b1:x"], table=OTHER)])
    assert len(lookup_rows(fresh_db)) == 4
    # a stale write (older version, other keys and source) changes nothing
    assert await write([doc("1", 4, ["b9:z"], source="shop-z")]) == {(T, "1"): Outcome.STALE}
    # a newer one replaces keys, scope and source; one without keys removes the row; a first key for 4
    await write([doc("2", 6, ["b3:d"], source="shop-b"), doc("3", 6, []), doc("4", 6, ["b1:a"])])
    # a delete removes the row, a stale delete leaves it, an older upsert after a delete brings nothing back
    assert await write([], [DeleteOp(T, "1", 7), DeleteOp(T, "2", 5)]) == {(T, "1"): Outcome.APPLIED,
                                                                          (T, "2"): Outcome.STALE}
    assert await write([doc("1", 6, ["b1:a"])]) == {(T, "1"): Outcome.STALE}
    found = await be.candidates_many(T, [CandidateQuery(["b1:a", "b3:d"], {}), CandidateQuery(["b3:d"], {})])
    # 2's newer version moved it from scope {"user": "7"} to the global one; 1 and 3 have no row
    assert [[c.record_id for c in x] for x in found] == [["2", "4"], ["2"]]
    # a clear (a reindex from scratch) removes the table's rows only; the rebuild writes them again
    await be.clear(T)
    live = {k: d for k, d in live.items() if k[0] != T}
    assert lookup_rows(fresh_db) == expected(live)
    await write([doc("1", 1, ["b1:a"], source="shop-a"), doc("2", 1, ["b1:a"])])
    assert [c.record_id for c in await be.candidates(T, ["b1:a"], {}, exclude_source="shop-a")] == ["2"]


async def test_migration_0020_moves_the_keys_both_ways(fresh_db: str) -> None:
    """Documents written at head keep their keys through a downgrade to 0019 (back in
    ``documents.key_hashes``; tombstones and plain-sync documents without) and an upgrade again (the
    same lookup rows), and lookups find the same candidates before and after."""
    s = make_settings(fresh_db)
    upgrade(s)
    docs = [doc("1", 2, ["b1:a", "b2:b"], source="shop-a"), doc("2", 2, ["b1:a", "b2:b"], source="shop-b"),
            doc("3", 2, ["b1:a"], scope={"user": "7"}), doc("4", 2, []), doc("5", 2, ["b1:a"])]
    queries = [CandidateQuery(["b1:a", "b2:b"], {}, exclude_id="1"),
               CandidateQuery(["b1:a", "b2:b"], {}, exclude_source="shop-a")]

    async def found() -> list[list[tuple[str, int]]]:
        backend = PostgresBackend(fresh_db)  # fresh connections: no plan cached across the schema change
        await backend.open()
        try:
            return [[(c.record_id, c.matched) for c in x] for x in await backend.candidates_many(T, queries)]
        finally:
            await backend.close()

    backend = PostgresBackend(fresh_db)
    await backend.open()
    try:
        await backend.write(docs, [DeleteOp(T, "5", 3)])
    finally:
        await backend.close()
    before_rows = lookup_rows(fresh_db)
    before = await found()
    assert before_rows == expected({(T, d.record_id): d for d in docs[:4]})
    downgrade(s, "0019")
    with psycopg.connect(fresh_db, autocommit=True) as c:
        assert c.execute("SELECT to_regclass('nearsync.document_lookup')").fetchone() == (None,)
        rows = c.execute("SELECT record_id, key_hashes FROM nearsync.documents ORDER BY record_id").fetchall()
        indexes = {r[0] for r in c.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'documents'")}
    assert rows == [(d.record_id, sorted(key_hashes(T, d.scope, d.keys)) if d.keys else None) for d in docs[:4]] \
        + [("5", None)]  # 4: plain sync, 5: a tombstone
    assert {"documents_key_hashes", "documents_scope"} <= indexes
    upgrade(s)
    assert lookup_rows(fresh_db) == before_rows
    assert await found() == before
