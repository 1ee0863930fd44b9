"""The dedup worker against a real PostgreSQL and each index backend: flags, scope, edits,
deletes, cluster splitting, and parallel workers."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from daemon.backends.base import Candidate, DeleteOp, IndexDocument, Outcome
from daemon.config import Settings, settings_from_mapping
from daemon.dedup import worker as dedup_worker
from daemon.dedup.settings import dedup_options
from daemon.ops.migrate import sync_triggers
from daemon.ops.reindex import reindex, verify
from daemon.service import opened_backend
from daemon.signatures import SIGNATURE_SCHEMA_VERSION
from daemon.capture.queue import relay
from tests.conftest import (
    PG_CANDIDATES,
    REPO,
    flags,
    index_state,
    pending,
    queues_empty,
    running_indexer,
    running_worker,
    wait_until,
    with_daemon,
    with_dedup,
)

ORIGINAL = {
    "user_id": "u1", "category": "tv", "title": "Sony Bravia KDL-40V4100 40 inch LCD TV",
    "body": "Selling my Sony Bravia 40 inch full HD LCD television. Bought two years ago, works perfectly. "
            "Comes with the remote control and the original stand. Pick up in central Paris, cash only.",
    "price": 250.0, "lat": 48.8566, "lon": 2.3522,
}
EDITED = ORIGINAL | {
    "title": "Sony Bravia KDL-40V4100 40 inch LCD TV - like new",
    "body": "Bought two years ago, works perfecly. Selling my Sony Bravia 40 inch full HD LCD televison. "
            "Pick up in central Paris, cash only. Comes with the remote control and the original stand.",
    "price": 262.0,
}
OTHER_PRODUCT = ORIGINAL | {
    "title": "Samsung WF-8590 washing machine 7kg",
    "body": "Samsung washing machine, 7 kg capacity, energy class A+. Works perfectly, selling because we are "
            "moving. Pick up in central Paris, cash only.",
    "price": 180.0,
}
COLS = ("user_id", "category", "title", "body", "price", "lat", "lon")


async def add(dsn: str, ad: dict[str, Any], created: str = "now()") -> str:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        cur = await c.execute(
            f"INSERT INTO ads ({', '.join(COLS)}, created_at) VALUES ({', '.join(['%s'] * len(COLS))}, {created}) RETURNING id",
            [ad[k] for k in COLS])
        return str((await cur.fetchone())[0])  # type: ignore[index]


async def settle(s: Settings) -> None:
    await wait_until(lambda: queues_empty(s.dsn), timeout=60)


@pytest.fixture
def dsettings(settings: Settings) -> Settings:
    return with_dedup(settings)


async def test_exact_and_edited_reposts_are_flagged_other_products_are_not(dsettings: Settings) -> None:
    s = dsettings
    async with running_indexer(s), running_worker(s):
        orig = await add(s.dsn, ORIGINAL, "now() - interval '2 days'")
        exact = await add(s.dsn, ORIGINAL)
        edited = await add(s.dsn, EDITED)
        other = await add(s.dsn, OTHER_PRODUCT)
        await settle(s)
    got = await flags(s.dsn)
    assert got[exact] == ("duplicate", orig)
    assert got[edited][0] in ("duplicate", "potential_duplicate") and got[edited][1] == orig
    assert orig not in got and other not in got
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        cur = await c.execute("SELECT score, summary, reasons, signature_version FROM nearsync.duplicate_flags "
                              "WHERE record_id = %s", (exact,))
        score, summary, reasons, version = await cur.fetchone()  # type: ignore[misc]
        view = await (await c.execute("SELECT record->>'title', original->>'id' FROM nearsync.flagged_records "
                                      "WHERE record_id = %s", (exact,))).fetchone()
    assert score >= 90 and "model number" in summary and "title" in reasons and version == SIGNATURE_SCHEMA_VERSION
    assert view == (ORIGINAL["title"], int(orig)) or view == (ORIGINAL["title"], orig)


async def test_a_title_alone_inside_a_longer_one_goes_to_a_moderator_not_to_auto_reject(dsettings: Settings) -> None:
    """single_field_cap through the worker: ads with a title only (no body, price or place). The
    same title again is a duplicate; a short title whose words are all in a longer one (token-set
    100) is a potential duplicate at 89.9, and its flag says that nothing else was compared."""
    s = dsettings
    bare = {"user_id": "u9", "category": "games", "body": None, "price": None, "lat": None, "lon": None}
    async with running_indexer(s), running_worker(s):
        first = await add(s.dsn, bare | {"title": "Titanfall Review"}, "now() - interval '2 days'")
        again = await add(s.dsn, bare | {"title": "Titanfall review"}, "now() - interval '1 day'")
        longer = await add(s.dsn, bare | {"title": "Will 'Titanfall' Boost Xbox One? (Game Review)"})
        await settle(s)
    got = await flags(s.dsn)
    assert got[again] == ("duplicate", first) and got[longer] == ("potential_duplicate", first), got
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        cur = await c.execute("SELECT record_id, score, summary FROM nearsync.duplicate_flags ORDER BY record_id")
        rows = {r[0]: (float(r[1]), r[2]) for r in await cur.fetchall()}
    assert rows[longer] == (89.9, "same title, nothing else to compare")
    assert rows[again][0] == 100.0 and "nothing else" not in rows[again][1]


async def test_scope_user_limits_candidates(dsettings: Settings) -> None:
    s = dsettings  # default scope: user
    async with running_indexer(s), running_worker(s):
        first = await add(s.dsn, ORIGINAL, "now() - interval '1 day'")
        other_user = await add(s.dsn, ORIGINAL | {"user_id": "u2"})
        await settle(s)
        assert await flags(s.dsn) == {}
    g = with_dedup(s, scope="global")  # a scope change re-keys the index: reindex, then re-score
    async with opened_backend(g) as backend:
        await reindex(g, backend, progress=False)
    async with running_worker(g):
        await settle(g)
    assert await flags(g.dsn) == {other_user: ("duplicate", first)}


async def test_editing_a_duplicate_into_another_ad_clears_its_flag(dsettings: Settings) -> None:
    s = dsettings
    async with running_indexer(s), running_worker(s):
        await add(s.dsn, ORIGINAL, "now() - interval '1 day'")
        dup = await add(s.dsn, ORIGINAL)
        await settle(s)
        assert dup in await flags(s.dsn)
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
            await c.execute("UPDATE ads SET title = %s, body = %s, price = %s WHERE id = %s",
                            (OTHER_PRODUCT["title"], OTHER_PRODUCT["body"], OTHER_PRODUCT["price"], int(dup)))
        await settle(s)
    assert await flags(s.dsn) == {}


TABLET = ORIGINAL | {
    "category": "tablets", "title": "Panasonic tablet PA-79C6161", "price": 1000.0,
    "body": "Panasonic tablet model PA-79C6161. Barely used, in perfect condition. Original box and all accessories "
            "included. Bought last year, receipt available. Can deliver within the city for a small fee.",
}


async def test_a_repost_with_every_title_word_retyped_is_found_in_a_small_scope(dsettings: Settings) -> None:
    """A seller's few ads are compared exhaustively; a repost whose title shares no word with the
    original's (every word retyped) is still compared, through the candidate keys its copied text
    shares, and flagged."""
    s = dsettings
    async with running_indexer(s), running_worker(s):
        orig = await add(s.dsn, TABLET, "now() - interval '1 day'")
        await add(s.dsn, OTHER_PRODUCT)  # the scope is small: exhaustive comparison
        dup = await add(s.dsn, TABLET | {"title": "Pnaasonic tabtel PA-7C96161", "price": 1040.0})
        await settle(s)
    got = await flags(s.dsn)
    assert got[dup] == ("duplicate", orig) and set(got) == {dup}


async def test_an_edit_that_takes_a_pair_out_of_each_others_candidates_drops_its_link(dsettings: Settings) -> None:
    """A link stays only while the pair is still looked up: flags equal a fresh pass over the table.

    Candidates are looked up within a user's ads (``scope = "user"``). The repost then moves to
    another user: neither ad's lookup returns the other any more, so a pass over the table as it
    now is never scores the pair, although the pair would still score as a duplicate (the ads'
    texts and prices are unchanged). The link made before the edit must not survive it.
    """
    from daemon.dedup.settings import dedup_options
    from daemon.dedup.worker import is_candidate_pair, side_of
    from daemon.scoring import decide, score_sides

    s = dsettings
    async with running_indexer(s), running_worker(s):
        orig = await add(s.dsn, ORIGINAL, "now() - interval '1 day'")
        dup = await add(s.dsn, EDITED)
        await settle(s)
        assert (await flags(s.dsn))[dup][1] == orig
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
            await c.execute("UPDATE ads SET user_id = 'u2' WHERE id = %s", (int(dup),))
        await settle(s)
    after_edit = await flags(s.dsn)
    # The pair still scores as a duplicate when it is compared, but it is no longer a candidate pair.
    opts = dedup_options(s)
    async with opened_backend(s) as backend:
        docs = await backend.get("public.ads", [orig, dup])
    da, db = docs[orig], docs[dup]
    assert decide(score_sides(side_of(da), side_of(db), opts.scoring).score, opts.scoring) is not None
    assert not any(is_candidate_pair(x, y, opts, exhaustive=e) for x, y in ((da, db), (db, da)) for e in (True, False))
    await _redo_all(s.dsn)
    async with running_worker(s):
        await settle(s)
    assert after_edit == await flags(s.dsn) == {}


async def test_deleting_the_original_repoints_its_duplicates(dsettings: Settings) -> None:
    s = dsettings
    async with running_indexer(s), running_worker(s):
        orig = await add(s.dsn, ORIGINAL, "now() - interval '3 days'")
        second = await add(s.dsn, ORIGINAL, "now() - interval '2 days'")
        third = await add(s.dsn, ORIGINAL, "now() - interval '1 day'")
        await settle(s)
        assert await flags(s.dsn) == {second: ("duplicate", orig), third: ("duplicate", orig)}
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
            await c.execute("DELETE FROM ads WHERE id = %s", (int(orig),))
        await settle(s)
        assert await flags(s.dsn) == {third: ("duplicate", second)}
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
            await c.execute("DELETE FROM ads WHERE id = %s", (int(second),))
        await settle(s)
    assert await flags(s.dsn) == {}


async def test_a_delete_written_before_a_crash_still_reaches_the_worker(dsettings: Settings) -> None:
    """A daemon that wrote a change to the index and died before acknowledging it (kill -9, or the
    database restarting under the acknowledgement) leaves the change pending; the retry finds its
    own version already in the index (a stale write), and must still hand the record to the dedup
    worker, or the duplicates of a deleted original stay flagged against it."""
    s = dsettings
    async with running_indexer(s), running_worker(s):
        orig = await add(s.dsn, ORIGINAL, "now() - interval '2 days'")
        repost = await add(s.dsn, ORIGINAL)
        await settle(s)
    assert await flags(s.dsn) == {repost: ("duplicate", orig)}
    async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
        await c.execute("DELETE FROM ads WHERE id = %s", (int(orig),))
        await relay(c)
        seq = (await (await c.execute("SELECT seq FROM nearsync.index_tracking WHERE queue = 'index' "
                                      "AND record_id = %s", (orig,))).fetchone())[0]  # type: ignore[index]
    async with opened_backend(s) as backend:  # what the crashed daemon had written
        written = await backend.write([], [DeleteOp("public.ads", orig, seq)])
        assert written.outcomes[("public.ads", orig)] is Outcome.APPLIED
    async with running_indexer(s), running_worker(s):
        await settle(s)
    assert await flags(s.dsn) == {}


def chain_ad(i: int) -> dict[str, Any]:
    """Ads in two tight groups (camera / laptop) joined by one weak bridge."""
    if i < 8:
        return ORIGINAL | {"title": f"Canon EOS 600D camera body kit {'A' * (i % 3)}", "category": "camera",
                           "body": f"Canon EOS 600D digital camera with 18-55 lens, {i} shutter clicks, boxed.",
                           "price": 300.0 + i}
    return ORIGINAL | {"title": f"Dell XPS 13 laptop 16GB {'B' * (i % 3)}", "category": "computer",
                       "body": f"Dell XPS 13 laptop, 16 GB memory, 512 GB disk, {i} battery cycles, boxed.",
                       "price": 900.0 + i}


async def test_over_large_cluster_is_split(dsettings: Settings) -> None:
    s = with_dedup(dsettings, potential_threshold=40, duplicate_threshold=60,
                   cluster={"max_size": 6, "min_density": 0.3})
    async with running_indexer(s), running_worker(s):
        for i in range(16):
            await add(s.dsn, chain_ad(i), f"now() - interval '{100 - i} minutes'")
        await settle(s)
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        rows = await (await c.execute("SELECT cluster_id, count(*), count(DISTINCT original_id) FROM nearsync.clusters "
                                      "GROUP BY cluster_id")).fetchall()
        linked = await (await c.execute("SELECT count(*) FROM nearsync.dedup_links")).fetchone()
    assert linked[0] > 0  # type: ignore[index]
    assert len(rows) >= 2, rows  # the component was split
    assert all(n <= 8 for _, n, _ in rows) and all(o == 1 for _, _, o in rows)


async def test_two_workers_produce_the_same_flags_as_one(dsettings: Settings) -> None:
    s = dsettings
    ads = [ORIGINAL, EDITED, OTHER_PRODUCT, ORIGINAL | {"price": 240.0}, OTHER_PRODUCT | {"price": 185.0}]
    async with running_indexer(s):
        for k in range(6):
            for j, ad in enumerate(ads):
                await add(s.dsn, ad | {"user_id": f"u{k}"}, f"now() - interval '{100 - k * 5 - j} minutes'")
        await wait_until(lambda: _pending_index(s.dsn), timeout=60)
    serial = with_daemon(s, concurrency=1, batch_size=4)
    async with running_worker(serial) as w:
        await settle(s)
    assert w.concurrency == 1
    one = await flags(s.dsn)
    await _redo_all(s.dsn)
    async with running_worker(serial) as w1, running_worker(serial) as w2:
        await settle(s)
    assert await flags(s.dsn) == one and len(one) >= 12
    assert w1.totals["claimed"] + w2.totals["claimed"] == 30
    # One worker with three batches in flight (lanes claiming 4 records each) agrees too.
    await _redo_all(s.dsn)
    async with running_worker(with_daemon(s, concurrency=3, batch_size=4)) as w3:
        await settle(s)
    assert await flags(s.dsn) == one
    assert w3.totals["claimed"] == w3.totals["acked"] == 30 and len(w3.lanes) == 3
    assert len({q.worker_id for q in w3.lanes}) == 3


async def _redo_all(dsn: str) -> None:
    """Clear the worker's output and queue every record for dedup again."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        await c.execute("TRUNCATE nearsync.duplicate_flags, nearsync.clusters, nearsync.dedup_links, nearsync.dedup_parts")
        await c.execute("INSERT INTO nearsync.index_tracking (queue, table_name, record_id, op, seq) "
                        "SELECT 'dedup', 'public.ads', id::text, 'U', nextval('nearsync.change_seq') FROM ads")


