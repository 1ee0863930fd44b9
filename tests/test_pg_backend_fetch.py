"""The PostgreSQL backend's candidate fetch against a real PostgreSQL: each distinct document comes
once per call and is shared by the lookups that found it, decoded documents are cached by
``(table, record_id, version)`` (a new version is a new entry, ``clear`` forgets the table), and the
batched lookups return exactly what one lookup each returns."""

from __future__ import annotations

from array import array
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import psycopg
import pytest

from daemon.backends.base import SCOPE_KEY, CandidateQuery, CandidateScreen, DeleteOp, IndexDocument
from daemon.backends.doc_cache import DocumentCache
from daemon.backends.postgres import PostgresBackend
from daemon.db import jsoncodec
from daemon.errors import ConfigError
from daemon.ops.migrate import upgrade
from tests.conftest import make_settings
from tests.test_search_backend import T, doc


@pytest.fixture
async def be(fresh_db: str) -> AsyncIterator[PostgresBackend]:
    upgrade(make_settings(fresh_db))
    backend = PostgresBackend(fresh_db)
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


def _parses(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record every JSON text the backend parses (its decoder calls jsoncodec.loads)."""
    seen: list[Any] = []
    real = jsoncodec.loads

    def counting(data: Any) -> Any:
        seen.append(bytes(data))
        return real(data)

    monkeypatch.setattr(jsoncodec, "loads", counting)
    return seen


def _key(c: Any) -> tuple[Any, ...]:
    d = c.document
    return (c.record_id, c.matched, d.version, d.fields, d.signature, d.scope, d.keys)


async def test_a_shared_candidate_is_one_object_decoded_once(be: PostgresBackend,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    await be.write([doc("1", 3, ["b1:a", "b2:b"]), doc("2", 3, ["b1:a", "b3:c"]), doc("3", 3, ["b2:b", "b3:c"])], [])
    parses = _parses(monkeypatch)
    found = await be.candidates_many(T, [CandidateQuery(["b1:a"], {}), CandidateQuery(["b1:a", "b2:b"], {}),
                                         CandidateQuery(["b3:c"], {}, exclude_id="3")])
    assert [[(c.record_id, c.matched) for c in x] for x in found] == [
        [("1", 1), ("2", 1)], [("1", 2), ("2", 1), ("3", 1)], [("2", 1)]]
    assert found[0][0].document is found[1][0].document  # "1", found by two lookups
    assert found[0][1].document is found[1][1].document is found[2][0].document  # "2", by three
    assert len(parses) == 3 * 4  # three documents, four JSON columns each: once per document
    assert found[1][0].document.signature["minhash"] == array("q", [1, 2, 3])  # the bigint[] columns are put back
    again = await be.candidates_many(T, [CandidateQuery(["b2:b"], {})])
    assert len(parses) == 12  # cached: nothing parsed again
    assert again[0][0].document is found[1][0].document
    got = await be.get(T, ["1", "3"])
    assert got["1"] is found[0][0].document and got["3"] is found[1][2].document and len(parses) == 12


async def test_a_new_version_is_a_new_entry_and_clear_forgets(be: PostgresBackend) -> None:
    await be.write([doc("1", 3, ["b1:a"], title="Old title"), doc("2", 3, ["b1:a"])], [])
    [[first]] = await be.candidates_many(T, [CandidateQuery(["b1:a"], {}, exclude_id="2")])
    assert first.document.fields["title"] == "Old title"
    await be.write([doc("1", 4, ["b1:a"], title="New title")], [])
    [[now]] = await be.candidates_many(T, [CandidateQuery(["b1:a"], {}, exclude_id="2")])
    assert (now.document.version, now.document.fields["title"]) == (4, "New title")
    assert (await be.get(T, ["1"]))["1"].fields["title"] == "New title"
    assert first.document.fields["title"] == "Old title"  # what a caller holds is never changed
    # After a clear the same version may come back with other content (a rebuild from scratch).
    await be.clear(T)
    await be.write([doc("1", 4, ["b1:a"], title="Rebuilt title"), doc("2", 3, ["b1:a"])], [])
    assert (await be.get(T, ["1"]))["1"].fields["title"] == "Rebuilt title"


async def test_get_reads_only_the_documents_not_held_at_their_current_version(
        be: PostgresBackend, fresh_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    await be.write([doc(str(i), 3, ["b1:a"], title=f"Title {i}") for i in range(1, 5)], [])
    first = await be.get(T, ["1", "2", "3"])
    parses = _parses(monkeypatch)
    await be.write([doc("2", 5, ["b1:a"], title="Title 2, edited")], [DeleteOp(T, "3", 6)])
    again = await be.get(T, ["1", "2", "3", "4", "9"])
    assert sorted(again) == ["1", "2", "4"]  # "3" deleted, "9" never written
    assert again["1"] is first["1"]  # held at its current version: reused, its JSON not even read
    assert (again["2"].version, again["2"].fields["title"]) == (5, "Title 2, edited")
    assert first["2"].fields["title"] == "Title 2"  # what a caller holds is never changed
    assert len(parses) == 2 * 4  # "2" (new version) and "4" (not held): four JSON columns each
    assert (await be.get(T, ["2"]))["2"] is again["2"] and len(parses) == 8
    small = PostgresBackend(fresh_db, cached_documents=1)  # "1" is dropped from the cache as "2" comes in
    await small.open()
    try:
        got = await small.get(T, ["1", "2"])
        assert (await small.get(T, ["1", "2"]))["2"] is got["2"] and len(parses) == 8 + 2 * 4 + 4
    finally:
        await small.close()


async def test_batched_lookups_equal_one_lookup_each(be: PostgresBackend) -> None:
    docs = [doc(str(i), 2, [f"b{i % 3}:x", f"b{i % 5}:y", f"s{i % 2}:z", SCOPE_KEY], scope={"user": str(i % 2)},
                source=f"shop{i % 3}", title=f"Red bike number {i % 4}")
            for i in range(1, 41)]
    await be.write(docs, [])
    queries = [CandidateQuery(d.keys, d.scope, d.record_id, f"shop{i % 3}" if i % 2 else None,
                              ("bike",) if i % 4 else ("car",))
               for i, d in enumerate(docs[:12])]
    for min_match, limit in ((1, 5), (2, 100), (1, 1)):
        many = await be.candidates_many(T, queries, min_match=min_match, limit=limit)
        one = [await be.candidates(T, q.keys, q.scope, min_match=min_match, limit=limit, exclude_id=q.exclude_id,
                                   exclude_source=q.exclude_source) for q in queries]
        assert [[_key(c) for c in x] for x in many] == [[_key(c) for c in x] for x in one]
        assert any(x for x in many) and (limit == 100 or any(len(x) == limit for x in many))
    # A member shares a title word with the lookup or at least min_match of its keys (the scope key aside).
    only_by = {"word": 0, "keys": 0}
    for min_match in (3, 2, 1):
        members = await be.scope_members(T, queries, limit=30, min_match=min_match)
        assert all(x is not None for x in members)
        for q, found in zip(queries, members, strict=True):
            assert found is not None
            by_word = {d.record_id for d in docs if set(d.signature["tokens"]) & set(q.tokens)}
            by_keys = {d.record_id for d in docs if len((set(d.keys) & set(q.keys)) - {SCOPE_KEY}) >= min_match}
            want = sorted(d.record_id for d in docs if d.scope == q.scope and d.record_id != q.exclude_id
                          and (q.exclude_source is None or d.fields["source"] != q.exclude_source)
                          and d.record_id in by_word | by_keys)
            assert [c.record_id for c in found] == want  # in record_id order, as PostgreSQL sorts them
            only_by["word"] += len(set(want) - by_keys)
            only_by["keys"] += len(set(want) - by_word)
    assert only_by["word"] > 0 and only_by["keys"] > 0  # each rule lets in members the other does not
    same_scope = [(i, j) for i in range(12) for j in range(12) if i < j and queries[i].scope == queries[j].scope]
    shared = [(i, j) for i, j in same_scope
              if members[i] and members[j] and {c.record_id for c in members[i]} & {c.record_id for c in members[j]}]
    i, j = shared[0]
    rid = next(c.record_id for c in members[i] if c.record_id in {x.record_id for x in members[j]})
    assert next(c.document for c in members[i] if c.record_id == rid) is \
        next(c.document for c in members[j] if c.record_id == rid)  # one object per member per call
    assert await be.scope_members(T, queries[:2], limit=3) == [None, None]  # 20 documents per scope


async def test_a_screen_reads_only_the_candidates_it_keeps_whole(be: PostgresBackend, fresh_db: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With a CandidateScreen, on an index larger than the document cache (where it pays), the
    same candidates come in the same order; a candidate whose
    document the cache does not hold is read in part (the screen's keys only) and read whole only
    when some lookup's keep asks for it; the partial ones are flagged, counted and kept in a part
    cache of their own (never in the document cache), and a cached document is used as it is,
    without asking the screen. A part comes from the identifiers column (migration 0022) alone when
    it holds every one of the screen's signature keys, else from the fields and signature."""
    models = {"1": ["fs105"], "2": ["fs108"], "3": ["gs105"], "4": []}
    docs = [doc(rid, 3, ["b1:a", "b2:b"] if rid != "4" else ["b1:a"], title=f"Switch {m[0] if m else ''}")
            for rid, m in models.items()]
    for d in docs:
        d.signature.update(models=models[d.record_id], title_codes=models[d.record_id])
    await be.write(docs, [])
    queries = [CandidateQuery(["b1:a", "b2:b"], {}, exclude_id="1"), CandidateQuery(["b1:a"], {}, exclude_id="4")]
    plain = await be.candidates_many(T, queries)
    screened0 = be.screened
    assert [[c.document.partial for c in x] for x in await be.candidates_many(T, queries, screen=CandidateScreen(
        ("title",), ("models",), lambda i, part: False))] == [[False] * 3] * 2  # all cached: nothing to screen
    be._cache = DocumentCache(100)  # forget what the plain lookup cached: the index fits in the cache...
    assert [[c.document.partial for c in x] for x in await be.candidates_many(T, queries, screen=CandidateScreen(
        ("title",), ("models",), lambda i, part: False))] == [[False] * 3] * 2  # ...where the screen does not pay
    assert be.screened == screened0
    be._cache = DocumentCache(3)  # an index of 4 documents is larger than this cache: the screen pays
    be._screen_checked.clear()
    asked: list[tuple[int, str, dict[str, Any], dict[str, Any]]] = []

    def keep(i: int, part: IndexDocument) -> bool:
        assert part.partial and not part.keys and not part.scope
        asked.append((i, part.record_id, part.fields, part.signature))
        return part.signature.get("models") == ["fs108"] or (i == 1 and part.record_id == "3")

    parses = _parses(monkeypatch)
    screen = CandidateScreen(("title", "models"), ("models", "title_codes"), keep)
    got = await be.candidates_many(T, queries, screen=screen)
    assert [[(c.record_id, c.matched, c.document.version) for c in x] for x in got] == \
        [[(c.record_id, c.matched, c.document.version) for c in x] for x in plain]
    whole = {c.record_id for x in got for c in x if not c.document.partial}
    assert whole == {"2", "3"}  # "2" kept by its model number, "3" by the second lookup alone
    # the identifiers column holds both signature keys: no field is read (a screen reads one only in
    # place of a missing signature key)
    assert {c.record_id: c.document for x in got for c in x if c.document.partial} == {
        "1": IndexDocument(T, "1", 3, {}, signature={"models": ["fs105"], "title_codes": ["fs105"]}, partial=True),
        "4": IndexDocument(T, "4", 3, {}, signature={"models": [], "title_codes": []}, partial=True)}
    # a candidate some lookup needs is not asked about again
    assert [(i, rid) for i, rid, _, _ in asked] == [(0, "2"), (0, "3"), (0, "4"), (1, "1"), (1, "3")]
    assert be.screened - screened0 == 4 == be.screened_listed  # four candidates not cached, each read in part once
    assert len(parses) == 4 * 1 + 2 * 4  # their identifiers; the two kept ones' four columns
    assert (await be.get(T, ["2"]))["2"] is next(c for c in got[0] if c.record_id == "2").document  # cached
    asked.clear()
    again = await be.candidates_many(T, queries[:1], screen=screen)  # "2" and "3" cached now: not asked
    assert [rid for _, rid, _, _ in asked] == ["4"] and not next(c for c in again[0] if c.record_id == "2").document.partial
    assert be.screened - screened0 == 4 and len(parses) == 12  # "4"'s part came from the part cache
    other = CandidateScreen(("title",), ("models",), keep)  # other keys: the part cache starts again
    await be.candidates_many(T, queries[:1], screen=other)
    assert be.screened - screened0 == 5 and asked[-1][1:] == ("4", {}, {"models": []})

    # Documents stored before migration 0022 (no identifiers), and one whose signature has no
    # title_codes (signed before they existed): their parts come from the fields and signature, as the
    # screen's keys name them, and keep sees what it saw before.
    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as c:
        await c.execute("UPDATE nearsync.documents SET identifiers = NULL WHERE record_id IN ('1', '3')")
    old = doc("4", 4, ["b1:a"], title="Switch gs108")
    old.signature.update(models=["gs108"])
    await be.write([old], [])
    be._cache, be._part_cache, listed0 = DocumentCache(3), DocumentCache(3), be.screened_listed
    asked.clear()
    await be.candidates_many(T, queries[1:], screen=screen)
    assert sorted((rid, f, sig) for _, rid, f, sig in asked) == [
        ("1", {"title": "Switch fs105"}, {"models": ["fs105"], "title_codes": ["fs105"]}),
        ("2", {}, {"models": ["fs108"], "title_codes": ["fs108"]}),
        ("3", {"title": "Switch gs105"}, {"models": ["gs105"], "title_codes": ["gs105"]})]
    asked.clear()
    await be.candidates_many(T, [CandidateQuery(["b1:a"], {}, exclude_id="1")], screen=screen)
    assert ("4", {"title": "Switch gs108"}, {"models": ["gs108"]}) in [a[1:] for a in asked]
    assert be.screened_listed - listed0 == 1  # "2" alone had every key in its identifiers


async def test_a_scope_without_members_and_no_lookups(be: PostgresBackend) -> None:
    await be.write([doc("1", 2, ["b1:a", SCOPE_KEY], scope={"user": "7"})], [])
    assert await be.scope_members(T, [CandidateQuery([], {"user": "7"}, exclude_id="1"),
                                      CandidateQuery([], {"user": "8"})], limit=5) == [[], []]
    assert await be.candidates_many(T, []) == []
    assert await be.candidates_many(T, [CandidateQuery(["zz"], {})]) == [[]]


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    cache = DocumentCache(2)
    a, b, c = (IndexDocument(T, rid, 1, {}) for rid in "abc")
    cache.put((T, "a", 1), a)
    cache.put((T, "b", 1), b)
    assert cache.get((T, "a", 1)) is a  # "a" is now the most recently used
    cache.put((T, "c", 1), c)
    assert (cache.get((T, "b", 1)), cache.get((T, "a", 1)), cache.get((T, "c", 1))) == (None, a, c)
    assert len(cache) == 2 and (cache.hits, cache.misses) == (3, 1)
    cache.drop_table(T)
    assert len(cache) == 0
    off = DocumentCache(0)
    off.put((T, "a", 1), a)
    assert off.get((T, "a", 1)) is None
    with pytest.raises(ValueError):
        DocumentCache(-1)


@pytest.mark.parametrize("bad", [-1, "many", 1.5, True])
def test_cached_documents_option_is_validated(bad: Any) -> None:
    with pytest.raises(ConfigError, match="index.cached_documents"):
        PostgresBackend("postgresql://unused", cached_documents=bad)


async def test_bulk_writes_bring_the_planners_view_up_to_date(be: PostgresBackend, fresh_db: str) -> None:
    """After ANALYZE_FIRST_AT documents written, the backend has analysed the index table (the
    planner's row count is the real one, not "never analysed") and merged the key index's pending
    list; its pooled sessions plan with the parameter values (daemon.db.pool.PlanModeCursor, whose
    rule tests/test_pgpool.py reads from executed plans: only the calls of queries marked
    ``-- plan: generic`` with short arrays run from generic plans, not these writes)."""
    import psycopg

    from daemon.backends.base import PlannerStatistics
    from daemon.backends.postgres import ANALYZE_FIRST_AT
    from daemon.db.pool import PlanModeCursor

    assert isinstance(be, PlannerStatistics)
    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as conn:
        reltuples = "SELECT reltuples::bigint FROM pg_class WHERE oid = 'nearsync.documents'::regclass"
        assert (await (await conn.execute(reltuples)).fetchone())[0] <= 0  # type: ignore[index]
        n = ANALYZE_FIRST_AT + 50
        await be.write([doc(str(i), 1, [f"b1:{i % 7}", f"b2:{i}"]) for i in range(n)], [])
        assert (await (await conn.execute(reltuples)).fetchone())[0] == n  # type: ignore[index]
        merged = "SELECT gin_clean_pending_list('nearsync.document_lookup_key_hashes'::regclass)"
        assert (await (await conn.execute(merged)).fetchone())[0] == 0  # type: ignore[index]
        await be.write([doc("x", 1, ["b1:x"])], [])  # below the next step: no refresh, the entry stays pending
        assert (await (await conn.execute(merged)).fetchone())[0] == 1  # type: ignore[index]
    async with be._pool.connection() as conn:
        assert conn.cursor_factory is PlanModeCursor
        assert (await (await conn.execute("SHOW plan_cache_mode")).fetchone())[0] == "force_custom_plan"  # type: ignore[index]


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of an ``EXPLAIN (FORMAT JSON)`` plan tree, depth first."""
    return [plan] + [n for child in plan.get("Plans", []) for n in _plan_nodes(child)]


async def test_a_large_scopes_count_stops_early_through_the_scope_index(be: PostgresBackend, fresh_db: str) -> None:
    """Migration 0017 (0020: on the lookup table): ``scope_members`` counts a scope's documents through
    the ``document_lookup_scope`` btree index, which stops after ``limit + 1`` of them, instead of reading the scope's whole GIN
    posting list (a global scope: every document of the table). The large scope is reported as such
    and the small one's members are found as before."""
    import psycopg
    from psycopg import sql

    from daemon.backends.postgres import scope_members_params
    from daemon.db.pool import configure_session
    from daemon.db.queries import query

    big = [doc(str(i), 1, [f"b1:{i % 9}", SCOPE_KEY]) for i in range(1200)]
    small = [doc(f"u{i}", 1, [f"b1:{i}", SCOPE_KEY], scope={"user": "7"}) for i in range(5)]
    await be.write(big + small, [])
    queries = [CandidateQuery([], {}, exclude_id="3"), CandidateQuery([], {"user": "7"}, exclude_id="u0")]
    found = await be.scope_members(T, queries, limit=199)
    assert found[0] is None
    assert found[1] is not None and [c.record_id for c in found[1]] == ["u1", "u2", "u3", "u4"]
    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as conn:
        await configure_session(conn)  # as the backend's pooled sessions are set up
        cur = await conn.execute(sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + query("scope_members"),
                                 scope_members_params(T, queries, limit=199))
        plan = (await cur.fetchone())[0][0]["Plan"]  # type: ignore[index]
    nodes = _plan_nodes(plan)
    assert any(n.get("Index Name") == "document_lookup_scope" and n["Node Type"] == "Index Scan" for n in nodes), \
        "the count does not scan the scope index"
    read = [n["Actual Rows"] * n["Actual Loops"] for n in nodes
            if n.get("Index Name") in ("document_lookup_scope", "document_lookup_key_hashes")]
    assert max(read) <= 2 * 200, f"a scan read {max(read)} index entries: the large scope was read whole"  # limit + 1 per scope


async def test_sketches_are_read_as_int64_arrays_and_written_back_unchanged(be: PostgresBackend) -> None:
    """``bottomk`` and ``minhash`` come back as ``array('q')`` with every value (the int64 extremes
    included) in order; the scorer's numpy view of the MinHash shares its memory; a document read
    and written again (as a rebuild does) stores the same arrays."""
    extremes = [-(2**63), -1, 0, 1, 2**63 - 1]
    original = doc("1", 3, ["b1:a"])
    original.signature |= {"minhash": extremes, "bottomk": []}
    await be.write([original], [])
    got = (await be.get(T, ["1"]))["1"]
    assert got.signature["minhash"] == array("q", extremes) and list(got.signature["minhash"]) == extremes
    assert got.signature["bottomk"] == array("q")
    view = np.asarray(got.signature["minhash"], dtype=np.int64)
    assert np.shares_memory(view, got.signature["minhash"]) and view.tolist() == extremes
    again = IndexDocument(table=T, record_id="2", version=4, fields=got.fields, scope=got.scope, keys=got.keys,
                          signature=got.signature)
    await be.write([again], [])
    back = (await be.get(T, ["2"]))["2"]
    assert (back.signature, back.keys, back.fields) == (got.signature, got.keys, got.fields)
