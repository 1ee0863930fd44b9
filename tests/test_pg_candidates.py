"""``index.candidate_store = "postgres"`` (the default): a search index with the fields only, the candidate keys and
signatures in PostgreSQL (:mod:`daemon.backends.pg_candidates`), against a real osmem-server and a
real PostgreSQL. The protocol, dedup and reindex suites also run on it (the ``opensearch+pg``
parameter of ``tests/conftest.py``); this file checks what is particular to it."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from daemon.backends.base import DeleteOp, IndexDocument, Outcome, WriteResult
from daemon.backends.factory import create_backend
from daemon.config import Settings
from daemon.errors import ConfigError
from daemon.ops.migrate import upgrade
from daemon.ops.reindex import reindex, verify
from daemon.service import build_worker, opened_backend, status
from tests.conftest import PG_CANDIDATES, make_settings, queues_empty, running_indexer, running_worker, wait_until, \
    with_dedup

try:
    from daemon.backends.pg_candidates import PgCandidatesBackend, merge_outcomes
    from tests.search_server import allow_es_client_against_osmem
except ImportError:  # pragma: no cover - search backend not installed
    pytest.skip("search backend unavailable", allow_module_level=True)

T = "public.ads"
AD = {"user_id": "u1", "category": "tv", "title": "Sony Bravia KDL-40V4100 40 inch LCD TV",
      "body": "Selling my Sony Bravia 40 inch full HD LCD television, with the remote and the stand.",
      "price": 250.0, "lat": 48.8566, "lon": 2.3522}
COLS = tuple(AD)


@pytest.mark.parametrize("backend_name", [PG_CANDIDATES], indirect=True)
async def test_the_search_index_holds_fields_only_and_postgresql_the_signed_documents(settings: Settings) -> None:
    s = with_dedup(settings)
    async with running_indexer(s), running_worker(s):
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
            for ad in (AD, AD | {"price": 255.0}):
                await c.execute(f"INSERT INTO ads ({', '.join(COLS)}) VALUES ({', '.join(['%s'] * len(COLS))})",
                                [ad[k] for k in COLS])
        await wait_until(lambda: queues_empty(s.dsn), timeout=60)
    async with opened_backend(s) as be:
        assert isinstance(be, PgCandidatesBackend)
        await be.refresh()
        hits = (await be.client.request("POST", f"/{be.alias}/_search", {"query": {"match_all": {}}}))["hits"]["hits"]
        sources = sorted((h["_source"] for h in hits), key=lambda src: src["record_id"])
        assert [src["fields"]["price"] for src in sources] == [250.0, 255.0]
        assert all(src["keys"] == [] and src["signature"] == {} for src in sources)
        docs = await be.get(T, [src["record_id"] for src in sources])
        assert len(docs) == 2 and all(d.keys and d.signature.get("minhash") for d in docs.values())
        assert {r: d.version for r, d in docs.items()} == await be.search.get_versions(T, list(docs))
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        rows = await (await c.execute("SELECT record_id, cardinality(key_hashes) FROM nearsync.document_lookup "
                                      "ORDER BY record_id")).fetchall()
        flagged = await (await c.execute("SELECT flag FROM nearsync.duplicate_flags")).fetchall()
    assert len(rows) == 2 and all(n > 10 for _, n in rows)
    assert flagged == [("duplicate",)]  # candidates found through PostgreSQL's keys


@pytest.mark.parametrize("backend_name", [PG_CANDIDATES], indirect=True)
async def test_a_refused_record_fails_alone_and_a_retried_write_is_stale(settings: Settings) -> None:
    sig = {"v": 1, "simhash": 5, "minhash": [1, 2], "bottomk": [3], "bands": ["b1:aa"], "blocks": [], "super": []}
    good = IndexDocument(T, "1", 10, {"title": "a"}, {}, ["b1:aa"], sig)
    bad = IndexDocument(T, "2", 10, {"title": "b", "price": math.nan}, {}, ["b1:aa"], sig)
    async with opened_backend(settings) as be:
        res = await be.write([good, bad], [])
        assert res.outcomes == {(T, "1"): Outcome.APPLIED, (T, "2"): Outcome.FAILED}
        assert "not serialisable" in res.errors[(T, "2")]
        await be.refresh()
        assert sorted(await be.pg.get(T, ["1", "2"])) == ["1"] and sorted(await be.search.get(T, ["1", "2"])) == ["1"]
        again = await be.write([good], [])  # a retried batch: both stores already hold version 10
        assert again.outcomes == {(T, "1"): Outcome.STALE}
        await be.write([], [DeleteOp(T, "1", 11)])
        await be.refresh()
        assert await be.get(T, ["1"]) == {} and await be.search.get(T, ["1"]) == {}


def test_merge_outcomes_fails_if_either_store_refused_and_applies_if_either_applied() -> None:
    a, b, c, d = (T, "a"), (T, "b"), (T, "c"), (T, "d")
    search = WriteResult({a: Outcome.APPLIED, b: Outcome.STALE, c: Outcome.STALE, d: Outcome.FAILED},
                         {d: "400 mapper_parsing_exception"})
    pg = WriteResult({a: Outcome.FAILED, b: Outcome.APPLIED, c: Outcome.STALE}, {a: "DataError: bad"})
    got = merge_outcomes(search, pg)
    assert got.outcomes == {a: Outcome.FAILED, b: Outcome.APPLIED, c: Outcome.STALE, d: Outcome.FAILED}
    assert got.errors == {a: "DataError: bad", d: "400 mapper_parsing_exception"}


@pytest.mark.parametrize(("index", "key"), [
    ({"candidate_store": "elsewhere"}, "index.candidate_store"),
    ({"candidate_store": "postgres", "more_like_this": True}, "index.more_like_this"),
    ({"candidate_store": "postgres", "min_should_match": 2}, "index.min_should_match"),
    ({"candidate_store": "search", "cached_documents": 100}, "index.cached_documents"),
    ({"more_like_this": True}, "index.more_like_this"),  # the default store is PostgreSQL
    ({"candidate_store": "postgres", "cached_documents": -1}, "index.cached_documents"),
])
def test_a_bad_candidate_store_setting_fails_at_start_naming_the_key(fresh_db: str, index: dict[str, Any],
                                                                     key: str) -> None:
    s = make_settings(fresh_db, index={"backend": "opensearch", "url": "http://127.0.0.1:9", **index})
    with pytest.raises(ConfigError) as e:
        create_backend(s)
    assert e.value.key == key


def test_the_factory_builds_the_split_backend_by_default_and_not_with_search(fresh_db: str,
                                                                           search_url: str | None) -> None:
    if search_url is None:
        pytest.skip("no osmem-server")
    allow_es_client_against_osmem()
    in_search = make_settings(fresh_db, index={"backend": "opensearch", "url": search_url, "candidate_store": "search"})
    default = make_settings(fresh_db, index={"backend": "opensearch", "url": search_url, "cached_documents": 123})
    upgrade(default)
    assert not isinstance(create_backend(in_search), PgCandidatesBackend)
    be = create_backend(default)
    assert isinstance(be, PgCandidatesBackend) and be.name == "opensearch" and be.pg._cache.max_documents == 123


async def _index_twelve_ads(settings: Settings) -> None:
    """Insert 12 ads (ids 1-12, titles told apart by a number) and index them."""
    async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
        for i in range(12):
            await c.execute(f"INSERT INTO ads ({', '.join(COLS)}) VALUES ({', '.join(['%s'] * len(COLS))})",
                            [AD[k] for k in COLS[:2]] + [f"{AD['title']} {i}"] + [AD[k] for k in COLS[3:]])
    async with running_indexer(settings):
        await wait_until(lambda: queues_empty(settings.dsn), timeout=60)


@pytest.mark.parametrize("backend_name", [PG_CANDIDATES], indirect=True)
async def test_verify_finds_records_the_search_index_lost_and_repair_writes_them_back(settings: Settings) -> None:
    await _index_twelve_ads(settings)
    async with opened_backend(settings) as be:
        assert (await verify(settings, be))["drift"] is False
        await be.client.request("DELETE", f"/{be.alias}_v1")  # the search server lost its index; PostgreSQL did not
        await be.refresh_write_targets()  # recreates the alias, as the daemon does before its next write
        report = await verify(settings, be)
        assert report["drift"] and report["missing"] == 12 and report["orphans"] == 0, report
        fixed = await verify(settings, be, repair=True)  # queues the 12 and drains them through the indexer
        await be.refresh()
        assert fixed["repaired"] and (await verify(settings, be))["drift"] is False
        assert await be.count(T) == 12 and len(await be.search.get(T, [str(i) for i in range(1, 13)])) == 12
    report = await status(settings)
    assert (report["indexed"], report["candidate_store"]) == (12, {"postgres": 12})


@pytest.mark.parametrize("backend_name", [PG_CANDIDATES], indirect=True)
async def test_verify_compares_the_search_index_copy_of_the_fields_too(settings: Settings) -> None:
    """The users' queries read the search index's copy of a record, the dedup worker PostgreSQL's.
    A record whose search copy drifted from its row (written there alone, PostgreSQL's copy intact)
    is reported as drifted, and a repair writes it back to both stores."""
    await _index_twelve_ads(settings)
    every = {"sample": 12, "page_size": 12}  # every record sampled
    async with opened_backend(settings) as be:
        assert isinstance(be, PgCandidatesBackend)
        assert (await verify(settings, be, **every))["drift"] is False
        held = (await be.search.get(T, ["3"]))["3"]
        changed = replace(held, fields=held.fields | {"title": "edited in the search index alone"}, version=held.version + 1)
        assert (await be.search.write([changed], [])).outcomes == {(T, "3"): Outcome.APPLIED}
        await be.refresh()
        assert (await be.get(T, ["3"]))["3"].fields == held.fields  # PostgreSQL's copy is intact
        report = await verify(settings, be, **every)
        assert report["drift"] and (report["drifted"], report["missing"], report["sampled"]) == (1, 0, 12), report
        assert report["examples"]["drifted"] == ["3"]
        assert (await verify(settings, be, repair=True, **every))["repaired"]
        await be.refresh()
        assert (await verify(settings, be, **every))["drift"] is False
        assert (await be.search.get(T, ["3"]))["3"].fields == held.fields


@pytest.mark.parametrize("backend_name", ["opensearch"], indirect=True)
async def test_switching_to_postgres_without_a_reindex_fails_fast_and_a_reindex_fixes_it(settings: Settings) -> None:
    """The upgrade of an index built before 2026-11-27 (keys in the search index) to the default."""
    async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
        for i in range(5):
            await c.execute(f"INSERT INTO ads ({', '.join(COLS)}) VALUES ({', '.join(['%s'] * len(COLS))})",
                            [AD[k] for k in COLS[:2]] + [f"{AD['title']} {i}"] + [AD[k] for k in COLS[3:]])
    async with running_indexer(settings):  # keys in the search index (the "opensearch" parameter)
        await wait_until(lambda: queues_empty(settings.dsn), timeout=60)
    keyed = replace(settings, index=replace(settings.index, options={**settings.index.options,
                                                                      "candidate_store": "postgres"}))
    async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:  # an indexer with
        await c.execute("UPDATE ads SET price = 300 WHERE id = 1")                     # "postgres" ran a while
    async with running_indexer(keyed):
        await wait_until(lambda: queues_empty(settings.dsn), timeout=60)
    async with opened_backend(keyed) as be:
        await be.refresh()
        assert await be.store_counts(T) == (5, 1)
        with pytest.raises(ConfigError) as e:
            await build_worker(keyed, be)
        assert e.value.key == "index.candidate_store" and "nearsync reindex" in str(e.value)
        await reindex(keyed, be, progress=False)
        await build_worker(keyed, be)
        assert len(await be.get(T, [str(i) for i in range(1, 6)])) == 5



@pytest.mark.parametrize("backend_name", [PG_CANDIDATES], indirect=True)
async def test_switching_back_to_search_without_a_reindex_fails_fast_and_a_reindex_fixes_it(settings: Settings) -> None:
    """The way back: an index written with the PostgreSQL store has search documents without keys;
    read with ``"search"`` before a reindex, the dedup worker would find no candidate at all."""
    async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
        for i in range(5):
            await c.execute(f"INSERT INTO ads ({', '.join(COLS)}) VALUES ({', '.join(['%s'] * len(COLS))})",
                            [AD[k] for k in COLS[:2]] + [f"{AD['title']} {i}"] + [AD[k] for k in COLS[3:]])
    async with running_indexer(settings):  # the default: keys in PostgreSQL only
        await wait_until(lambda: queues_empty(settings.dsn), timeout=60)
    back = replace(settings, index=replace(settings.index, options={**settings.index.options,
                                                                     "candidate_store": "search"}))
    async with opened_backend(back) as be:
        await be.refresh()
        assert (await be.count(T), await be.keyed_count(T)) == (5, 0)
        with pytest.raises(ConfigError) as e:
            await build_worker(back, be)
        assert e.value.key == "index.candidate_store" and "nearsync reindex" in str(e.value)
        await reindex(back, be, progress=False)
        await be.refresh()
        assert (await be.count(T), await be.keyed_count(T)) == (5, 5)
        await build_worker(back, be)