async def _pending_index(dsn: str, dedup: int = 30) -> bool:
    return await pending(dsn, "index") == 0 and await pending(dsn, "dedup") == dedup


async def insert_many(dsn: str, ads: list[tuple[dict[str, Any], str]]) -> list[str]:
    """Insert ``(ad, created_at SQL expression)`` pairs in one INSERT statement; returns the ids in order."""
    rows = ", ".join(f"({', '.join(['%s'] * len(COLS))}, {created})" for _, created in ads)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        cur = await c.execute(f"INSERT INTO ads ({', '.join(COLS)}, created_at) VALUES {rows} RETURNING id",
                              [ad[k] for ad, _ in ads for k in COLS])
        return [str(r[0]) for r in await cur.fetchall()]


async def dead_letters(dsn: str) -> list[tuple[str, str, int, str]]:
    """``(queue, record_id, attempts, error)`` of every dead letter, oldest first."""
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        cur = await c.execute("SELECT queue, record_id, attempts, error FROM nearsync.dead_letters ORDER BY id")
        return [tuple(r) for r in await cur.fetchall()]  # type: ignore[misc]


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
async def test_an_absurd_price_next_to_a_real_one_fails_only_its_own_row(dsettings: Settings) -> None:
    """Issue 19's case: a text price column; one INSERT of 20 good ads plus a repost priced '1e308'
    of an existing ad priced 49. The price comparison raised OverflowError and the worker
    dead-lettered the whole batch (21 innocent records). Now a row follows the check API's rules: a
    price the API refuses (above 1e12) sends that row alone to the dead-letter table with an error
    naming the price, and the 20 others are indexed and deduplicated. (The scorer's own guard for
    such prices is tested in tests/test_scoring.py.)"""
    s = dsettings
    async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
        await c.execute("ALTER TABLE ads ALTER COLUMN price TYPE text")
    async with running_indexer(s), running_worker(s) as w:
        await insert_many(s.dsn, [(ORIGINAL | {"price": "49"}, "now() - interval '1 day'")])
        await settle(s)
        good = [(OTHER_PRODUCT | {"user_id": f"shop{i}", "title": f"{OTHER_PRODUCT['title']} lot {i}",
                                  "price": str(180 + i)}, "now()") for i in range(20)]
        ids = await insert_many(s.dsn, good + [(ORIGINAL | {"price": "1e308"}, "now()")])
        await settle(s)
    absurd = ids[-1]
    dead = await dead_letters(s.dsn)
    assert [(q, rid, attempts) for q, rid, attempts, _ in dead] == [("index", absurd, s.daemon.max_attempts)]
    assert "price" in dead[0][3] and "1e308" in dead[0][3]
    assert set(await index_state(s)) >= set(ids[:-1]) and absurd not in await index_state(s)
    assert await flags(s.dsn) == {}  # the 20 are other products, the repost was refused
    assert w.totals["failed"] == 0 and w.totals["acked"] == 21


