"""Observability, backpressure and security against real things: a spawned daemon and worker scraped
over HTTP, /readyz while PostgreSQL is down and back, the adaptive batch size moving under a real
loop, ``nearsync deadletter`` through the CLI, and the least-privilege role running the daemon."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml  # type: ignore[import-untyped]

from bench.chaos.run import write_config
from daemon.cli import main
from daemon.config import Settings
from daemon.capture.loop import BatchSizer
from daemon.ops.migrate import upgrade
from daemon.db.throwaway import ThrowawayPostgres, free_port
from daemon.service import status
from tests.conftest import (
    REPO,
    flags,
    index_state,
    pending,
    running_indexer,
    running_worker,
    table_state,
    wait_until,
    with_daemon,
    with_dedup,
)
from tests.test_cdc import in_sync, insert_ads

pytestmark = pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)


def http_get(port: int, path: str) -> tuple[int, str]:
    """``(status, body)`` of ``GET http://127.0.0.1:port/path`` (status 0: connection refused)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return 0, ""


async def get(port: int, path: str) -> tuple[int, str]:
    """:func:`http_get` off the event loop."""
    return await asyncio.to_thread(http_get, port, path)


def sample(text: str, name: str, **labels: str) -> float:
    """The value of metric ``name`` with exactly ``labels`` in a Prometheus text page (0 if absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? (\S+)$", line)
        if m and m.group(1) == name:
            got = ",".join(sorted(p for p in (m.group(2) or "").split(",") if p))
            if got == want:
                return float(m.group(3))
    return 0.0


def spawn(cmd: str, config: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """``nearsync <cmd> --config <config> --metrics-port <port>`` as a real subprocess."""
    out = open(log, "ab")  # noqa: SIM115
    return subprocess.Popen([sys.executable, "-m", "daemon", cmd, "--config", str(config), "--metrics-port", str(port)],
                            cwd=REPO, stdout=out, stderr=out, start_new_session=True)


async def test_metrics_and_health_scraped_during_a_run(settings: Settings, tmp_path: Path) -> None:
    cfg = tmp_path / "nearsync.toml"
    write_config(cfg, settings.dsn, {"backend": "postgres"})
    async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
        await c.execute("ALTER TABLE ads ALTER COLUMN price TYPE text")
    pd, pw = free_port(), free_port()
    daemon = spawn("run", cfg, pd, tmp_path / "daemon.log")
    worker = spawn("dedup", cfg, pw, tmp_path / "worker.log")
    try:
        await wait_until(lambda: _status_is(pd, "/healthz", 200), timeout=30, interval=0.2)
        await wait_until(lambda: _status_is(pw, "/readyz", 200), timeout=30, interval=0.2)
        await insert_ads(settings.dsn, 40)
        async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
            await c.execute("INSERT INTO ads (title, body, price) VALUES ('Poison', 'bad price', 'call me')")
            await c.execute("INSERT INTO ads (title, body, price) SELECT title, body, price FROM ads WHERE id <= 5")
        await wait_until(lambda: _queues_settled(settings.dsn), timeout=60, interval=0.2)
        _, page = await get(pd, "/metrics")
        assert sample(page, "nearsync_changes_indexed_total", queue="index") == 45
        assert sample(page, "nearsync_changes_claimed_total", queue="index") >= 46
        assert sample(page, "nearsync_dead_lettered_total", queue="index") == 1
        assert sample(page, "nearsync_retried_total", queue="index", reason="record") == 2  # max_attempts 3
        assert sample(page, "nearsync_commit_to_indexed_seconds_count") == 45
        assert sample(page, "nearsync_dead_letters", queue="index") == 1
        assert sample(page, "nearsync_pending_changes", queue="index") == 0
        assert sample(page, "nearsync_batch_size_rows_count", queue="index") >= 1
        assert sample(page, "nearsync_batch_limit_rows", queue="index") >= 1
        assert "nearsync_notification_queue_usage_ratio 0.0" in page
        assert sample(page, "process_resident_memory_bytes") > 0  # the standard process collector
        _, wpage = await get(pw, "/metrics")
        assert sample(wpage, "nearsync_commit_to_flagged_seconds_count") == 45
        assert sample(wpage, "nearsync_candidates_per_record_count") >= 1
        # the idle worker's sweep (on by default, 20 records a second) completes a pass over the table
        await wait_until(lambda: _sweep_exported(pw), timeout=30, interval=0.5)
        assert sample((await get(pw, "/metrics"))[1], "nearsync_dedup_sweep_last_pass_seconds", table="public.ads") > 0
        # ... and rests once a pass saw no change (the gauge is read at most once a second)
        await wait_until(lambda: _sweep_resting(pw), timeout=45, interval=0.5)
        assert sample(wpage, "process_cpu_seconds_total") > 0
        # each process exports its own series only, and no *_created samples
        assert "_created" not in page and "_created" not in wpage
        for foreign in ("nearsync_commit_to_flagged_seconds", "nearsync_candidates_per_record",
                        "nearsync_candidate_cap_hits", 'queue="dedup"'):
            assert foreign not in page, foreign
        for foreign in ("nearsync_dedup_sweep_passes", "nearsync_dedup_sweep_last_pass_seconds",
                        "nearsync_dedup_sweep_resting"):
            assert foreign not in page, foreign
        # the shipped alert rules (deploy/prometheus) name only series these two processes export
        rules = [r for g in yaml.safe_load(ALERT_RULES.read_text())["groups"] for r in g["rules"]]
        named = {m for r in rules for m in re.findall(r"\bnearsync_[a-z_]+", r["expr"])}
        assert len(rules) >= 8 and len(named) >= 7 and all(r["alert"] and r["expr"] and r["annotations"]["summary"] for r in rules)
        assert named <= families(page) | families(wpage), named - (families(page) | families(wpage))
        for foreign in ("nearsync_commit_to_indexed_seconds", "nearsync_changes_indexed",
                        "nearsync_notification_queue_usage_ratio", 'queue="index"'):
            assert foreign not in wpage, foreign
        # the same figures as `nearsync status`
        report = await status(settings)
        assert report["queues"]["index"]["dead_letters"] == sample(page, "nearsync_dead_letters", queue="index")
        assert report["indexed"] == 45
        code, body = await get(pd, "/readyz")
        assert code == 200 and json.loads(body)["database"] is True
        # lag over the bound: ready no more, still healthy
        async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
            await c.execute("INSERT INTO nearsync.index_tracking (queue, table_name, record_id, op, seq, changed_at) "
                            "VALUES ('index', 'public.ads', '1', 'U', nextval('nearsync.change_seq'), "
                            "now() - interval '1 hour') ON CONFLICT DO NOTHING")
            await c.execute("UPDATE nearsync.index_tracking SET not_before = now() + interval '1 hour' "
                            "WHERE record_id = '1'")
        await asyncio.sleep(1.1)
        code, body = await get(pd, "/readyz")
        assert code == 503 and json.loads(body)["lag_ok"] is False
        assert (await get(pd, "/healthz"))[0] == 200
    finally:
        for p in (daemon, worker):
            p.terminate()
        assert daemon.wait(30) == 0 and worker.wait(30) == 0


ALERT_RULES = Path(__file__).resolve().parents[1] / "deploy" / "prometheus" / "nearsync-alerts.yml"


def families(text: str) -> set[str]:
    """Every series name a Prometheus text page exposes or declares: its samples' names, and for
    each ``# TYPE`` line the family with the suffixes of its type (a counter's ``_total``, a
    histogram's ``_bucket``, ``_sum`` and ``_count``), so a labelled metric with no sample yet counts."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()[:4]
            base = name.removesuffix("_total")
            names |= {name} | ({base + "_total"} if kind == "counter" else set()) | (
                {name + s for s in ("_bucket", "_sum", "_count")} if kind == "histogram" else set())
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


