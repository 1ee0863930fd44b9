"""The index protocol against real servers: osmem-server (both search clients) and PostgreSQL.

Parametrised by ``backend_name`` (``tests/conftest.py``: postgres, opensearch, elasticsearch). Search
backends talk to the session osmem-server (``search_url``); tests call ``refresh`` wherever a real
cluster would need it, and never rely on osmem's differences (writes visible before refresh,
more_like_this returning the liked document).

What the server does with external versions and deletes (asserted below): a delete with version V
leaves a tombstone, so an older upsert afterwards is rejected (STALE) while a newer one is applied.
Elasticsearch/OpenSearch keep tombstones for ``index.gc_deletes`` (60 s) only; osmem keeps them for
the life of the index; PostgreSQL keeps them as rows until ``clear``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest

from daemon.backends.base import DeleteOp, IndexBackend, IndexDocument, Outcome, TransientIndexError

try:
    from daemon.backends.factory import create_search_backend
    from daemon.backends.search import SearchBackend
    from tests.search_server import TcpProxy, allow_es_client_against_osmem
except ImportError:  # pragma: no cover - search backend not installed
    pytest.skip("search backend unavailable", allow_module_level=True)

T = "public.ads"
SEARCH = ("elasticsearch", "opensearch")


def doc(rid: str, version: int, keys: list[str], *, scope: dict[str, str] | None = None,
        table: str = T, **fields: Any) -> IndexDocument:
    """A realistic document (fields by role, signature shaped like ``Signature.to_document()``)."""
    f: dict[str, Any] = {"title": f"Red bike {rid}", "body": "Almost new, with lights.", "price": 120.5,
                         "lat": 48.85, "lon": 2.35, "user": "42", "category": "bikes",
                         "created_at": "2024-05-01T10:00:00+00:00"}
    f.update(fields)
    sig = {"v": 1, "params": "p1", "simhash": -1234567890123, "minhash": [1, 2, 3], "bottomk": [4, 5],
           "bands": [k for k in keys if k.startswith("b")], "blocks": [k for k in keys if k.startswith("s")],
           "geo": ["u09t"], "super": [], "models": [], "phones": [], "emails": [], "tokens": ["red", "bike"],
           "text": "red bike almost new"}
    return IndexDocument(table=table, record_id=rid, version=version, fields=f, scope=scope or {}, keys=keys,
                         signature=sig)


async def settle(be: IndexBackend) -> None:
    """Make writes visible where a real cluster needs a refresh."""
    refresh = getattr(be, "refresh", None)
    if refresh is not None:
        await refresh()


def search_options(url: str, **kw: Any) -> dict[str, Any]:
    """Options for a search backend on a fresh alias, its candidate keys in the search index (the
    search backend class itself: what these tests exercise)."""
    return {"url": url, "index": "t" + uuid.uuid4().hex[:10], "candidate_store": "search", **kw}


@pytest.fixture
async def backend(backend_name: str, request: pytest.FixtureRequest) -> AsyncIterator[IndexBackend]:
    """An opened backend of the parametrised kind on a fresh index/database."""
    if backend_name in SEARCH:
        url = request.getfixturevalue("search_url")
        if url is None:
            pytest.skip("no osmem-server")
        allow_es_client_against_osmem()
        be: IndexBackend = create_search_backend(backend_name, search_options(url))
    else:
        from daemon.backends.factory import create_backend
        from daemon.ops.migrate import upgrade
        from tests.conftest import PG_CANDIDATES, index_settings, make_settings

        index = index_settings(backend_name)
        if backend_name == PG_CANDIDATES:
            allow_es_client_against_osmem()
            index = search_options(request.getfixturevalue("search_url")) | index  # its candidate_store wins
        s = make_settings(request.getfixturevalue("fresh_db"), index=index)
        upgrade(s)
        be = create_backend(s)
    await be.open()
    yield be
    await be.close()


@pytest.fixture
def search_backend_name(backend_name: str) -> str:
    """``backend_name``, skipping postgres (for search-only behaviour)."""
    if backend_name not in SEARCH:
        pytest.skip("search backends only")
    return backend_name


@pytest.fixture
def search_proxy(search_url: str | None) -> Iterator[TcpProxy]:
    """A fault-injecting TCP proxy to the session osmem-server."""
    if search_url is None:
        pytest.skip("no osmem-server")
    proxy = TcpProxy.to_url(search_url)
    yield proxy
    proxy.close()


# -- protocol, all backends ---------------------------------------------------------------------


async def test_upsert_get_count_iter(backend: IndexBackend) -> None:
    docs = [doc(str(i), 10 + i, ["b1:aa", f"s1:{i}"], scope={"user": "42"}) for i in range(3)]
    res = await backend.write(docs, [])
    assert res.outcomes == {(T, d.record_id): Outcome.APPLIED for d in docs} and not res.errors
    await settle(backend)
    got = await backend.get(T, ["0", "1", "2", "missing"])
    assert sorted(got) == ["0", "1", "2"]
    for d in docs:
        g = got[d.record_id]
        assert (g.table, g.version, g.fields, g.scope, g.keys, g.signature) == \
            (d.table, d.version, d.fields, d.scope, d.keys, d.signature)
    assert await backend.count(T) == 3
    assert await backend.count("public.other") == 0
    assert sorted([x async for x in backend.iter_versions(T)]) == [("0", 10), ("1", 11), ("2", 12)]


async def test_get_sketches_and_versions_return_no_content(backend: IndexBackend) -> None:
    docs = [doc("a", 7, ["b1:aa"]), doc("b", 9, ["b1:aa"])]
    docs[0].signature["bottomk"] = [3, 17, 2**62 + 5]
    await backend.write(docs, [])
    await backend.write([], [DeleteOp(T, "b", 10)])
    await settle(backend)
    got = await backend.get_sketches(T, ["a", "b", "missing", "a"])
    assert got == {"a": (7, (3, 17, 2**62 + 5))}
    assert await backend.get_versions(T, ["b", "a", "missing"]) == {"a": 7}
    docs[0].signature.pop("bottomk")
    await backend.write([IndexDocument(T, "a", 8, docs[0].fields, docs[0].scope, docs[0].keys, docs[0].signature)], [])
    await settle(backend)
    assert await backend.get_sketches(T, ["a"]) == {"a": (8, ())}


async def test_postgres_keeps_the_sketch_apart_and_reads_older_rows(backend_name: str, backend: IndexBackend,
                                                                     fresh_db: str) -> None:
    """PostgreSQL stores the bottom-k sketch in its own column (migration 0007); a row written
    before it (sketch inside the signature) reads the same through get and get_sketches."""
    if backend_name != "postgres":
        pytest.skip("postgres layout")
    d = doc("a", 7, ["b1:aa"])
    d.signature["bottomk"] = [3, 17, 2**62 + 5]
    await backend.write([d], [])
    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as c:
        row = await (await c.execute("SELECT bottomk, signature ? 'bottomk' FROM nearsync.documents")).fetchone()
        assert row == ([3, 17, 2**62 + 5], False)
        await c.execute("UPDATE nearsync.documents SET signature = signature || "
                        "jsonb_build_object('bottomk', to_jsonb(bottomk)), bottomk = NULL")
    assert await backend.get_sketches(T, ["a"]) == {"a": (7, (3, 17, 2**62 + 5))}
    assert (await backend.get(T, ["a"]))["a"].signature == d.signature


async def test_postgres_keeps_the_minhash_apart_and_reads_older_rows(backend_name: str, backend: IndexBackend,
                                                                      fresh_db: str) -> None:
    """PostgreSQL stores the MinHash in its own column (migration 0009); a row written before it
    (MinHash inside the signature) reads the same, and a MinHash that is not a list of int64 stays in
    the signature as it was given."""
    if backend_name != "postgres":
        pytest.skip("postgres layout")
    d, odd = doc("a", 7, ["b1:aa"]), doc("b", 7, ["b1:aa"])
    d.signature["minhash"] = [0, 2**61 - 1, -(2**63), 2**63 - 1]
    odd.signature["minhash"] = [1, 2**64]
    await backend.write([d, odd], [])
    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as c:
        rows = await (await c.execute("SELECT record_id, minhash, signature ? 'minhash' FROM nearsync.documents "
                                      "ORDER BY record_id")).fetchall()
        assert rows == [("a", [0, 2**61 - 1, -(2**63), 2**63 - 1], False), ("b", None, True)]
    got = await backend.get(T, ["a", "b"])
    assert got["a"].signature == d.signature and got["b"].signature == odd.signature
    cands = await backend.candidates(T, ["b1:aa"], {}, exclude_id="b")
    assert [c.document.signature for c in cands] == [d.signature]
    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as c:
        await c.execute("UPDATE nearsync.documents SET signature = signature || "
                        "jsonb_build_object('minhash', to_jsonb(minhash)), minhash = NULL WHERE minhash IS NOT NULL")
    assert (await backend.get(T, ["a"]))["a"].signature == d.signature


async def test_stale_version_keeps_newer(backend: IndexBackend) -> None:
    assert (await backend.write([doc("1", 10, ["b1:x"], title="new")], [])).outcomes[(T, "1")] is Outcome.APPLIED
    res = await backend.write([doc("1", 5, ["b1:x"], title="old")], [])
    assert res.outcomes[(T, "1")] is Outcome.STALE and not res.errors
    replay = await backend.write([doc("1", 10, ["b1:x"], title="new")], [])
    assert replay.outcomes[(T, "1")] is Outcome.STALE  # idempotent replay
    await settle(backend)
    got = (await backend.get(T, ["1"]))["1"]
    assert (got.version, got.fields["title"]) == (10, "new")


async def test_delete_tombstone_rejects_older_upsert(backend: IndexBackend) -> None:
    await backend.write([doc("1", 10, ["b1:x"])], [])
    res = await backend.write([], [DeleteOp(T, "1", 20), DeleteOp(T, "never", 7)])
    assert res.outcomes == {(T, "1"): Outcome.APPLIED, (T, "never"): Outcome.APPLIED}
    await settle(backend)
    assert await backend.get(T, ["1"]) == {} and await backend.count(T) == 0
    older = await backend.write([doc("1", 15, ["b1:x"]), doc("never", 6, ["b1:x"])], [])
    assert older.outcomes == {(T, "1"): Outcome.STALE, (T, "never"): Outcome.STALE}
    assert (await backend.write([], [DeleteOp(T, "1", 19)])).outcomes[(T, "1")] is Outcome.STALE
    newer = await backend.write([doc("1", 25, ["b1:x"], title="back")], [])
    assert newer.outcomes[(T, "1")] is Outcome.APPLIED
    await settle(backend)
    assert (await backend.get(T, ["1"]))["1"].fields["title"] == "back"


async def test_candidates_min_match_scope_exclude(backend: IndexBackend) -> None:
    u1, u2 = {"user": "1"}, {"user": "2"}
    await backend.write([
        doc("q", 1, ["b1:a", "b2:b", "s1:c"], scope=u1),
        doc("three", 1, ["b1:a", "b2:b", "s1:c", "s9:z"], scope=u1),
        doc("two", 1, ["b1:a", "s1:c"], scope=u1),
        doc("one", 1, ["b2:b"], scope=u1),
        doc("other_scope", 1, ["b1:a", "b2:b", "s1:c"], scope=u2),
        doc("global", 1, ["b1:a", "b2:b", "s1:c"], scope={}),
        doc("other_table", 1, ["b1:a", "b2:b", "s1:c"], scope=u1, table="public.shops"),
    ], [])
    await settle(backend)
    keys = ["b1:a", "b2:b", "s1:c"]
    cands = await backend.candidates(T, keys, u1, min_match=2, exclude_id="q")
    assert [(c.record_id, c.matched) for c in cands] == [("three", 3), ("two", 2)]
    assert cands[0].document.keys == ["b1:a", "b2:b", "s1:c", "s9:z"] and cands[0].document.scope == u1
    everyone = await backend.candidates(T, keys, u1, min_match=1, exclude_id="q")
    assert [(c.record_id, c.matched) for c in everyone] == [("three", 3), ("two", 2), ("one", 1)]
    assert [c.record_id for c in await backend.candidates(T, keys, u1, min_match=1, limit=1)] in (["q"], ["three"])
    assert [c.record_id for c in await backend.candidates(T, keys, {}, min_match=3)] == ["global"]
    assert await backend.candidates(T, [], u1) == []


async def test_candidates_many_equals_one_lookup_each(backend: IndexBackend) -> None:
    """The batch lookup the dedup worker uses gives, per query, what ``candidates`` gives."""
    from daemon.backends.base import CandidateQuery

    u1, u2 = {"user": "1"}, {"user": "2"}
    docs = [doc(str(i), 1, [f"b1:{i % 3}", f"b2:{i % 4}", "s1:all"], scope=u1 if i % 2 else u2) for i in range(24)]
    await backend.write(docs + [doc("deleted", 1, ["b1:0", "b2:0", "s1:all"], scope=u1)], [])
    await backend.write([], [DeleteOp(T, "deleted", 2)])
    await settle(backend)
    queries = [CandidateQuery(d.keys, d.scope, d.record_id) for d in docs[:8]]
    queries += [CandidateQuery(["b1:0", "s1:all"], u1), CandidateQuery([], u1), CandidateQuery(["zz"], u2)]
    for min_match, limit in ((1, 100), (2, 3), (3, 100)):
        many = await backend.candidates_many(T, queries, min_match=min_match, limit=limit)
        assert len(many) == len(queries)
        for q, got in zip(queries, many, strict=True):
            one = await backend.candidates(T, q.keys, q.scope, min_match=min_match, limit=limit, exclude_id=q.exclude_id)
            assert [(c.record_id, c.matched) for c in got] == [(c.record_id, c.matched) for c in one]
            assert all(c.document.record_id == c.record_id and c.document.scope == q.scope for c in got)
            assert q.exclude_id is None or q.exclude_id not in {c.record_id for c in got}
    everyone = (await backend.candidates_many(T, queries, min_match=1, limit=100))[8]
    assert len(everyone) == 12 and "deleted" not in {c.record_id for c in everyone}
    assert await backend.candidates_many(T, [], min_match=1) == []


async def test_excluded_source_is_left_out_before_the_limit(backend: IndexBackend) -> None:
    """Clean-clean matching (``dedup.cross_source_only``): the lookup drops the record's own source
    before ``limit`` applies, so many same-source hits cannot crowd out the other source."""
    from daemon.backends.base import CandidateQuery

    keys = ["b1:a", "b2:b", "s1:c"]
    same = [doc(f"abt{i}", 1, keys, source="abt") for i in range(6)]  # best matches, same source
    other = [doc("buy1", 1, keys[:2], source="buy"), doc("buy2", 1, keys[:1], source="buy"),
             doc("nosource", 1, keys[:1])]
    await backend.write(same + other, [])
    await settle(backend)
    top = await backend.candidates(T, keys, {}, limit=3, exclude_id="abt0")
    assert {c.record_id for c in top} <= {d.record_id for d in same}  # without the filter: crowded out
    got = await backend.candidates(T, keys, {}, limit=3, exclude_id="abt0", exclude_source="abt")
    assert [(c.record_id, c.matched) for c in got][:1] == [("buy1", 2)]
    assert {c.record_id for c in got} == {"buy1", "buy2", "nosource"}
    many = await backend.candidates_many(T, [CandidateQuery(keys, {}, "abt0", "abt"), CandidateQuery(keys, {}, "buy1", "buy"),
                                             CandidateQuery(keys, {}, "abt0")], limit=3)
    assert [c.record_id for c in many[0]] == [c.record_id for c in got]
    assert {c.record_id for c in many[1]} <= {d.record_id for d in same} | {"nosource"} and len(many[1]) == 3
    assert "buy2" not in {c.record_id for c in many[1]}
    assert [c.record_id for c in many[2]] == [c.record_id for c in top]


async def test_clear_removes_table_only(backend: IndexBackend) -> None:
    await backend.write([doc("1", 1, ["b1:a"]), doc("2", 1, ["b1:a"], table="public.shops")], [])
    await settle(backend)
    await backend.clear(T)
    await settle(backend)
    assert await backend.count(T) == 0 and await backend.count("public.shops") == 1


# -- search backends only -----------------------------------------------------------------------


@pytest.fixture
async def sbackend(search_backend_name: str, backend: SearchBackend) -> SearchBackend:
    """The parametrised backend when it is a search backend."""
    return backend


async def test_mapping_error_fails_one_record(sbackend: SearchBackend) -> None:
    docs = [doc("ok1", 3, ["b1:a"]), doc("bad", 3, ["b1:a"], price="not a number"), doc("ok2", 3, ["b1:a"])]
    res = await sbackend.write(docs, [DeleteOp(T, "gone", 3)])
    assert res.outcomes == {(T, "ok1"): Outcome.APPLIED, (T, "bad"): Outcome.FAILED, (T, "ok2"): Outcome.APPLIED,
                            (T, "gone"): Outcome.APPLIED}
    assert set(res.errors) == {(T, "bad")} and "price" in res.errors[(T, "bad")]
    nan = await sbackend.write([doc("nan", 3, ["b1:a"], price=float("nan"))], [])
    assert nan.outcomes[(T, "nan")] is Outcome.FAILED and "serialis" in nan.errors[(T, "nan")]
    await sbackend.refresh()
    assert sorted(await sbackend.get(T, ["ok1", "bad", "ok2", "nan"])) == ["ok1", "ok2"]


async def test_strict_template_mappings(sbackend: SearchBackend) -> None:
    live = (await sbackend.client.request("GET", f"/_alias/{sbackend.alias}")).popitem()[0]
    assert live == f"{sbackend.alias}_v1"
    m = (await sbackend.client.request("GET", f"/{live}/_mapping"))[live]["mappings"]
    p = m["properties"]
    assert m["dynamic"] == "strict"
    assert {p[k]["type"] for k in ("keys", "table", "record_id", "scope_user", "scope_group",
                                   "scope_category")} == {"keyword"}
    assert not {"sig_bands", "sig_blocks", "sig_super"} & set(p)  # one indexed copy of each candidate key
    assert not {"simhash", "sig_version"} & set(p)  # never queried: scoring reads them from `signature`
    assert p["location"]["type"] == "geo_point"
    assert p["price"]["type"] == "scaled_float" and float(p["price"]["scaling_factor"]) == 100
    assert p["title"]["type"] == "text" and p["signature"]["enabled"] is False


async def test_bulk_chunking_and_msearch(search_backend_name: str, search_url: str) -> None:
    be = create_search_backend(search_backend_name, search_options(search_url, bulk_docs=7, bulk_bytes=4096, msearch_size=2))
    await be.open()
    try:
        docs = [doc(str(i), 1, [f"b1:{i % 5}", "s1:all"], scope={"user": str(i % 2)}) for i in range(60)]
        res = await be.write(docs, [])
        assert set(res.outcomes.values()) == {Outcome.APPLIED} and len(res.outcomes) == 60
        await be.refresh()
        assert await be.count(T) == 60
        from daemon.backends.base import CandidateQuery

        qs = [CandidateQuery(["b1:1", "s1:all"], {"user": "1"}, "1"), CandidateQuery(["b1:0"], {"user": "0"}),
              CandidateQuery([], {})]
        many = await be.candidates_many(T, qs, min_match=2, limit=100)
        one = await be.candidates(T, ["b1:1", "s1:all"], {"user": "1"}, min_match=2, exclude_id="1")
        assert [c.record_id for c in many[0]] == [c.record_id for c in one] and len(one) == 5
        assert many[1] == [] and many[2] == []  # min_match=2 with one key; no keys
        assert {c.record_id for c in await be.candidates(T, ["b1:0"], {"user": "0"})} == \
            {str(i) for i in range(0, 60, 10)}
    finally:
        await be.close()


async def test_more_like_this_option(search_backend_name: str, search_url: str) -> None:
    be = create_search_backend(search_backend_name, search_options(search_url, more_like_this=True))
    await be.open()
    try:
        await be.write([doc("q", 1, ["b1:a"], title="vintage leather sofa"),
                        doc("sofa", 1, ["b1:a"], title="leather sofa vintage brown"),
                        doc("lamp", 1, ["b1:a"], title="desk lamp")], [])
        await be.refresh()
        cands = await be.candidates(T, ["b1:a"], {}, exclude_id="q")
        assert {c.record_id for c in cands} == {"sofa", "lamp"} and all(c.matched == 1 for c in cands)
    finally:
        await be.close()


async def test_unreachable_is_transient_then_recovers(search_backend_name: str, search_proxy: TcpProxy) -> None:
    be = create_search_backend(search_backend_name, search_options(search_proxy.url, timeout_s=1.0))
    await be.open()
    try:
        search_proxy.set_mode("refuse")
        with pytest.raises(TransientIndexError):
            await be.write([doc("1", 1, ["b1:a"])], [])
        with pytest.raises(TransientIndexError):
            await be.count(T)
        search_proxy.set_mode("blackhole")
        with pytest.raises(TransientIndexError):
            await be.candidates(T, ["b1:a"], {})
        search_proxy.set_mode("forward")
        res = await be.write([doc("1", 1, ["b1:a"])], [])
        assert res.outcomes[(T, "1")] is Outcome.APPLIED
        await be.refresh()
        assert await be.count(T) == 1
    finally:
        await be.close()


async def test_alias_swap_atomic_and_prune(sbackend: SearchBackend) -> None:
    from daemon.backends import search_admin as A

    c, alias = sbackend.client, sbackend.alias
    await sbackend.write([doc(str(i), 1, ["b1:a"]) for i in range(20)], [])
    await sbackend.refresh()
    new = await A.create_next_version(c, alias)
    assert new == f"{alias}_v2"
    other = create_search_backend(sbackend.name, {"url": sbackend.options.urls[0], "index": alias})
    other.set_extra_write_targets([new])  # load the new version through dual write
    await other.write([doc(str(i), 2, ["b1:a"]) for i in range(20)], [])
    await other.refresh()
    await other.close()
    assert (await c.request("POST", f"/{new}/_count"))["count"] == 20

    stop = asyncio.Event()
    seen: list[int] = []

    async def reader() -> None:
        while not stop.is_set():
            seen.append(len(await sbackend.candidates(T, ["b1:a"], {}, limit=50)))
            await asyncio.sleep(0)

    task = asyncio.create_task(reader())
    await asyncio.sleep(0.05)
    assert await A.swap_alias(c, alias, new) == [f"{alias}_v1"]
    await asyncio.sleep(0.05)
    stop.set()
    await task
    assert seen and set(seen) == {20}
    assert {v for _, v in [x async for x in sbackend.iter_versions(T)]} == {2}
    assert [(v.name, v.live) for v in await A.list_versions(c, alias)] == [(f"{alias}_v1", False), (new, True)]
    v3 = await A.create_next_version(c, alias)
    assert await A.prune_versions(c, alias, keep=2) == [f"{alias}_v1"]
    assert [v.name for v in await A.list_versions(c, alias)] == [new, v3]
    assert await A.prune_versions(c, alias, keep=1) == []  # v2 is live, v3 newest


async def test_rebuild_dual_write_via_next_alias(sbackend: SearchBackend) -> None:
    from daemon.backends import search_admin as A

    c, alias = sbackend.client, sbackend.alias
    await sbackend.write([doc("old", 1, ["b1:a"])], [])
    new = await A.begin_rebuild(c, alias)
    assert await sbackend.refresh_write_targets() == (new,)
    res = await sbackend.write([doc("live", 5, ["b1:a"])], [DeleteOp(T, "old", 6)])
    assert set(res.outcomes.values()) == {Outcome.APPLIED}
    stale = await sbackend.write([doc("live", 4, ["b1:a"])], [])
    assert stale.outcomes[(T, "live")] is Outcome.STALE
    await sbackend.refresh()
    assert (await c.request("GET", f"/{new}/_doc/{T}:live"))["_version"] == 5
    assert await A.finish_rebuild(c, alias, new) == [f"{alias}_v1"]
    assert await sbackend.refresh_write_targets() == ()
    assert sorted(await sbackend.get(T, ["live", "old"])) == ["live"]
    assert await A.alias_indices(c, A.next_alias(alias)) == []


# -- options and secrets (no server needed) -----------------------------------------------------


@pytest.mark.parametrize(("options", "key"), [
    ({"url": 5}, "index.url"),
    ({"url": "localhost:9200"}, "index.url"),
    ({"url": []}, "index.url"),
    ({"bulk_docs": 0}, "index.bulk_docs"),
    ({"msearch_size": 0}, "index.msearch_size"),
    ({"bulk_bytes": "5MB"}, "index.bulk_bytes"),
    ({"timeout_s": -1}, "index.timeout_s"),
    ({"verify_certs": "yes"}, "index.verify_certs"),
    ({"more_like_this": 1}, "index.more_like_this"),
    ({"keep_versions": True}, "index.keep_versions"),
    ({"min_should_match": 0}, "index.min_should_match"),
    ({"index": "Bad Name"}, "index.index"),
    ({"ca_certs": "/nonexistent/ca.pem"}, "index.ca_certs"),
    ({"username": "u"}, "index.password"),
    ({"api_key": "k", "username": "u", "password": "p"}, "index.api_key"),
    ({"shards": 3}, "index.shards"),
])
def test_options_validation_names_key(options: dict[str, Any], key: str) -> None:
    from daemon.backends.search_options import parse_options
    from daemon.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        parse_options(options, env={})
    assert e.value.key == key and key in str(e.value)


def test_options_defaults_and_env() -> None:
    from daemon.backends.search_options import parse_options

    o = parse_options({}, env={})
    assert (o.urls, o.index, o.bulk_docs, o.bulk_bytes, o.keep_versions, o.min_should_match, o.more_like_this) == \
        (("http://localhost:9200",), "nearsync_ads", 2000, 16 * 1024 * 1024, 2, 1, False)
    o = parse_options({"url": "http://a:9200", "username": "u", "password": "file"},
                      env={"NEARSYNC_INDEX_URL": "http://x:1, https://y:2/", "NEARSYNC_INDEX_PASSWORD": "envpw"})
    assert o.urls == ("http://x:1", "https://y:2") and o.password == "envpw"
    assert parse_options({}, env={"NEARSYNC_INDEX_API_KEY": "k1"}).api_key == "k1"


@pytest.mark.parametrize("name", SEARCH)
def test_secrets_not_in_repr_or_logs(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import structlog

    from daemon.config import settings_from_mapping

    monkeypatch.setenv("NEARSYNC_INDEX_PASSWORD", "pw-S3CRET")
    s = settings_from_mapping({"index": {"backend": name, "url": ["https://ops:url-S3CRET@h1:9200", "https://h2:9200"],
                                         "username": "ops", "verify_certs": False}}, env={})
    with structlog.testing.capture_logs() as logs:
        be = create_search_backend(name, s)
        text = repr(be) + repr(be.options) + repr(be.client) + str(logs)
    assert "S3CRET" not in text and "ops:***@h1" in text and be.options.password == "pw-S3CRET"
    key = create_search_backend(name, {"api_key": "key-S3CRET"})
    assert "S3CRET" not in repr(key) and "auth=api_key" in repr(key)


async def test_item_errors_classified() -> None:
    """Per-item statuses from the bulk response: 409 stale, 404 delete applied, 429/5xx transient."""
    from daemon.backends.search_options import parse_options

    class Stub:
        def __init__(self, failed: list[dict[str, Any]]) -> None:
            self.failed = failed

        async def bulk(self, actions: list[dict[str, Any]], **_: int) -> list[dict[str, Any]]:
            return self.failed

    def item(op: str, rid: str, status: int, etype: str = "x") -> dict[str, Any]:
        return {op: {"_id": f"{T}:{rid}", "_index": "a_v1", "status": status, "error": {"type": etype, "reason": "r"}}}

    be = SearchBackend("opensearch", Stub([item("index", "1", 409), item("delete", "2", 404),  # type: ignore[arg-type]
                                           item("index", "3", 400, "mapper_parsing_exception")]),
                       parse_options({"index": "a"}, env={}))
    be.set_extra_write_targets([])
    res = await be.write([doc("1", 1, []), doc("3", 1, [])], [DeleteOp(T, "2", 1)])
    assert res.outcomes == {(T, "1"): Outcome.STALE, (T, "2"): Outcome.APPLIED, (T, "3"): Outcome.FAILED}
    assert res.errors[(T, "3")].startswith("400 mapper_parsing_exception")
    for status in (429, 503):
        be.client = Stub([item("index", "1", status)])  # type: ignore[assignment]
        with pytest.raises(TransientIndexError):
            await be.write([doc("1", 1, [])], [])


# -- real clusters (opt-in) ---------------------------------------------------------------------


@pytest.mark.real_cluster
@pytest.mark.parametrize(("name", "env"), [("elasticsearch", "ELASTICSEARCH_URL"), ("opensearch", "OPENSEARCH_URL")])
async def test_real_cluster_roundtrip(name: str, env: str) -> None:
    import os

    url = os.environ.get(env)
    if not url:
        pytest.skip(f"set {env} to run against a real {name} cluster")
    be = create_search_backend(name, search_options(url))
    await be.open()
    try:
        await be.write([doc("1", 10, ["b1:a", "s1:b"]), doc("2", 10, ["b1:a", "s1:b"])], [DeleteOp(T, "3", 4)])
        assert (await be.write([doc("3", 3, ["b1:a"])], [])).outcomes[(T, "3")] is Outcome.STALE
        await be.refresh()
        assert await be.count(T) == 2
        assert [c.record_id for c in await be.candidates(T, ["b1:a", "s1:b"], {}, min_match=2, exclude_id="1")] == ["2"]
    finally:
        from daemon.backends import search_admin as A

        for v in await A.list_versions(be.client, be.alias):
            await be.client.request("DELETE", f"/{v.name}")
        await be.client.request("DELETE", f"/_index_template/{be.alias}_template")
        await be.close()


def test_signature_sketches_are_stored_packed_and_old_documents_still_read() -> None:
    from daemon.backends import search_bodies as B

    big = [-(1 << 63), -1, 0, 1, (1 << 63) - 1]
    assert B.unpack_int64s(B.pack_int64s(big)) == big
    d = doc("7", 3, ["b1:a", "s1:b"])
    d.signature["minhash"] = big
    src = B.document_source(d)
    assert isinstance(src["signature"]["minhash"], str) and isinstance(src["signature"]["bottomk"], str)
    assert len(src["signature"]["minhash"]) == 56  # 5 values x 8 bytes = 40 bytes, base64
    assert not {"sig_bands", "sig_blocks", "sig_super"} & set(src)
    assert B.document_from_hit({"_source": src, "_version": 3}) == d
    old_layout = {**src, "signature": dict(d.signature)}  # an index version written before packing
    assert B.document_from_hit({"_source": old_layout, "_version": 3}) == d
    with pytest.raises(ValueError):
        B.unpack_int64s("AAAA")  # 3 bytes: not whole int64 values
    with pytest.raises(OverflowError):
        B.pack_int64s([1 << 64])


async def test_signature_round_trips_bit_for_bit_through_the_server(sbackend: SearchBackend) -> None:
    """A real signature (128 MinHash values, the bottom-k sketch) and the int64 extremes go to the
    osmem server packed and come back identical through every read path; the stored ``_source``
    holds the packed form and no indexed number copies; a document in the layout of an index version
    built before (unpacked lists, ``simhash`` / ``sig_version`` / typed key copies) still reads."""
    from daemon.backends import search_bodies as B
    from daemon.signatures import compute_signature

    sig = compute_signature({"title": "Sony Bravia KDL-40 40in LCD TV", "body": "Full HD 1080p, 3 HDMI inputs."})
    real = doc("real", 5, sig.keys(), user="7")
    real.signature.clear()
    real.signature.update(sig.to_document())
    edge = doc("edge", 6, ["b1:a", "s1:b"])
    edge.signature["minhash"] = [-(1 << 63), -1, 0, 1, (1 << 63) - 1]
    edge.signature["bottomk"] = [(1 << 63) - 1, 1 << 62, 3]
    assert set((await sbackend.write([real, edge], [])).outcomes.values()) == {Outcome.APPLIED}
    await sbackend.refresh()
    got = await sbackend.get(T, ["real", "edge"])
    assert got == {"real": real, "edge": edge}
    assert len(got["real"].signature["minhash"]) == 128
    sketches = await sbackend.get_sketches(T, ["real", "edge"])
    assert sketches == {"real": (5, tuple(real.signature["bottomk"])), "edge": (6, tuple(edge.signature["bottomk"]))}
    found = await sbackend.candidates(T, sig.keys(), {}, exclude_id="nobody")
    assert [c.document for c in found if c.record_id == "real"] == [real]
    raw = await sbackend.client.request("GET", f"/{sbackend.alias}/_doc/{B.doc_id(T, 'real')}")
    stored = raw["_source"]
    assert isinstance(stored["signature"]["minhash"], str) and isinstance(stored["signature"]["bottomk"], str)
    assert not {"simhash", "sig_version", "sig_bands", "sig_blocks", "sig_super"} & set(stored)

    old_index = f"{sbackend.alias}_old_layout"  # the mapping and documents of an index version built before
    old_props = {**B.MAPPINGS["properties"], "simhash": {"type": "long"}, "sig_version": {"type": "integer"},
                 "sig_bands": {"type": "keyword"}, "sig_blocks": {"type": "keyword"}, "sig_super": {"type": "keyword"}}
    await sbackend.client.request("PUT", f"/{old_index}", {"settings": B.SETTINGS,
                                                           "mappings": {**B.MAPPINGS, "properties": old_props}})
    try:
        old_src = {**B.document_source(real), "signature": dict(real.signature), "simhash": sig.simhash,
                   "sig_version": sig.v, "sig_bands": list(sig.bands), "sig_blocks": list(sig.blocks),
                   "sig_super": list(sig.super)}
        await sbackend.client.request("PUT", f"/{old_index}/_doc/{B.doc_id(T, 'real')}", old_src,
                                      params={"version": "5", "version_type": "external", "refresh": "true"})
        hit = await sbackend.client.request("GET", f"/{old_index}/_doc/{B.doc_id(T, 'real')}")
        assert B.document_from_hit(hit) == real
    finally:
        await sbackend.client.request("DELETE", f"/{old_index}")