class FailLookupOf:
    """Backend wrapper: the candidate lookup of a batch holding record ``bad`` raises a
    non-transient error (as a bug in the worker's path for that record would); records the number
    of records of every lookup."""

    def __init__(self, inner: Any, bad: str) -> None:
        self.inner, self.bad, self.sizes = inner, bad, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _check(self, queries: Any) -> None:
        self.sizes.append(len(queries))
        if any(q.exclude_id == self.bad for q in queries):
            raise RuntimeError(f"cannot look up the candidates of {self.bad}")

    async def candidates_many(self, table: str, queries: Any, **kw: Any) -> Any:
        self._check(queries)
        return await self.inner.candidates_many(table, queries, **kw)

    async def scope_members(self, table: str, queries: Any, **kw: Any) -> Any:
        """The exhaustive lookup of small scopes (``dedup.exhaustive_below``) fails alike."""
        self._check(queries)
        return await self.inner.scope_members(table, queries, **kw)


def group_ad(g: int) -> dict[str, Any]:
    """The ad of group ``g`` (its own user and model number)."""
    return ORIGINAL | {"user_id": f"g{g}", "title": f"Sony Bravia KDL-{40 + g}V4100 {40 + g} inch LCD TV"}


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
async def test_one_bad_record_among_100_is_the_only_dead_letter_and_the_99_get_their_flags(
        dsettings: Settings) -> None:
    """Issue 19, part 1: 33 groups of an original and two reposts, plus one record whose handling
    raises, all in one batch of the dedup worker. Exactly that record is dead-lettered, with its own
    error; the 99 others get exactly the flags a run without the fault gives (with other batch sizes
    too: flags depend on the data, not on how the batch was split)."""
    s = dsettings
    ads = [(group_ad(g), "now() - interval '1 day'") for g in range(33)]
    ads += [(group_ad(g), "now()") for g in range(33) for _ in range(2)]
    ads.insert(50, (OTHER_PRODUCT | {"user_id": "bad"}, "now()"))
    async with running_indexer(s):
        ids = await insert_many(s.dsn, ads)
        await wait_until(lambda: _pending_index(s.dsn, 100), timeout=60)
    bad = ids[50]
    originals = {ad["user_id"]: rid for rid, (ad, created) in zip(ids, ads, strict=True) if created != "now()"}
    expected = {rid: ("duplicate", originals[ad["user_id"]])
                for rid, (ad, created) in zip(ids, ads, strict=True) if created == "now()" and rid != bad}
    assert len(expected) == 66
    wrapper: list[FailLookupOf] = []
    one_lane = with_daemon(s, concurrency=1)  # two lanes would split the 100 between them by timing
    async with running_worker(one_lane, wrap_backend=lambda b: wrapper.append(FailLookupOf(b, bad)) or wrapper[0]) as w:
        await settle(s)
    assert wrapper[0].sizes[0] == 100  # one batch of all 100 records came first
    assert await dead_letters(s.dsn) == [("dedup", bad, s.daemon.max_attempts,
                                          f"RuntimeError: cannot look up the candidates of {bad}")]
    assert await flags(s.dsn) == expected
    assert w.totals["acked"] == 99 and w.totals["dead"] == 1 and w.totals["failed"] == s.daemon.max_attempts
    assert w.totals["split"] >= 1
    # Without the fault, in batches of 7: the same flags.
    await _redo_all(s.dsn)
    async with running_worker(with_daemon(s, batch_size=7)):
        await settle(s)
    assert await flags(s.dsn) == expected