async def _status_is(port: int, path: str, code: int) -> bool:
    return (await get(port, path))[0] == code


async def _sweep_exported(port: int) -> bool:
    """The worker on ``port`` exports a completed sweep pass over ``public.ads``."""
    _, page = await get(port, "/metrics")
    return sample(page, "nearsync_dedup_sweep_passes", table="public.ads") >= 1


async def _sweep_resting(port: int) -> bool:
    """The worker on ``port`` exports its sweep over ``public.ads`` as resting."""
    _, page = await get(port, "/metrics")
    return sample(page, "nearsync_dedup_sweep_resting", table="public.ads") == 1


async def _queues_settled(dsn: str) -> bool:
    return await pending(dsn, "index") == 0 and await pending(dsn, "dedup") == 0


@pytest.fixture
def private_pg(tmp_path: Path) -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL server of this test alone (it gets stopped and started)."""
    server = ThrowawayPostgres(fast=True)
    server.start()
    yield server
    server.stop()


async def test_readyz_fails_while_database_down_and_recovers(private_pg: ThrowawayPostgres, tmp_path: Path,
                                                             backend_name: str) -> None:
    with psycopg.connect(private_pg.dsn, autocommit=True) as c:
        c.execute("CREATE DATABASE obs")
    dsn = f"postgresql://postgres@127.0.0.1:{private_pg.port}/obs"
    cfg = tmp_path / "nearsync.toml"
    s = write_config(cfg, dsn, {"backend": "postgres"})
    upgrade(s)
    port = free_port()
    daemon = spawn("run", cfg, port, tmp_path / "daemon.log")
    try:
        await wait_until(lambda: _status_is(port, "/readyz", 200), timeout=30, interval=0.2)
        await asyncio.to_thread(private_pg.stop, "fast", remove=False)
        await wait_until(lambda: _status_is(port, "/readyz", 503), timeout=20, interval=0.2)
        code, body = await get(port, "/readyz")
        assert json.loads(body)["database"] is False
        assert (await get(port, "/healthz"))[0] == 200  # alive: the loop keeps retrying
        await asyncio.sleep(2)
        assert (await get(port, "/readyz"))[0] == 503
        await asyncio.to_thread(private_pg.start)
        await wait_until(lambda: _status_is(port, "/readyz", 200), timeout=60, interval=0.3)
        await insert_ads(dsn, 10)  # and it indexes again
        await wait_until(lambda: in_sync(s), timeout=60)
        _, page = await get(port, "/metrics")
        assert sample(page, "nearsync_changes_indexed_total", queue="index") == 10
    finally:
        daemon.terminate()
        daemon.wait(30)


class SlowWrites:
    """Backend wrapper whose writes take ``delay_s`` seconds (a slow index)."""

    def __init__(self, inner: Any, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def write(self, upserts: Any, deletes: Any) -> Any:
        await asyncio.sleep(self.delay_s)
        return await self.inner.write(upserts, deletes)


class Limits:
    """Observer recording the batch limit after each batch."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def observe_batch(self, **kw: Any) -> None:
        self.seen.append(kw["limit"])

    def observe_retry(self, error: BaseException) -> None:
        pass


