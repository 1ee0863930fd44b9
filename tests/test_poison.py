"""Poison records and the stall watchdog (daemon.capture.poison, daemon.capture.watchdog), against a
real PostgreSQL: takeovers counted by the claim, suspects handled alone, poison dead-lettered, and a
worker process whose handler never returns cut by the watchdog and restarted until the queue flows."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from daemon.capture.loop import QueueLoop
from daemon.capture.poison import screen
from daemon.capture.queue import Claimed, Queue, hold_worker_lock, register_worker
from daemon.config import DaemonSettings, settings_from_mapping
from daemon.errors import ConfigError
from daemon.http.metrics import LoopMetrics
from daemon.ops.migrate import upgrade
from tests.conftest import make_settings
from tests.poison_worker import HangingHandler

REPO = Path(__file__).resolve().parents[1]
TABLE = "public.ads"


def _row(rid: str, takeovers: int) -> Claimed:
    return Claimed(TABLE, rid, "U", 1, dt.datetime.now(dt.timezone.utc), 0, takeovers)


def test_screen_sorts_poison_suspects_and_the_rest() -> None:
    batch = [_row("a", 0), _row("b", 2), _row("c", 3), _row("d", 1), _row("e", 2)]
    s = screen(batch, 3, isolating_elsewhere=False)
    assert [c.record_id for c in s.poison] == ["c"]
    assert s.suspect is not None and s.suspect.record_id == "b"
    assert sorted(c.record_id for c in s.release) == ["a", "d", "e"]
    assert s.handle == []
    s = screen(batch, 3, isolating_elsewhere=True)
    assert s.suspect is None and sorted(c.record_id for c in s.release) == ["b", "e"]
    assert sorted(c.record_id for c in s.handle) == ["a", "d"]
    s = screen([_row("a", 0), _row("d", 1)], 3, isolating_elsewhere=False)
    assert (s.poison, s.suspect, s.release, [c.record_id for c in s.handle]) == ([], None, [], ["a", "d"])


@pytest.mark.parametrize(("daemon", "key"), [({"max_takeovers": 1}, "daemon.max_takeovers"),
                                             ({"stall_timeout_s": 0.5}, "daemon.stall_timeout_s"),
                                             ({"stall_timeout_s": "soon"}, "daemon.stall_timeout_s")])
def test_bad_settings_name_the_key(daemon: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as e:
        settings_from_mapping({"database": {"dsn": "postgresql://x@localhost/db"}, "daemon": daemon}, env={})
    assert key in str(e.value)


def test_settings_from_file_and_environment() -> None:
    s = settings_from_mapping({"database": {"dsn": "postgresql://x@localhost/db"},
                               "daemon": {"stall_timeout_s": 0, "max_takeovers": 5}}, env={})
    assert (s.daemon.stall_timeout_s, s.daemon.max_takeovers) == (0.0, 5)
    s = settings_from_mapping({"database": {"dsn": "postgresql://x@localhost/db"}},
                              env={"NEARSYNC_STALL_TIMEOUT_S": "90", "NEARSYNC_MAX_TAKEOVERS": "4"})
    assert (s.daemon.stall_timeout_s, s.daemon.max_takeovers) == (90.0, 4)


@pytest.fixture
def queue_db(fresh_db: str) -> str:
    """A migrated database with 12 rows r00..r11 on the dedup queue and the handler's log table."""
    upgrade(make_settings(fresh_db))
    with psycopg.connect(fresh_db, autocommit=True) as c:
        c.execute("CREATE TABLE poison_test_done (record_id text NOT NULL, batch_size integer NOT NULL)")
        c.execute("INSERT INTO nearsync.index_tracking (queue, table_name, record_id, op, seq) "
                  "SELECT 'dedup', %s, format('r%%s', lpad(i::text, 2, '0')), 'U', i FROM generate_series(0, 11) i",
                  (TABLE,))
    return fresh_db


def _state(dsn: str) -> tuple[dict[str, list[int]], dict[str, str], int]:
    """(record -> sizes of the batches it was handled in, dead-lettered record -> error, rows queued)."""
    with psycopg.connect(dsn) as c:
        done: dict[str, list[int]] = {}
        for rid, size in c.execute("SELECT record_id, batch_size FROM poison_test_done"):
            done.setdefault(rid, []).append(size)
        dead = dict(c.execute("SELECT record_id, error FROM nearsync.dead_letters WHERE queue = 'dedup'").fetchall())
        queued = c.execute("SELECT count(*) FROM nearsync.index_tracking WHERE queue = 'dedup'").fetchone()[0]
    return done, dead, queued


async def test_claim_counts_takeovers_from_dead_holders_only(queue_db: str) -> None:
    async with await psycopg.AsyncConnection.connect(queue_db, autocommit=True) as alive, \
            await psycopg.AsyncConnection.connect(queue_db, autocommit=True) as work:
        dead_id = await register_worker(alive)  # registered, but nobody holds its lock: a stopped worker
        me = Queue("dedup", await register_worker(alive), 3, 0.05)
        assert await hold_worker_lock(alive, me.worker_id)
        first = await Queue("dedup", dead_id, 3, 0.05).claim(work, 6)
        assert [c.takeovers for c in first] == [0] * 6
        mine = await me.claim(work, 3)  # taken over from the stopped worker: one takeover each
        assert [(c.record_id, c.takeovers) for c in mine] == [("r00", 1), ("r01", 1), ("r02", 1)]
        await me.release_rows(work, mine)  # given back: no takeover when claimed again
        again = await me.claim(work, 12)
        takeovers = {c.record_id: c.takeovers for c in again}
        assert takeovers == {**{f"r{i:02d}": 1 for i in range(6)}, **{f"r{i:02d}": 0 for i in range(6, 12)}}
        row = await me.claim_row(work, again[0])  # our own claim: not a takeover
        assert row is not None and row.takeovers == 1