async def test_a_column_of_ones_own_is_indexed_and_scored(dsettings: Settings) -> None:
    """Issue 17, item 5: columns that are no fixed role (``authors``, a text ``year``) mapped in
    ``[source.fields]`` and scored in ``[dedup.fields]`` go from the row through the indexing daemon
    into the document and through the dedup worker into the flag's reasons; a year the ``numeric``
    metric cannot read sends its row alone to the dead-letter table naming the field."""
    s = dsettings
    async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
        await c.execute("ALTER TABLE ads ADD COLUMN authors text, ADD COLUMN pub_year text")
    s = replace(s, source=replace(s.source, fields={**s.source.fields, "authors": "authors", "year": "pub_year"},
                                  tracked_columns=(*s.source.tracked_columns, "authors", "pub_year")),
                dedup={**s.dedup, "fields": {"authors": {"metric": "token_set", "weight": 2.0},
                                             "year": {"metric": "numeric", "weight": 1.0}}})
    assert sync_triggers(s)
    cols = (*COLS, "authors", "pub_year")

    async def put(ad: dict[str, Any], authors: str, year: str, created: str = "now()") -> str:
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
            cur = await c.execute(f"INSERT INTO ads ({', '.join(cols)}, created_at) "
                                  f"VALUES ({', '.join(['%s'] * len(cols))}, {created}) RETURNING id",
                                  [*(ad[k] for k in COLS), authors, year])
            return str((await cur.fetchone())[0])  # type: ignore[index]

    async with running_indexer(s), running_worker(s):
        orig = await put(ORIGINAL, "Jane Smith, Li Wei", "1999", "now() - interval '2 days'")
        copy = await put(ORIGINAL, "Li Wei, Jane Smith", " 2000 ")
        bad = await put(OTHER_PRODUCT, "Ann Other", "next year")
        await settle(s)
    async with opened_backend(s) as backend:
        docs = await backend.get("public.ads", [orig, copy, bad])
        report = await verify(s, backend, sample=1000, page_size=1000)
    # verify compares the stored fields with what the indexer would store (the text year parsed)
    assert (report["drifted"], report["sampled"], report["missing"]) == (0, 2, 1), report  # the bad row: missing
    assert docs[copy].fields["authors"] == "Li Wei, Jane Smith" and docs[copy].fields["year"] == 2000.0
    assert docs[orig].fields["year"] == 1999.0 and bad not in docs
    assert (await flags(s.dsn))[copy] == ("duplicate", orig)
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        cur = await c.execute("SELECT summary, reasons FROM nearsync.duplicate_flags WHERE record_id = %s", (copy,))
        summary, reasons = await cur.fetchone()  # type: ignore[misc]
    assert reasons["authors"] == {"metric": "token_set", "similarity": 1.0, "weight": 2.0}
    assert reasons["year"] == {"metric": "numeric", "similarity": 0.5, "weight": 1.0}
    assert "same authors" in summary
    dead = await dead_letters(s.dsn)
    assert [(q, rid) for q, rid, _, _ in dead] == [("index", bad)]
    assert dead[0][3].startswith("year: must be a number") and "'next year'" in dead[0][3]


