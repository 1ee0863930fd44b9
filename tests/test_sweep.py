"""The dedup worker's sweep (daemon.dedup.sweep): while the queue is idle, the table's records are
processed again, so that the links the candidate cap left from the table's history become those of a
clean pass without ``nearsync dedup --requeue``. Real PostgreSQL, real triggers, the real worker."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import structlog

from daemon.config import Settings
from daemon.db.pool import configure_session
from daemon.db.queries import query
from daemon.dedup.settings import SWEEP_PER_S, dedup_options
from daemon.dedup.sweep import CHUNK_LEASE_S, MAX_CHUNK, Sweeper, chunk_size, sweeping
from daemon.errors import ConfigError
from daemon.dedup.sweep import sweep_rate
from daemon.http.moderation import decide_pair
from daemon.ops.rarity import refresh_rarity
from daemon.ops.requeue import live_ids, requeue_for_dedup
from daemon.service import opened_backend, status
from tests.conftest import PG_CANDIDATES, REPO, flags, running_indexer, running_worker, wait_until, with_dedup
from tests.test_dedup import ORIGINAL, _clusters, _links, add, grow_past_the_cap, settle

TABLE = "public.ads"


def pair(p: str, q: str) -> tuple[str, str]:
    return tuple(sorted((p, q), key=int))  # type: ignore[return-value]


async def _grown_table(s: Settings) -> tuple[str, str, str, str]:
    """``test_dedup``'s history (:func:`grow_past_the_cap`), and the link X-Y it leaves."""
    x, y, w, z = await grow_past_the_cap(s)
    assert pair(x, y) in await _links(s.dsn)  # the link the table's history left
    return x, y, w, z


async def _sweep_status(dsn: str) -> tuple[str, int] | None:
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        row = await (await c.execute(query("sweep_status"), {"table": TABLE})).fetchone()
        return None if row is None else (row[0], int(row[1]))


async def _passes(dsn: str) -> int:
    st = await _sweep_status(dsn)
    return 0 if st is None else st[1]


def test_sweep_per_s_is_validated_and_defaults_to_20(settings: Settings) -> None:
    assert dedup_options(settings).sweep_per_s == SWEEP_PER_S == 20.0
    assert dedup_options(with_dedup(settings, sweep_per_s=0)).sweep_per_s == 0.0
    assert dedup_options(with_dedup(settings, sweep_per_s=2.5)).sweep_per_s == 2.5
    for bad in (-1, float("nan"), float("inf"), 10_001, True, "20"):
        with pytest.raises(ConfigError, match="dedup.sweep_per_s"):
            dedup_options(with_dedup(settings, sweep_per_s=bad))


def test_a_sweep_chunk_is_a_quarter_of_a_seconds_worth() -> None:
    assert [chunk_size(r) for r in (0.1, 1, 2.5, 20, 100, 5000)] == [1, 1, 1, 5, 25, MAX_CHUNK]


SWEEPABLE = pytest.mark.parametrize("backend_name", ["postgres", PG_CANDIDATES], indirect=True)
"""The backends the sweep runs on: the candidate keys in PostgreSQL (the default store)."""


@SWEEPABLE
async def test_the_sweep_gives_the_links_and_flags_of_a_clean_pass_without_a_requeue(settings: Settings) -> None:
    """With the cap binding, the table's history leaves the link X-Y; the sweep (in the worker's event
    loop, while its queue is idle) processes every record again and one pass brings the links, flags
    and clusters to those of a clean pass over the final table: X-W and Y-Z only, W and Z duplicates."""
    s = with_dedup(settings, candidate_cap=1, exhaustive_below=0)
    x, y, w, z = await _grown_table(s)
    async with running_worker(s) as loop, \
            sweeping(s.dsn, TABLE, loop.handler, 200.0, loop.idle, lambda: loop.stopping) as sweeper:
        assert sweeper is not None and sweeper.chunk == 50
        # a pass (counted once its last chunk is processed) that saw no change: the sweep rests
        await wait_until(lambda: _rested(s), timeout=60, interval=0.1)
        await settle(s)
    assert await _links(s.dsn) == {pair(x, w), pair(y, z)}
    assert await flags(s.dsn) == {w: ("duplicate", x), z: ("duplicate", y)}
    clusters = await _clusters(s.dsn)
    assert clusters[w] == clusters[x] and clusters[z] == clusters[y] and clusters[x] != clusters[y], clusters
    sweep = (await status(s))["sweep"]  # nearsync status reports the sweep's progress
    assert sweep["passes"] >= 1 and sweep["last_pass_s"] >= 0 and sweep["after_id"] in ("", x, y, w, z), sweep