async def test_a_restart_of_postgresql_is_no_takeover(queue_db: str) -> None:
    """A row claimed before the server last started lost its holder to the restart, which every
    row in hand shares, not to a stop of its own: taking it over counts nothing (a chaos run
    dead-lettered 23 innocent records as poison after three PostgreSQL restarts before this). A row
    claimed since the start by a worker that stopped still counts one."""
    async with await psycopg.AsyncConnection.connect(queue_db, autocommit=True) as alive, \
            await psycopg.AsyncConnection.connect(queue_db, autocommit=True) as work:
        dead_id = await register_worker(alive)  # nobody holds its lock
        me = Queue("dedup", await register_worker(alive), 3, 0.05)
        assert await hold_worker_lock(alive, me.worker_id)
        before = await Queue("dedup", dead_id, 3, 0.05).claim(work, 4)
        # as if claimed before a restart: the claim time before the server's start
        await work.execute("UPDATE nearsync.index_tracking SET claimed_at = pg_postmaster_start_time() - interval '1 s' "
                           "WHERE record_id = ANY(%s)", ([c.record_id for c in before[:2]],))
        mine = await me.claim(work, 4)
        assert {c.record_id: c.takeovers for c in mine} == {"r00": 0, "r01": 0, "r02": 1, "r03": 1}
        await me.release_rows(work, mine)
        await Queue("dedup", dead_id, 3, 0.05).claim(work, 1)  # r00 again, by the stopped worker
        await work.execute("UPDATE nearsync.index_tracking SET claimed_at = pg_postmaster_start_time() - interval '1 s' "
                           "WHERE record_id = 'r00'")
        row = await me.claim_row(work, mine[0])
        assert row is not None and row.record_id == "r00" and row.takeovers == 0


async def test_loop_buries_poison_and_handles_a_suspect_alone(queue_db: str) -> None:
    with psycopg.connect(queue_db, autocommit=True) as c:
        c.execute("UPDATE nearsync.index_tracking SET takeovers = 2 WHERE record_id IN ('r03', 'r09')")
        c.execute("UPDATE nearsync.index_tracking SET takeovers = 3 WHERE record_id = 'r05'")
    settings = replace(DaemonSettings(), batch_size=12, poll_interval_s=0.2, retry_backoff_s=0.05)
    loop = QueueLoop(queue_db, "dedup", HangingHandler(set()), settings, concurrency=2)
    metrics = loop.observer = LoopMetrics("dedup")
    async with loop.session():
        await loop.drain()
    assert metrics.registry.get_sample_value("nearsync_poison_records_total", {"queue": "dedup"}) == 1
    assert metrics.registry.get_sample_value("nearsync_dead_lettered_total", {"queue": "dedup"}) == 1
    done, dead, queued = _state(queue_db)
    assert queued == 0
    assert set(dead) == {"r05"} and dead["r05"].startswith("PoisonRecord: the worker stopped 3 times")
    assert set(done) == {f"r{i:02d}" for i in range(12)} - {"r05"}
    assert done["r03"] == [1] and done["r09"] == [1]  # each suspect handled once, alone
    assert all(len(sizes) == 1 for sizes in done.values())


def test_a_hanging_worker_is_cut_restarted_and_the_queue_flows(queue_db: str, tmp_path: Path) -> None:
    """The handler never returns on r07. Each run the stall watchdog (3 s) writes the stacks and
    exits 1; the takeovers make r07 a suspect, handled alone, then a poison record: dead-lettered
    after three stops, and every other record is handled, none dead-lettered."""
    log = tmp_path / "worker.log"
    codes: list[int] = []
    for _ in range(8):
        with open(log, "ab") as out:
            proc = subprocess.run([sys.executable, "tests/poison_worker.py", queue_db, "3", "2", "0", "r07"],
                                  cwd=REPO, stdout=out, stderr=out, timeout=120, check=False)
        codes.append(proc.returncode)
        if proc.returncode == 0:
            break
    text = log.read_text(errors="replace")
    assert codes == [1, 1, 1, 0], text[-3000:]
    assert "most recent call first" in text and "poison_worker.py" in text and "in process" in text
    done, dead, queued = _state(queue_db)
    assert queued == 0
    assert set(dead) == {"r07"} and "stopped 3 times" in dead["r07"]
    assert set(done) == {f"r{i:02d}" for i in range(12)} - {"r07"}


def test_the_watchdog_stays_quiet_while_the_loop_runs(queue_db: str) -> None:
    """A worker whose batches are slow but let the event loop run (1 s each, three batches on one
    lane: three times the 2 s timeout in all) is never cut: the beat keeps re-arming the timer."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "tests/poison_worker.py", queue_db, "2", "1", "1.0"], cwd=REPO,
                          capture_output=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    assert time.monotonic() - t0 > 3 * 1.0
    done, dead, queued = _state(queue_db)
    assert (len(done), dead, queued) == (12, {}, 0)