async def _redo_in_order(dsn: str, descending: bool) -> None:
    """Clear the worker's output and queue every record for dedup again, by id ascending or descending."""
    order = "DESC" if descending else "ASC"
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        await c.execute("TRUNCATE nearsync.duplicate_flags, nearsync.clusters, nearsync.dedup_links, nearsync.dedup_parts")
        await c.execute("DELETE FROM nearsync.index_tracking WHERE queue = 'dedup'")
        await c.execute("INSERT INTO nearsync.index_tracking (queue, table_name, record_id, op, seq) "
                        "SELECT 'dedup', 'public.ads', id::text, 'U', nextval('nearsync.change_seq') "
                        f"FROM (SELECT id FROM ads ORDER BY id {order}) o")


async def _clusters(dsn: str) -> dict[str, str]:
    """``{record_id: original_id}`` of every cluster row."""
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        cur = await c.execute("SELECT record_id, original_id FROM nearsync.clusters")
        return {r[0]: r[1] for r in await cur.fetchall()}


async def test_a_component_over_max_component_gives_the_same_flags_whatever_the_order(dsettings: Settings) -> None:
    """A linked component larger than ``max_component`` is cut into parts by the link-score ladder
    (the weakest links first), a function of the links: processing order and batch size do not
    change the flags (they did when the component walk was cut where the walk from the batch
    stopped)."""
    s = with_dedup(dsettings, potential_threshold=40, duplicate_threshold=60, max_component=10,
                   cluster={"max_size": 20, "min_density": 0.0})
    async with running_indexer(s):
        for i in range(16):
            await add(s.dsn, chain_ad(i), f"now() - interval '{100 - i} minutes'")
        for j, (cam, lap) in enumerate(((0, 8), (1, 9))):  # two bundles, each weakly like both groups
            await add(s.dsn, chain_ad(cam) | {
                "title": f"{chain_ad(cam)['title']} with {chain_ad(lap)['title']} bundle",
                "body": f"{chain_ad(cam)['body']} {chain_ad(lap)['body']}", "price": 1200.0 + j},
                f"now() - interval '{50 - j} minutes'")
        await wait_until(lambda: _pending_index(s.dsn, 18), timeout=60)
    results = []
    for batch_size, descending in ((4, False), (3, True), (16, False), (1, True)):
        await _redo_in_order(s.dsn, descending)
        async with running_worker(with_daemon(s, concurrency=1, batch_size=batch_size)):
            await settle(s)
        results.append((await flags(s.dsn), await _clusters(s.dsn)))
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        weakest = await (await c.execute("SELECT min(score), count(*) FROM nearsync.dedup_links")).fetchone()
        parts = await (await c.execute("SELECT part_id, min(level), count(*) FROM nearsync.dedup_parts "
                                       "GROUP BY part_id ORDER BY 3")).fetchall()
    # One component of all 18 (the bundles link the two groups); cut at a level above the weak
    # links into parts of at most 10: the cameras, and the laptops with the bundles.
    assert weakest is not None and weakest[0] < 60 and weakest[1] > 16
    assert [n for _, _, n in parts] == [8, 10] and all(level > 0 for _, level, _ in parts), parts
    assert len(results[0][0]) >= 14, results[0]
    assert all(r == results[0] for r in results[1:]), results


async def _links(dsn: str) -> set[tuple[str, str]]:
    """Every stored link as ``(a, b)``."""
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        return {(a, b) for a, b in await (await c.execute("SELECT a, b FROM nearsync.dedup_links")).fetchall()}


async def grow_past_the_cap(s: Settings) -> tuple[str, str, str, str]:
    """A table's history that the candidate cap remembers (``s`` with ``candidate_cap = 1``): an
    edited repost Y of X is deduplicated while X is its best candidate, and links to X; then exact
    copies W of X and Z of Y arrive, so that a pass over the final table links only X-W and Y-Z.
    Runs the real indexer and worker until each step settles. Returns the ids (x, y, w, z)."""
    async with running_indexer(s), running_worker(s):
        x = await add(s.dsn, ORIGINAL, "now() - interval '4 days'")
        y = await add(s.dsn, EDITED, "now() - interval '3 days'")
        await settle(s)
        assert await _links(s.dsn) == {tuple(sorted((x, y), key=int))}  # Y's best candidate was X
        w = await add(s.dsn, ORIGINAL, "now() - interval '2 days'")
        z = await add(s.dsn, EDITED, "now() - interval '1 day'")
        await settle(s)
    return x, y, w, z


async def test_with_the_candidate_cap_binding_a_pass_over_the_settled_table_gives_the_clean_passs_flags(
        dsettings: Settings) -> None:
    """The candidate cap depends on the other records: an edited repost Y of X, deduplicated while
    X was Y's best candidate, links to X; once exact copies of both arrive (W of X, Z of Y), each
    record's one candidate (``candidate_cap = 1``) is its copy, and a pass over the final table
    links only X-W and Y-Z. A link outside a capped lookup stays only while one end is within the
    other's cap (the partner's lookup under the lock), so ``--requeue`` over the settled table gives
    the clean pass's links, clusters and flags, whatever the batch size and order."""
    s = with_dedup(dsettings, candidate_cap=1, exhaustive_below=0)
    x, y, w, z = await grow_past_the_cap(s)
    states = []
    for batch_size, descending in ((1, False), (4, True), (1, True)):
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:  # --requeue: output kept
            await c.execute("INSERT INTO nearsync.index_tracking (queue, table_name, record_id, op, seq) "
                            "SELECT 'dedup', 'public.ads', id::text, 'U', nextval('nearsync.change_seq') "
                            f"FROM (SELECT id FROM ads ORDER BY id {'DESC' if descending else 'ASC'}) o")
        async with running_worker(with_daemon(s, concurrency=1, batch_size=batch_size)):
            await settle(s)
        states.append((await _links(s.dsn), await flags(s.dsn), await _clusters(s.dsn)))
    await _redo_in_order(s.dsn, descending=False)  # a clean pass over the final table
    async with running_worker(s):
        await settle(s)
    clean = (await _links(s.dsn), await flags(s.dsn), await _clusters(s.dsn))
    pair = lambda p, q: tuple(sorted((p, q), key=int))  # noqa: E731
    assert clean[0] == {pair(x, w), pair(y, z)}, clean
    assert clean[1] == {w: ("duplicate", x), z: ("duplicate", y)}, clean
    assert all(st == clean for st in states), (states, clean)


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
async def test_nearsync_dedup_requeue_runs_a_pass_over_the_settled_table(dsettings: Settings, tmp_path: Path) -> None:
    """``nearsync dedup --requeue`` (a real subprocess) puts every indexed record on the dedup queue,
    logs how many, and works through them: the link the candidate cap left from the table's history
    goes and the clean pass's links remain; SIGTERM then stops it with exit 0."""
    s = with_dedup(dsettings, candidate_cap=1, exhaustive_below=0)
    x, y, w, z = await grow_past_the_cap(s)
    pair = lambda p, q: tuple(sorted((p, q), key=int))  # noqa: E731
    assert pair(x, y) in await _links(s.dsn)  # made while X was Y's best candidate
    cfg, log = tmp_path / "nearsync.toml", tmp_path / "worker.log"
    cfg.write_text(f'[database]\ndsn = "{s.dsn}"\n[index]\nbackend = "postgres"\n'
                   "[dedup]\nenabled = true\ncandidate_cap = 1\nexhaustive_below = 0\n")
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "daemon", "dedup", "--requeue", "--config", str(cfg),
                                 "--log-level", "info"], cwd=REPO, stdout=out, stderr=out, start_new_session=True)
    try:
        await wait_until(lambda: _requeue_done(s.dsn, log), timeout=60, interval=0.2)
        assert await _links(s.dsn) == {pair(x, w), pair(y, z)}
        assert await flags(s.dsn) == {w: ("duplicate", x), z: ("duplicate", y)}
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert [e["records"] for e in events if e["event"] == "requeued the table for the dedup worker"] == [4], events