async def test_adaptive_batch_size_grows_on_deep_queue_and_shrinks_on_slow_batches(settings: Settings) -> None:
    s = with_daemon(settings, batch_size=20, concurrency=1)  # one lane: the sizes in the order the sizer set them
    await insert_ads(settings.dsn, 3000)
    async with running_indexer(s) as d:
        rec = Limits()
        d.loop.observer = rec
        await wait_until(lambda: in_sync(settings), timeout=60)
    assert max(rec.seen) > 20 and max(rec.seen) <= d.loop.sizer.ceiling == 160
    async with running_indexer(s, wrap_backend=lambda b: SlowWrites(b, 0.15)) as d:
        d.loop.sizer = BatchSizer(limit=160, floor=5, ceiling=160, target_s=0.1)
        rec = Limits()
        d.loop.observer = rec
        async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
            await c.execute("UPDATE ads SET title = title || ' (edited)' WHERE id <= 320")  # one commit
        await wait_until(lambda: in_sync(settings), timeout=60)
    assert rec.seen[:5] == [80, 40, 20, 10, 5] and min(rec.seen) == 5  # halved per slow batch, down to the floor


async def test_deadletter_cli_list_retry_purge(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
        await c.execute("ALTER TABLE ads ALTER COLUMN price TYPE text")
        await c.execute("INSERT INTO ads (title, body, price) VALUES ('a', 'b', 'call me'), ('c', 'd', 'ask'), "
                        "('e', 'f', '10')")
    async with running_indexer(settings):
        await wait_until(lambda: _dead_count(settings.dsn, 2), timeout=30)
    dsn = ["--dsn", settings.dsn]
    capsys.readouterr()
    assert await cli(["deadletter", "list", "--json", *dsn]) == 0
    rows = json.loads(capsys.readouterr().out)["dead_letters"]
    assert sorted(r["record_id"] for r in rows) == ["1", "2"]
    assert all("call me" in r["error"] or "ask" in r["error"] for r in rows) and rows[0]["attempts"] == 3
    async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
        await c.execute("SET session_replication_role = replica")  # fix the row without a new change
        await c.execute("UPDATE ads SET price = '5' WHERE id = 1")
    one = next(r["id"] for r in rows if r["record_id"] == "1")
    assert await cli(["deadletter", "retry", str(one), "987654", *dsn]) == 1  # one of them is no dead letter
    out = capsys.readouterr()
    assert "requeued 1 record(s)" in out.out and "nearsync: no dead letter with id 987654" in out.err
    async with running_indexer(settings):
        await wait_until(lambda: _indexed(settings, {"1", "3"}), timeout=30)
    assert await cli(["deadletter", "purge", str(one), *dsn]) == 1  # retried: no longer a dead letter
    out = capsys.readouterr()
    assert "purged 0 dead letter(s)" in out.out and f"no dead letter with id {one} " in out.err
    assert await cli(["deadletter", "purge", *dsn]) == 0
    assert "purged 1 dead letter(s)" in capsys.readouterr().out
    assert await cli(["deadletter", "list", "--json", *dsn]) == 0
    assert json.loads(capsys.readouterr().out)["dead_letters"] == []


async def cli(argv: list[str]) -> int:
    """``nearsync <argv>`` in-process (it runs its own event loop, so off this one)."""
    return await asyncio.to_thread(main, argv)


async def _dead_count(dsn: str, n: int) -> bool:
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        row = await (await c.execute("SELECT count(*) FROM nearsync.dead_letters")).fetchone()
        return bool(row and row[0] == n)


async def _indexed(s: Settings, ids: set[str]) -> bool:
    return set(await index_state(s)) == ids


async def test_daemon_and_worker_run_as_least_privilege_role(settings: Settings, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    role, secret = "ns_" + uuid.uuid4().hex[:8], "s3cret-" + uuid.uuid4().hex
    monkeypatch.setenv("NEARSYNC_ROLE_PASSWORD", secret)
    assert main(["grant-role", role, "--json", "--dsn", settings.dsn]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["created"] is True and secret not in out.out + out.err
    role_dsn = settings.dsn.replace("postgresql://postgres@", f"postgresql://{role}:{secret}@")
    try:
        with psycopg.connect(role_dsn, autocommit=True) as c:
            for stmt in ("INSERT INTO ads (title) VALUES ('x')", "UPDATE ads SET title = 'x'", "DELETE FROM ads",
                         "CREATE TABLE nearsync.evil (x int)", "DROP TABLE nearsync.index_tracking",
                         "TRUNCATE nearsync.documents"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    c.execute(stmt)
        s = with_dedup(replace(settings, dsn=role_dsn))
        await insert_ads(settings.dsn, 20)
        async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
            await c.execute("INSERT INTO ads (user_id, title, body, price) SELECT user_id, title, body, price "
                            "FROM ads WHERE id <= 3")
        async with running_indexer(s), running_worker(s):
            await wait_until(lambda: in_sync(settings), timeout=60)
            await wait_until(lambda: _queues_settled(settings.dsn), timeout=60)
        assert await index_state(settings) == await table_state(settings.dsn)
        assert len(await flags(settings.dsn)) >= 3  # the worker wrote flags as the role
    finally:
        with psycopg.connect(settings.dsn, autocommit=True) as c:
            c.execute(f'DROP OWNED BY "{role}"')
            c.execute(f'DROP ROLE "{role}"')