async def _rested(s: Settings) -> bool:
    """The sweep has completed a pass and rests (nothing changed while that pass ran)."""
    sweep = (await status(s)).get("sweep")
    return sweep is not None and sweep["passes"] >= 1 and sweep["resting"]


@SWEEPABLE
async def test_sweep_chunks_walk_the_table_in_id_order_and_wrap_around(settings: Settings) -> None:
    """``Sweeper.step`` takes the cursor's next chunk under its lock and processes it: chunks of 2 over
    5 records give 2, 2, 1 (the pass is done, the cursor back at the start); nothing changed during
    that pass, so the sweep rests (nothing handed out, the cursor unmoved) until a worker starts
    again, then takes 2 again; two sweepers share one cursor, so a chunk is never handed out twice."""
    s = with_dedup(settings)
    async with running_indexer(s), running_worker(s):
        ids = [await add(s.dsn, ORIGINAL | {"title": f"{t} table lamp"}) for t in ("oak", "pine", "teak", "ash", "elm")]
        await settle(s)
    async with running_worker(s) as loop, \
            await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c1, \
            await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c2:
        for c in (c1, c2):
            await configure_session(c)
        await c1.execute(query("sweep_start"), {"table": TABLE})
        one = Sweeper(s.dsn, TABLE, loop.handler, 8.0, loop.idle, lambda: False)
        two = Sweeper(s.dsn, TABLE, loop.handler, 8.0, loop.idle, lambda: False)
        assert (one.chunk, one.interval_s) == (2, 0.25)
        sizes = [await one.step(c1), await two.step(c2), await one.step(c1)]
        assert sizes == [2, 2, 1] and one.swept + two.swept == 5
        assert await _sweep_status(s.dsn) == ("", 1) and not one.resting
        assert [await one.step(c1), await two.step(c2)] == [0, 0] and one.resting and two.resting
        assert await _sweep_status(s.dsn) == ("", 1)
        await c2.execute(query("sweep_start"), {"table": TABLE})  # a worker (re)starting: a pass again
        # both at once: the second waits for the first's chunk and takes the next one
        got = await asyncio.gather(one.step(c1), two.step(c2))
        assert sorted(got) == [2, 2]
        assert await _sweep_status(s.dsn) == (sorted(ids)[3], 1)
        sweep = (await status(s))["sweep"]  # the pass's progress, as nearsync status shows it
        assert (sweep["position"], sweep["records"], sweep["resting"]) == (4, 5, False) and sweep["eta_s"] >= 0, sweep
        if s.index.backend == "postgres":  # the same as text (the defaults: public.ads on the PostgreSQL backend)
            shown = subprocess.run([sys.executable, "-m", "daemon", "status", "--dsn", s.dsn], cwd=REPO,
                                   capture_output=True, text=True, timeout=60)
            assert shown.returncode == 0, shown
            assert f"after record {sorted(ids)[3]}: 4 of 5 records, about " in shown.stdout, shown.stdout


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
async def test_nearsync_dedup_sweeps_the_table_while_idle(settings: Settings, tmp_path: Path) -> None:
    """``nearsync dedup`` (a real subprocess, the setting from its config file) sweeps the table while
    its queue is idle: the link the candidate cap left from the table's history goes, the clean pass's
    links remain, the sweep then rests (and logs it), and SIGTERM stops it with exit 0. With
    ``sweep_per_s = 0`` it does not sweep."""
    s = with_dedup(settings, candidate_cap=1, exhaustive_below=0)
    x, y, w, z = await _grown_table(s)
    base = (f'[database]\ndsn = "{s.dsn}"\n[index]\nbackend = "postgres"\n'
            "[dedup]\nenabled = true\ncandidate_cap = 1\nexhaustive_below = 0\n")
    for rate, sweeps in (("0", False), ("100", True)):
        cfg, log = tmp_path / f"nearsync-{rate}.toml", tmp_path / f"worker-{rate}.log"
        cfg.write_text(base + f"sweep_per_s = {rate}\n")
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "daemon", "dedup", "--config", str(cfg), "--log-level", "info"],
                                    cwd=REPO, stdout=out, stderr=out, start_new_session=True)
        try:
            if sweeps:
                await wait_until(lambda: _rested(s), timeout=60, interval=0.2)
                await wait_until(lambda: _logged(log, "sweep resting"), timeout=30, interval=0.2)  # its next look
                await settle(s)
                shown = subprocess.run([sys.executable, "-m", "daemon", "status", "--config", str(cfg)], cwd=REPO,
                                       capture_output=True, text=True, timeout=60)
                assert shown.returncode == 0 and "resting: nothing changed since the last pass began" in shown.stdout, shown
            else:
                await wait_until(lambda: _logged(log, "listening"), timeout=60, interval=0.2)
                await asyncio.sleep(1.5)  # long enough for a sweep of 100 records a second to take all four
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        events = [json.loads(line)["event"] for line in log.read_text().splitlines() if line.startswith("{")]
        if sweeps:
            assert "sweep on" in events and "sweep resting: nothing changed since the last pass began" in events, events
            assert await _links(s.dsn) == {pair(x, w), pair(y, z)}
            assert await flags(s.dsn) == {w: ("duplicate", x), z: ("duplicate", y)}
        else:
            assert "sweep on" not in events, events
            assert pair(x, y) in await _links(s.dsn) and await _sweep_status(s.dsn) is None