async def _requeue_done(dsn: str, log: Path) -> bool:
    """The worker has logged its requeue and the dedup queue is empty again."""
    return "requeued the table" in log.read_text() and await pending(dsn, "dedup") == 0


async def test_links_made_while_a_scope_was_small_go_once_it_has_grown_and_is_deduplicated_again(
        dsettings: Settings) -> None:
    """A scope under ``exhaustive_below`` compares its records with one another whatever keys they
    share; once it has grown past it, candidates need ``min_match`` shared keys. A link made by the
    exhaustive comparison outlives the growth (history), and a pass over the settled table removes
    it, giving the clean pass's links and flags."""
    s = with_dedup(dsettings, exhaustive_below=3, min_match=200)  # no pair shares 200 keys: exhaustive or nothing
    async with running_indexer(s), running_worker(s):
        x = await add(s.dsn, ORIGINAL, "now() - interval '4 days'")
        y = await add(s.dsn, EDITED, "now() - interval '3 days'")
        await settle(s)
        assert await _links(s.dsn) == {tuple(sorted((x, y), key=int))}  # the scope of two: compared exhaustively
        assert (await flags(s.dsn))[y][1] == x
        for i in range(2):  # the scope grows past exhaustive_below
            await add(s.dsn, OTHER_PRODUCT | {"price": 180.0 + i}, f"now() - interval '{2 - i} days'")
        await settle(s)
        assert await _links(s.dsn) == {tuple(sorted((x, y), key=int))}  # made before the growth: still there
    async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:  # --requeue: output kept
        await c.execute("INSERT INTO nearsync.index_tracking (queue, table_name, record_id, op, seq) "
                        "SELECT 'dedup', 'public.ads', id::text, 'U', nextval('nearsync.change_seq') FROM ads")
    async with running_worker(s):
        await settle(s)
    requeued = (await _links(s.dsn), await flags(s.dsn), await _clusters(s.dsn))
    await _redo_in_order(s.dsn, descending=True)  # a clean pass over the final table
    async with running_worker(s):
        await settle(s)
    assert requeued == (await _links(s.dsn), await flags(s.dsn), await _clusters(s.dsn)) == (set(), {}, {})


async def test_a_shops_item_number_and_a_makers_model_number_are_no_conflict(dsettings: Settings) -> None:
    """metrics.separate_schemes: one listing titled with an all-digit item number (``26110``), another
    with the maker's model number (``COOLPIXS550PL``) of the same camera in the same colour are one
    item (flagged); two item numbers of one scheme that differ (``26110`` / ``26108``) are two items,
    and a colour conflict still separates a pair whose codes are of two schemes."""
    s = dsettings
    body = "Nikon Coolpix S550, 10 megapixels, 5x optical zoom, 2.5 inch screen. New in box, shipped within two days."
    ad = ORIGINAL | {"body": body, "price": 199.0}
    async with running_indexer(s), running_worker(s):
        plum = await add(s.dsn, ad | {"title": "Nikon Coolpix S550 Digital Camera - Plum - 26110"},
                         "now() - interval '2 days'")
        makers = await add(s.dsn, ad | {"title": "Nikon CoolPix S550 Plum Digital Camera - COOLPIXS550PL"})
        other_number = await add(s.dsn, ad | {"title": "Nikon Coolpix S550 Digital Camera - Plum - 26108"},
                          "now() - interval '1 day'")
        black_makers = await add(s.dsn, ad | {"title": "Nikon CoolPix S550 Black Digital Camera - COOLPIXS550BK"})
        await settle(s)
    got = await flags(s.dsn)
    assert got[makers][1] == plum
    assert other_number not in got and black_makers not in got and plum not in got


def _screened(loop: Any) -> int:
    """Candidate documents the worker's PostgreSQL candidate store read in part (its lead-field screen)."""
    backend = loop.handler.backend
    return int(getattr(getattr(backend, "pg", backend), "screened", 0))


