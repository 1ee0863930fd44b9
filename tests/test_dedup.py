"""The dedup worker against a real PostgreSQL and each index backend: flags, scope, edits,
deletes, cluster splitting, and parallel workers."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from daemon.backends.base import DeleteOp, Outcome
from daemon.config import Settings
from daemon.ops.reindex import reindex
from daemon.service import opened_backend
from daemon.signatures import SIGNATURE_SCHEMA_VERSION
from daemon.capture.queue import relay
from tests.conftest import (
    flags,
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
        await c.execute("TRUNCATE nearsync.duplicate_flags, nearsync.clusters, nearsync.dedup_links")
        await c.execute("INSERT INTO nearsync.index_tracking (queue, table_name, record_id, op, seq) "
                        "SELECT 'dedup', 'public.ads', id::text, 'U', nextval('nearsync.change_seq') FROM ads")


async def _pending_index(dsn: str) -> bool:
    from tests.conftest import pending

    return await pending(dsn, "index") == 0 and await pending(dsn, "dedup") == 30