async def _logged(log: Path, event: str) -> bool:
    return event in log.read_text()


async def test_the_sweep_is_off_where_the_keys_live_in_the_search_index(settings: Settings, backend_name: str) -> None:
    """On a search backend keeping the candidate keys in its own documents (``candidate_store =
    "search"``) there are no lookup rows to walk: the rate is 0 there, and the configured one
    elsewhere."""
    async with opened_backend(settings) as backend:
        keyed = backend_name in ("opensearch", "elasticsearch")  # tests.conftest.index_settings: the "search" store
        assert sweep_rate(20.0, backend, TABLE) == (0.0 if keyed else 20.0)
        assert sweep_rate(0.0, backend, TABLE) == 0.0


class _FailingFor:
    """The worker's real handler, except that a batch holding ``poison`` raises (a fault injected in
    front of it, as ``wrap_backend`` does for the index)."""

    def __init__(self, handler: object, poison: str) -> None:
        self.handler, self.poison = handler, poison

    async def process(self, conn: psycopg.AsyncConnection, batch: list) -> object:  # type: ignore[type-arg]
        if any(c.record_id == self.poison for c in batch):
            raise RuntimeError(f"cannot handle {self.poison}")
        return await self.handler.process(conn, batch)  # type: ignore[attr-defined]


@SWEEPABLE
async def test_a_chunk_that_fails_is_logged_and_the_sweep_goes_on(settings: Settings) -> None:
    """A chunk whose processing fails (not the database or the index) is handled in halves, as the
    queue loop does: the record that fails alone is logged and left to the next pass, the others of
    its chunk are processed, and the pass completes; the failure keeps the sweep from resting, so
    the next pass takes the record again."""
    s = with_dedup(settings)
    async with running_indexer(s), running_worker(s):
        ids = sorted([await add(s.dsn, ORIGINAL | {"title": f"{t} table lamp"}) for t in ("oak", "pine", "teak")])
        await settle(s)
    async with running_worker(s) as loop, await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as conn:
        await configure_session(conn)
        await conn.execute(query("sweep_start"), {"table": TABLE})
        sweeper = Sweeper(s.dsn, TABLE, _FailingFor(loop.handler, ids[1]), 12.0, loop.idle,  # type: ignore[arg-type]
                          lambda: False)
        assert sweeper.chunk == 3
        with structlog.testing.capture_logs() as logs:
            assert [await sweeper.step(conn), await sweeper.step(conn)] == [2, 0]  # the chunk, then the pass's end
        assert sweeper.swept == 2 and await _sweep_status(s.dsn) == ("", 1)
        assert await sweeper.step(conn) == 2 and not sweeper.resting  # the next pass, not a rest
    failed = [e for e in logs if e["event"] == "sweep: record failed alone; left to the next pass"]
    assert [(e["record_id"], e["log_level"]) for e in failed] == [(ids[1], "error")], logs
    assert "cannot handle" in failed[0]["error"]


async def _resting(s: Settings) -> bool:
    return bool((await status(s))["sweep"]["resting"])


async def _row_version(dsn: str) -> tuple[str, ...]:
    """The sweep row's physical version (``xmin``, ``ctid``) and every column: equal before and
    after only if nothing wrote the row."""
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        row = await (await c.execute("SELECT xmin::text, ctid::text, s::text FROM nearsync.dedup_sweeps s "
                                     "WHERE table_name = %s", (TABLE,))).fetchone()
        assert row is not None
        return tuple(row)