@pytest.mark.parametrize("backend_name", ["postgres", PG_CANDIDATES], indirect=True)  # the search store has no screen
async def test_the_lead_field_screen_changes_no_link_cluster_or_flag(dsettings: Settings,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookup reads most candidates of product listings only in part (their model numbers and
    title codes) and drops those whose model number conflicts, as the scorer's first check would:
    the links (with their scores and reasons), clusters, parts and flags are those of a worker that
    reads every candidate whole."""
    from bench.corpus_products import build_corpus
    from tests.data_paths import require

    data = require("abt-buy", "Abt.csv").parents[1]
    s = with_dedup(dsettings, scope="global", exhaustive_below=0, candidate_cap=20)
    # an index larger than the document cache, where the screen pays
    s = replace(s, index=replace(s.index, options={**s.index.options, "cached_documents": 40}))
    listings = build_corpus(160, seed=7, data_dir=data, shops=3)
    base = ORIGINAL | {"body": "", "price": None}
    ads = [(base | {k: v for k, v in x.fields.items() if k in COLS}, f"now() - interval '{200 - i} minutes'")
           for i, x in enumerate(listings)]
    async with running_indexer(s), running_worker(with_daemon(s, batch_size=40)) as w:
        await insert_many(s.dsn, ads)
        await settle(s)
        screened = _screened(w)
        # no batch failed, not even to succeed in parts (a screen the scorer disagrees with raises)
        assert (w.totals["failed"], w.totals.get("split", 0), w.totals["acked"]) == (0, 0, len(ads)), w.totals
    assert screened > len(ads) // 4, screened  # many candidates were read in part
    with_screen = (await _worker_output(s.dsn), await _scored_links(s.dsn))
    monkeypatch.setattr(dedup_worker, "candidate_screen", lambda *a, **k: None)
    await _redo_all(s.dsn)
    async with running_worker(with_daemon(s, batch_size=40)) as w:
        await settle(s)
        assert _screened(w) == 0
    assert len(with_screen[0][0]) > 10 and len(with_screen[1]) > 10, with_screen  # flags and links to compare
    assert (await _worker_output(s.dsn), await _scored_links(s.dsn)) == with_screen


async def _scored_links(dsn: str) -> list[tuple[Any, ...]]:
    """Every stored link with its score, reasons and summary, sorted."""
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        return [tuple(r) for r in await (await c.execute(
            "SELECT a, b, score, reasons, summary FROM nearsync.dedup_links ORDER BY a, b")).fetchall()]


def test_a_pair_known_below_the_threshold_takes_its_known_score_and_is_not_scored_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """score_found with the worker's memo (``known``) gives the scores and flags it gives without it,
    and scores only the pairs not known below the potential threshold."""
    options = dedup_options(settings_from_mapping({}, env={}))
    docs = [IndexDocument("public.ads", str(i), 7, {k: ad[k] for k in ("title", "body", "price", "lat", "lon")})
            for i, ad in enumerate((ORIGINAL, EDITED, OTHER_PRODUCT, OTHER_PRODUCT | {"price": 90.0}), start=1)]
    me, cands = docs[0], [Candidate(d.record_id, 1, d) for d in docs[1:]]
    plain = dedup_worker.score_found(me.record_id, me, cands, options)
    scores = {(x.a, x.b, 7, 7): x.score.score for x in plain.scored}
    below = sum(x.flag is None for x in plain.scored)
    assert 0 < below < len(cands)  # both kinds of pair are in the test
    calls = []
    real = dedup_worker.pair_scorer

    def counting(cfg: Any, floor: Any = None) -> Any:
        score = real(cfg, floor)

        def counted(a: Any, b: Any) -> Any:
            calls.append(1)
            return score(a, b)
        return counted

    monkeypatch.setattr(dedup_worker, "pair_scorer", counting)
    memo = dedup_worker.score_found(me.record_id, me, cands, options, known=scores.get)
    assert [(x.a, x.b, x.score.score, x.flag) for x in memo.scored] == \
        [(x.a, x.b, x.score.score, x.flag) for x in plain.scored]
    assert memo.reused == below and len(calls) == len(cands) - below
    assert [x.score for x in memo.scored if x.flag] == [x.score for x in plain.scored if x.flag]  # reasons too


async def test_lookups_sent_ahead_chunk_by_chunk_score_as_one_lookup(dsettings: Settings,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """score_candidates_many sends the next chunk's lookup before scoring the current one: the
    scored candidates are those of one lookup for all the records."""
    s = dsettings
    async with running_indexer(s), running_worker(s):
        ids = [await add(s.dsn, ad) for ad in (ORIGINAL, EDITED, OTHER_PRODUCT, ORIGINAL, EDITED)]
        await settle(s)
    async with opened_backend(s) as backend:
        docs = await backend.get("public.ads", ids)
        items = [(rid, docs[rid]) for rid in ids]
        options = dedup_options(s)
        whole = await dedup_worker.score_candidates_many("public.ads", items, backend, options)
        monkeypatch.setattr(dedup_worker, "LOOKUP_CHUNK", 2)  # three chunks, two of them looked up ahead
        chunked = await dedup_worker.score_candidates_many("public.ads", items, backend, options)
    assert [[(x.a, x.b, x.score.score, x.flag) for x in r.scored] for r in chunked] == \
        [[(x.a, x.b, x.score.score, x.flag) for x in r.scored] for r in whole]
    assert all(any(r.scored for r in whole[i : i + 2]) for i in (0, 2, 4))  # each chunk has candidates


async def _worker_output(dsn: str) -> tuple[list[tuple[Any, ...]], ...]:
    """Every flag (with its score, reasons and summary), cluster row and part row, sorted."""
    out = []
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        for q in ("SELECT record_id, flag, original_id, cluster_id, score, reasons, summary, signature_version "
                  "FROM nearsync.duplicate_flags ORDER BY record_id",
                  "SELECT record_id, cluster_id, original_id FROM nearsync.clusters ORDER BY record_id",
                  "SELECT record_id, part_id, level FROM nearsync.dedup_parts ORDER BY record_id"):
            out.append([tuple(r) for r in await (await c.execute(q)).fetchall()])
    return tuple(out)


async def test_components_kept_by_the_worker_give_the_same_rows_as_clustering_from_scratch(
        dsettings: Settings) -> None:
    """The worker keeps each component's clusters and flags by their inputs (links, document
    versions, dismissed pairs) and takes unchanged components from there: after inserts, an edit,
    a delete, a new creation time for an original (same links) and a pass that re-queues every
    record (every component unchanged), its output rows are those of a fresh worker clustering
    everything once."""
    s = with_dedup(dsettings, potential_threshold=40, duplicate_threshold=60,
                   cluster={"max_size": 20, "min_density": 0.0})
    one = with_daemon(s, concurrency=1, batch_size=3)
    async with running_indexer(s), running_worker(one) as w:
        ids = [await add(s.dsn, chain_ad(i), f"now() - interval '{100 - i} minutes'") for i in range(16)]
        await settle(s)
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
            await c.execute("UPDATE ads SET title = %s WHERE id = %s", (chain_ad(9)["title"] + " boxed", int(ids[3])))
            await c.execute("DELETE FROM ads WHERE id = %s", (int(ids[12]),))
        await settle(s)
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
            # the same links, another original: only the document's version tells the change
            await c.execute("UPDATE ads SET created_at = now(), body = body || ' ' WHERE id = %s", (int(ids[0]),))
        await settle(s)
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
            await c.execute("INSERT INTO nearsync.index_tracking (queue, table_name, record_id, op, seq) "
                            "SELECT 'dedup', 'public.ads', id::text, 'U', nextval('nearsync.change_seq') FROM ads")
        await settle(s)
        kept = len(w.handler._clustered)
    incremental = await _worker_output(s.dsn)
    await _redo_all(s.dsn)
    async with running_worker(with_daemon(s, concurrency=1, batch_size=16)):
        await settle(s)
    assert kept > 0 and len(incremental[0]) >= 8, incremental
    assert await _worker_output(s.dsn) == incremental


async def test_the_walk_from_whole_components_is_read_from_the_links_around_them(dsettings: Settings) -> None:
    """The worker's first walk reads only the links touching its start records when none of them
    leads out (``links_around``): its answer is the recursive walk's, for whole components, unions
    of them and single records of larger ones, at every level of the part ladder and whatever the
    walk's limit; and both the shortcut and the walk are taken."""
    from daemon.db.queries import query
    from daemon.dedup.parts import components, part_levels

    s = with_dedup(dsettings, potential_threshold=40, duplicate_threshold=60,
                   cluster={"max_size": 20, "min_density": 0.0})
    async with running_indexer(s), running_worker(s) as w:
        ids = [await add(s.dsn, chain_ad(i), f"now() - interval '{100 - i} minutes'") for i in range(16)]
        ids.append(await add(s.dsn, OTHER_PRODUCT))
        await settle(s)
        h = w.handler
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as conn:
            rows = await (await conn.execute("SELECT a, b, score FROM nearsync.dedup_links")).fetchall()
            comps = components(ids, [dedup_worker.StoredLink(a, b, float(x)) for a, b, x in rows])
            big = max(comps, key=len)
            assert len(big) >= 8 and any(len(c) == 1 for c in comps), comps
            starts = [*comps, sorted(ids), [big[0]], [big[0], big[-1]], [big[0], comps[-1][0]], [*big, "999999"]]
            closed = []
            for start in starts:
                for level in part_levels(40):
                    for limit in (len(start) + 1, len(big) + 20):
                        want = await h._walk(conn, start, level, limit)
                        got = await h._walk_or_around(conn, start, level, limit)
                        assert (sorted(got[0]), sorted(got[1])) == (sorted(want[0]), sorted(want[1])), (start, level)
                        cur = await conn.execute(query("links_around"),
                                                 {"table": "public.ads", "ids": start, "min_score": level})
                        closed.append((await cur.fetchone())[0])  # type: ignore[index]
    assert any(closed) and not all(closed)


async def test_rows_known_unchanged_are_not_rewritten_and_the_rest_are_as_from_scratch(dsettings: Settings) -> None:
    """The worker leaves alone the part and cluster rows its transaction read as they are
    (``delete_links_of``, :class:`~daemon.dedup.worker.StoredRows`): one record at a time, through
    parts cut above level 0, an edit that moves a record to the other group, one that takes a record
    out of every part and cluster and a delete, its rows are those of a fresh worker clustering
    everything once; and re-queuing every record rewrites no row."""
    s = with_dedup(dsettings, potential_threshold=40, duplicate_threshold=60, max_component=10,
                   cluster={"max_size": 20, "min_density": 0.0})
    async with running_indexer(s):
        ids = [await add(s.dsn, chain_ad(i), f"now() - interval '{100 - i} minutes'") for i in range(16)]
        for j, (cam, lap) in enumerate(((0, 8), (1, 9))):  # two bundles, each weakly like both groups
            ids.append(await add(s.dsn, chain_ad(cam) | {
                "title": f"{chain_ad(cam)['title']} with {chain_ad(lap)['title']} bundle",
                "body": f"{chain_ad(cam)['body']} {chain_ad(lap)['body']}", "price": 1200.0 + j},
                f"now() - interval '{50 - j} minutes'"))
        await wait_until(lambda: _pending_index(s.dsn, 18), timeout=60)
        async with running_worker(with_daemon(s, concurrency=1, batch_size=1)):
            await settle(s)
            async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
                parts = await (await c.execute("SELECT count(DISTINCT part_id), min(level) FROM nearsync.dedup_parts")).fetchone()
                await c.execute("UPDATE ads SET title = %s, body = %s WHERE id = %s",
                                (chain_ad(9)["title"], chain_ad(9)["body"], int(ids[2])))
                await c.execute("UPDATE ads SET title = %s, body = %s, category = 'garden' WHERE id = %s",
                                ("Garden hose 30 m reel", "A green garden hose on a reel, 30 metres.", int(ids[5])))
                await c.execute("DELETE FROM ads WHERE id = %s", (int(ids[12]),))
            await settle(s)
            incremental = await _worker_output(s.dsn)
            xmins = ("SELECT (SELECT array_agg(xmin::text ORDER BY record_id) FROM nearsync.clusters), "
                     "(SELECT array_agg(xmin::text ORDER BY record_id) FROM nearsync.dedup_parts)")
            async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
                before = await (await c.execute(xmins)).fetchone()
                await c.execute("INSERT INTO nearsync.index_tracking (queue, table_name, record_id, op, seq) "
                                "SELECT 'dedup', 'public.ads', id::text, 'U', nextval('nearsync.change_seq') FROM ads")
            await settle(s)
            async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
                after = await (await c.execute(xmins)).fetchone()
    assert parts is not None and parts[0] >= 2 and parts[1] > 0, parts  # cut above level 0
    assert await _worker_output(s.dsn) == incremental and before == after
    await _redo_all(s.dsn)
    async with running_worker(with_daemon(s, concurrency=1, batch_size=16)):
        await settle(s)
    out = await _worker_output(s.dsn)
    assert out == incremental and len(out[1]) >= 8 and ids[5] not in {r[0] for r in out[1]}, incremental