@SWEEPABLE
async def test_the_sweep_rests_on_a_settled_table_until_something_changes(settings: Settings) -> None:
    """A pass over a table that nothing changed while it ran gives the clean pass's flags, so the
    sweep then rests: it hands out nothing and writes nothing (``nearsync status`` says so). A change
    processed from the dedup queue in the middle of a pass keeps that pass from settling: a whole
    pass follows. It resumes, with a whole pass, after a change processed from the dedup queue, a
    moderator's decision and a new corpus snapshot, each time resting again after one quiet pass."""
    s = with_dedup(settings)
    async with running_indexer(s), running_worker(s):
        orig = await add(s.dsn, ORIGINAL)
        for t in ("oak", "pine"):
            await add(s.dsn, ORIGINAL | {"title": f"{t} table lamp", "body": f"A {t} table lamp, barely used."})
        await settle(s)
    async with running_worker(s) as loop, await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as conn:
        await configure_session(conn)
        await conn.execute(query("sweep_start"), {"table": TABLE})
        sweeper = Sweeper(s.dsn, TABLE, loop.handler, 8.0, loop.idle, lambda: False)

        async def a_pass_then_rest(records: int) -> None:
            passes, sizes = await _passes(s.dsn), list[int]()
            while await _passes(s.dsn) == passes and len(sizes) < 5:
                sizes.append(await sweeper.step(conn))
            assert sizes == {4: [2, 2, 0], 5: [2, 2, 1]}[records] and not sweeper.resting  # chunks of 2
            assert await _passes(s.dsn) == passes + 1
            before = await _row_version(s.dsn)
            assert [await sweeper.step(conn) for _ in range(3)] == [0, 0, 0] and sweeper.resting
            assert await _row_version(s.dsn) == before and await _resting(s)

        async def add_through_the_queue(ad: dict[str, object]) -> str:
            async with running_indexer(s):
                rid = await add(s.dsn, ad)
                await settle(s)
            return rid

        # a change processed from the queue while a pass is under way: no rest after that pass
        assert await sweeper.step(conn) == 2
        await add_through_the_queue(ORIGINAL | {"title": "elm table lamp", "body": "An elm table lamp."})
        assert [await sweeper.step(conn), await sweeper.step(conn)] == [2, 0]  # the pass ends (4 records)
        assert await _passes(s.dsn) == 1 and not await _resting(s)
        await a_pass_then_rest(4)
        # a change of the table, processed from the dedup queue by the worker (not the sweep)
        dup = await add_through_the_queue(ORIGINAL)
        found = await flags(s.dsn)
        assert not await _resting(s) and found[dup] == ("duplicate", orig)
        await a_pass_then_rest(5)
        # a moderator's decision
        async with opened_backend(s) as backend, \
                await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as mod:
            await decide_pair(mod, backend, TABLE, dup, orig, "confirm", "tester")
            assert not await _resting(s)
            await a_pass_then_rest(5)
            assert await flags(s.dsn) == found  # the passes over the settled table changed no flag
            # a new corpus snapshot (token rarity: scores change)
            await refresh_rarity(s, backend, table=TABLE, progress=False)
            assert not await _resting(s)
            await a_pass_then_rest(5)
            # that pass gave the flags of a whole pass through the queue with the snapshot
            swept = await flags(s.dsn)
            assert swept[dup] == ("duplicate", orig)
            await requeue_for_dedup(mod, TABLE, await live_ids(backend, TABLE))
            await settle(s)
        assert await flags(s.dsn) == swept


@SWEEPABLE
async def test_a_chunk_never_reported_processed_keeps_the_sweep_from_resting(settings: Settings) -> None:
    """A worker that stops for good (killed, or not started again) with a chunk in hand never
    reports it processed: when the pass ends the sweep neither rests nor starts the next pass while
    the chunk's lease runs, and once it has run out a new pass goes over the whole table, after
    which the sweep rests."""
    s = with_dedup(settings)
    async with running_indexer(s), running_worker(s):
        for t in ("oak", "pine", "teak", "ash", "elm"):
            await add(s.dsn, ORIGINAL | {"title": f"{t} table lamp"})
        await settle(s)
    async with running_worker(s) as loop, \
            await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as conn, \
            await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as gone:
        await configure_session(conn)
        await conn.execute(query("sweep_start"), {"table": TABLE})
        # the first chunk of the pass, handed to a worker that goes away with it
        row = await (await gone.execute(query("sweep_next"), {"table": TABLE, "limit": 2,
                                                               "lease_s": CHUNK_LEASE_S})).fetchone()
        assert row is not None and len(row[0]) == 2
        sweeper = Sweeper(s.dsn, TABLE, loop.handler, 8.0, loop.idle, lambda: False)
        assert [await sweeper.step(conn), await sweeper.step(conn)] == [2, 1] and await _passes(s.dsn) == 1
        before = await _row_version(s.dsn)
        assert [await sweeper.step(conn) for _ in range(3)] == [0, 0, 0]  # waiting: no rest, no new pass
        assert not sweeper.resting and not await _resting(s) and await _row_version(s.dsn) == before
        await conn.execute("UPDATE nearsync.dedup_sweeps SET handed_at = handed_at - make_interval(secs => %s) "
                           "WHERE table_name = %s", (CHUNK_LEASE_S + 1, TABLE))  # the lease runs out
        assert [await sweeper.step(conn) for _ in range(3)] == [2, 2, 1] and await _passes(s.dsn) == 2
        assert await sweeper.step(conn) == 0 and sweeper.resting and await _resting(s)
