"""Operations of the CDC core against a real PostgreSQL: kill -9 recovery with a real daemon
process, reindex (resumable, with live writes), verify/repair, migrations, status and CLI errors."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench.bench_backpressure import descendants
from daemon.cli import main
from daemon.config import Settings
from daemon.ops.migrate import current_revision, downgrade, head_revision, upgrade
from daemon.ops.reindex import reindex, verify
from daemon.service import opened_backend, status
from daemon.capture.source import SchemaError, inspect_source
from tests.conftest import (
    REPO,
    index_state,
    kill9,
    make_settings,
    pending,
    running_indexer,
    spawn_daemon,
    table_state,
    wait_until,
)
from tests.test_cdc import in_sync, insert_ads


async def bulk_insert(dsn: str, n: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        await c.execute(
            "INSERT INTO ads (user_id, category, title, body, price) "
            "SELECT 'u' || (g %% 50), 'tv', 'Listing ' || g || ' model KDL-' || g, "
            "'Body of listing ' || g || ' with some words about the product', g FROM generate_series(1, %s) g", (n,))


async def indexed_count(s: Settings) -> int:
    async with opened_backend(s) as b:
        return await b.count("public.ads")


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
async def test_kill9_mid_batch_then_restart_loses_nothing(settings: Settings, tmp_path: Path) -> None:
    await bulk_insert(settings.dsn, 20_000)
    log = tmp_path / "daemon.log"
    proc = spawn_daemon(settings, "--batch-size", "500", log=log)
    try:
        await wait_until(lambda: _between(indexed_count(settings), 1, 19_000), timeout=60, interval=0.02)
        pool = descendants(proc.pid)  # the signature pool: its forkserver and the worker processes
    finally:
        kill9(proc)
    assert len(pool) >= 2
    await wait_until(lambda: _all_gone(pool), timeout=15, interval=0.2)  # not left running without the daemon
    assert await pending(settings.dsn) > 0  # killed mid-stream: work was left
    async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
        await c.execute("UPDATE ads SET title = 'changed after the kill' WHERE id <= 10")
        await c.execute("DELETE FROM ads WHERE id BETWEEN 11 AND 20")
    proc = spawn_daemon(settings, "--batch-size", "500", log=log)
    try:
        await wait_until(lambda: in_sync(settings), timeout=120, interval=0.5)
    finally:
        proc.terminate()
        assert proc.wait(30) == 0  # SIGTERM: finish the batch in hand and exit 0
    assert len(await index_state(settings)) == 19_990
    assert await pending(settings.dsn) == 0


async def _all_gone(pids: set[int]) -> bool:
    return not any(Path(f"/proc/{p}").exists() and "Z" not in _state(p) for p in pids)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


async def _between(aw: object, lo: int, hi: int) -> bool:
    n = await aw  # type: ignore[misc]
    return lo <= n <= hi


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
async def test_reindex_rebuilds_resumes_and_keeps_live_changes(settings: Settings) -> None:
    async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
        await c.execute("SELECT nearsync.detach_table('public.ads'::regclass)")  # rows without tracking
    await bulk_insert(settings.dsn, 3000)
    upgrade(settings)  # re-attaches the triggers (configuration differs from the registry)

    class Interrupt(Exception):
        pass

    def stop_after_first_page(done: int) -> None:
        if done >= 1000:
            raise Interrupt

    async with opened_backend(settings) as backend:
        with pytest.raises(Interrupt):
            await reindex(settings, backend, page_size=1000, progress=False, on_page=stop_after_first_page)
        assert await backend.count("public.ads") == 1000
        async with await psycopg.AsyncConnection.connect(settings.dsn) as c:
            cp = await (await c.execute("SELECT last_key, done FROM nearsync.job_checkpoints")).fetchone()
        assert cp == ("1000", 1000)

        async def writer() -> None:
            async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
                for i in range(1, 3001, 97):
                    await c.execute("UPDATE ads SET title = %s WHERE id = %s", (f"live edit {i}", i))
                    await asyncio.sleep(0.002)

        w = asyncio.create_task(writer())
        report = await reindex(settings, backend, page_size=500, progress=False)
        await w
        assert report["rows"] == 3000
    # live edits made during the reindex reach the index (through the daemon afterwards)
    async with running_indexer(settings):
        await wait_until(lambda: in_sync(settings), timeout=60)
    assert (await index_state(settings))["98"]["title"] == "live edit 98"


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
async def test_verify_detects_and_repair_fixes_drift(settings: Settings) -> None:
    await insert_ads(settings.dsn, 30)
    async with running_indexer(settings):
        await wait_until(lambda: in_sync(settings))
    async with opened_backend(settings) as backend:
        assert (await verify(settings, backend))["drift"] is False
        await backend.clear("public.ads")
        async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
            await c.execute("DELETE FROM nearsync.index_tracking")
        report = await verify(settings, backend)
        assert report["drift"] and report["missing"] == 30
        fixed = await verify(settings, backend, repair=True)
        assert fixed["repaired"]
        assert (await verify(settings, backend))["drift"] is False
    assert await index_state(settings) == await table_state(settings.dsn)


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
async def test_status_reports_lag_and_counts(settings: Settings) -> None:
    await insert_ads(settings.dsn, 4)
    await asyncio.sleep(0.2)
    report = await status(settings)
    assert report["rows"] == 4 and report["indexed"] == 0
    assert report["queues"]["index"]["pending"] == 4 and report["queues"]["index"]["oldest_age_s"] >= 0.2
    async with running_indexer(settings):
        await wait_until(lambda: in_sync(settings))
    report = await status(settings)
    assert report["indexed"] == 4 and report["queues"]["index"]["pending"] == 0
    assert 0.0 <= report["notification_queue_usage"] < 0.01
    assert "sweep" not in report  # no dedup worker has swept this table (tests/test_sweep.py)


def test_migrations_are_idempotent_and_reversible(fresh_db: str) -> None:
    s = make_settings(fresh_db)
    assert current_revision(s) is None
    first = upgrade(s)
    assert first["to"] == head_revision(s)
    again = upgrade(s)
    assert again == {"from": head_revision(s), "to": head_revision(s), "triggers_resynced": False}
    with psycopg.connect(fresh_db, autocommit=True) as c:
        trig = c.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'nearsync_track_%'").fetchone()
        assert trig == (3,)
    downgrade(s, "base")
    with psycopg.connect(fresh_db, autocommit=True) as c:
        assert c.execute("SELECT to_regnamespace('nearsync')").fetchone() == (None,)
        assert c.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'nearsync_track_%'").fetchone() == (0,)
        assert c.execute("SELECT to_regclass('public.ads') IS NOT NULL").fetchone() == (True,)  # user data kept
    assert upgrade(s)["to"] == head_revision(s)


def test_head_revision_is_alembics_without_importing_it(tmp_path: Path) -> None:
    """The newest migration read from the scripts' own assignments is the one Alembic finds; a merge
    has one head, a branch not merged is refused; and opening the source table's code does not
    import Alembic or SQLAlchemy (a fresh interpreter)."""
    from alembic.script import ScriptDirectory

    from daemon.db.migrations import head_revision_id, migrations_dir

    assert head_revision_id() == ScriptDirectory(str(migrations_dir())).get_current_head()
    versions = tmp_path / "versions"
    versions.mkdir()
    scripts = {"a": None, "b": "a", "c": "a", "m": ("b", "c")}
    for rev, down in scripts.items():
        (versions / f"{rev}_x.py").write_text(f'"""doc."""\nrevision = {rev!r}\ndown_revision = {down!r}\n')
    (versions / "helpers.py").write_text("X = 1\n")  # not a migration script
    assert head_revision_id(tmp_path) == "m"
    (versions / "m_x.py").unlink()
    with pytest.raises(ValueError, match="2 heads"):
        head_revision_id(tmp_path)
    probe = ("import sys; from daemon.db.migrations import head_revision_id; import daemon.capture.source; "
             "head_revision_id(); print(sorted(m for m in ('alembic', 'sqlalchemy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


@contextlib.asynccontextmanager
async def _column_round_trip(fresh_db: str, doc: Any, column: str, down_to: str) -> AsyncIterator[Any]:
    """Write ``doc`` through the PostgreSQL backend, downgrade to ``down_to`` (the list stored in
    ``documents.<column>`` folds back into the signature jsonb, the column goes), upgrade again, and
    yield a freshly opened backend that reads ``doc`` back unchanged."""
    from daemon.backends.postgres import PostgresBackend

    s = make_settings(fresh_db)
    upgrade(s)
    be = PostgresBackend(s.require_dsn())
    await be.open()
    try:
        await be.write([doc], [])
        downgrade(s, down_to)
        with psycopg.connect(fresh_db, autocommit=True) as c:
            assert c.execute("SELECT signature->%s::text FROM nearsync.documents", (column,)).fetchone() == \
                (doc.signature[column],)
            assert c.execute("SELECT count(*) FROM information_schema.columns WHERE table_schema = 'nearsync' "
                             "AND table_name = 'documents' AND column_name = %s", (column,)).fetchone() == (0,)
        upgrade(s)
        await be.close()
        be = PostgresBackend(s.require_dsn())  # fresh connections: the column is back, empty for this row
        await be.open()
        assert (await be.get("public.ads", ["1"]))["1"].signature == doc.signature
        yield be
    finally:
        await be.close()


async def test_sketch_column_migration_keeps_sketches_both_ways(fresh_db: str) -> None:
    """Migration 0007 moved the bottom-k sketch into documents.bottomk; its downgrade folds the
    sketches back into the signatures, and documents read the same on either side."""
    from daemon.backends.base import IndexDocument

    doc = IndexDocument("public.ads", "1", 5, {"title": "red bike"}, {}, ["b0:aa"],
                        {"v": 2, "bottomk": [7, 9, 2**62], "minhash": [1, 2]})
    async with _column_round_trip(fresh_db, doc, "bottomk", "0006") as be:
        assert await be.get_sketches("public.ads", ["1"]) == {"1": (5, (7, 9, 2**62))}


async def test_change_log_migration_keeps_pending_changes_both_ways(fresh_db: str) -> None:
    """Migration 0008 made the triggers append to nearsync.change_log; its downgrade moves what is
    still in the log into index_tracking (coalesced) and puts the upserting triggers back. No change
    is lost either way, and the daemon then indexes everything."""
    s = make_settings(fresh_db)
    upgrade(s)
    ids = await insert_ads(fresh_db, 3)
    with psycopg.connect(fresh_db, autocommit=True) as c:
        c.execute("UPDATE ads SET title = 'edited' WHERE id = %s", (int(ids[0]),))
        assert c.execute("SELECT count(*) FROM nearsync.change_log").fetchone() == (4,)
    downgrade(s, "0007")
    with psycopg.connect(fresh_db, autocommit=True) as c:
        assert c.execute("SELECT to_regclass('nearsync.change_log')").fetchone() == (None,)
        rows = c.execute("SELECT record_id FROM nearsync.index_tracking ORDER BY record_id::int").fetchall()
        assert [r[0] for r in rows] == ids
        c.execute("INSERT INTO ads (title, body) VALUES ('old-style trigger', 'body')")  # upserts tracking
        assert c.execute("SELECT count(*) FROM nearsync.index_tracking").fetchone() == (4,)
    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as ac:
        wanted = f"at migration 0007, this version of nearsync needs {head_revision(s)}: run `nearsync migrate`"
        with pytest.raises(SchemaError, match=wanted):
            await inspect_source(ac, s.source)  # a daemon refuses to start on an older schema
    upgrade(s)
    later = await insert_ads(fresh_db, 1, start=10)
    with psycopg.connect(fresh_db, autocommit=True) as c:
        assert c.execute("SELECT record_id FROM nearsync.change_log").fetchall() == [(later[0],)]
    assert await pending(fresh_db) == 5
    async with running_indexer(s):
        await wait_until(lambda: in_sync(s))
    assert await pending(fresh_db) == 0
    assert (await index_state(s))[ids[0]]["title"] == "edited"


async def test_minhash_column_migration_keeps_minhashes_both_ways(fresh_db: str) -> None:
    """Migration 0009 moved the MinHash into documents.minhash; its downgrade folds it back into
    the signatures, and documents read the same on either side."""
    from daemon.backends.base import IndexDocument

    doc = IndexDocument("public.ads", "1", 5, {"title": "red bike"}, {}, ["b0:aa"],
                        {"v": 2, "bottomk": [7], "minhash": [1, 2**61 - 1]})
    async with _column_round_trip(fresh_db, doc, "minhash", "0008") as be:
        await be.write([IndexDocument("public.ads", "1", 6, doc.fields, doc.scope, doc.keys, doc.signature)], [])
        with psycopg.connect(fresh_db, autocommit=True) as c:
            assert c.execute("SELECT minhash, signature ? 'minhash' FROM nearsync.documents").fetchone() == \
                ([1, 2**61 - 1], False)


async def test_key_array_migration_keeps_candidate_keys_both_ways(fresh_db: str) -> None:
    """Migration 0010 moved the key rows of nearsync.document_keys into documents.key_hashes; its
    downgrade puts them back as rows. Lookups find the same candidates on either side, tombstones
    and plain-sync documents get no keys, and writes after the upgrade keep one array per document."""
    from daemon.backends.base import CandidateQuery, DeleteOp, IndexDocument
    from daemon.backends.pg_encoding import key_hashes
    from daemon.backends.postgres import PostgresBackend

    def ad(rid: str, version: int, keys: list[str], scope: dict[str, str] | None = None) -> IndexDocument:
        return IndexDocument("public.ads", rid, version, {"title": f"ad {rid}"}, scope or {"user": "u1"}, keys,
                             {"v": 2, "bottomk": [1], "minhash": [2]} if keys else {})

    docs = [ad("1", 1, ["b0:a", "b1:b", "s:c"]), ad("2", 1, ["b0:a", "b1:b", "s:x"]), ad("3", 1, ["b0:a", "s:y"]),
            ad("4", 1, ["b0:a", "b1:b"], {"user": "u2"}), ad("5", 1, []), ad("6", 1, ["b0:a"])]
    queries = [CandidateQuery(["b0:a", "b1:b", "s:c"], {"user": "u1"}, exclude_id="1"),
               CandidateQuery(["b0:a", "b1:b"], {"user": "u2"})]
    s = make_settings(fresh_db)
    upgrade(s)

    async def found() -> list[list[tuple[str, int]]]:
        be = PostgresBackend(s.require_dsn())  # fresh connections: no plan cached across the schema change
        await be.open()
        try:
            return [[(c.record_id, c.matched) for c in cands] for cands in await be.candidates_many("public.ads", queries)]
        finally:
            await be.close()

    be = PostgresBackend(s.require_dsn())
    await be.open()
    try:
        await be.write(docs, [DeleteOp("public.ads", "6", 2)])
    finally:
        await be.close()
    before = await found()
    assert before == [[("2", 2), ("3", 1)], [("4", 2)]]
    downgrade(s, "0009")
    with psycopg.connect(fresh_db, autocommit=True) as c:
        rows = c.execute("SELECT record_id, array_agg(key ORDER BY key) FROM nearsync.document_keys "
                         "GROUP BY record_id ORDER BY record_id").fetchall()
        assert rows == [(d.record_id, sorted(key_hashes("public.ads", d.scope, d.keys))) for d in docs[:4]]
        assert c.execute("SELECT count(*) FROM information_schema.columns WHERE table_schema = 'nearsync' "
                         "AND table_name = 'documents' AND column_name = 'key_hashes'").fetchone() == (0,)
    upgrade(s, "0019")
    with psycopg.connect(fresh_db, autocommit=True) as c:
        assert c.execute("SELECT to_regclass('nearsync.document_keys')").fetchone() == (None,)
        rows = c.execute("SELECT record_id, key_hashes FROM nearsync.documents ORDER BY record_id").fetchall()
        assert rows == [(d.record_id, sorted(key_hashes("public.ads", d.scope, d.keys)) if d.keys else None)
                        for d in docs[:5]] + [("6", None)]  # 5: plain sync, 6: a tombstone
    upgrade(s)  # 0020 moves them into the lookup table
    with psycopg.connect(fresh_db, autocommit=True) as c:
        rows = c.execute("SELECT record_id, key_hashes FROM nearsync.document_lookup ORDER BY record_id").fetchall()
        assert rows == [(d.record_id, sorted(key_hashes("public.ads", d.scope, d.keys))) for d in docs[:4]]
    assert await found() == before
    be = PostgresBackend(s.require_dsn())
    await be.open()
    try:  # a newer write replaces the converted keys, an older one leaves them
        await be.write([ad("2", 2, ["b0:a", "s:z"]), ad("3", 0, ["b0:a", "b1:b", "s:c"])], [])
        [cands, _] = await be.candidates_many("public.ads", queries)
        assert [(c.record_id, c.matched) for c in cands] == [("2", 1), ("3", 1)]
    finally:
        await be.close()


def test_cli_fails_fast_with_clear_errors(fresh_db: str, pg_server: object, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--dsn", "postgresql://nobody:secret@127.0.0.1:1/x"]) == 4
    err = capsys.readouterr().err
    assert "cannot reach the database" in err and "secret" not in err
    assert main(["status", "--dsn", fresh_db]) == 3
    assert "nearsync migrate" in capsys.readouterr().err
    s = make_settings(fresh_db)
    upgrade(s)
    with psycopg.connect(fresh_db, autocommit=True) as c:
        c.execute("DROP TABLE ads CASCADE")  # the moderators' view depends on it
    assert main(["status", "--dsn", fresh_db]) == 3
    assert "public.ads does not exist" in capsys.readouterr().err


def test_config_errors_name_the_setting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "n.toml"
    cfg.write_text('[daemon]\nbatch_size = -1\n')
    assert main(["status", "--config", str(cfg), "--dsn", "postgresql://x@127.0.0.1:1/x"]) == 2
    assert "daemon.batch_size" in capsys.readouterr().err
    cfg.write_text('[source]\ntable = "ads; drop table x"\n')
    assert main(["status", "--config", str(cfg)]) == 2
    assert "source.table" in capsys.readouterr().err
    assert main(["run", "--mode", "batch", "--window", "soon", "--dsn", "postgresql://x@127.0.0.1:1/x"]) == 2
    assert "--window" in capsys.readouterr().err
    for bad in ("0", "17"):
        assert main(["dedup", "--concurrency", bad, "--dsn", "postgresql://x@127.0.0.1:1/x"]) == 2
        assert "daemon.concurrency" in capsys.readouterr().err
    cfg.write_text('[daemon]\nconcurrency = "two"\n')
    assert main(["status", "--config", str(cfg), "--dsn", "postgresql://x@127.0.0.1:1/x"]) == 2
    assert "daemon.concurrency" in capsys.readouterr().err


def test_concurrency_defaults_per_queue() -> None:
    from daemon.config import DaemonSettings, load_settings

    assert DaemonSettings().concurrency_for("index") == 2
    assert DaemonSettings().concurrency_for("dedup") == 2
    assert DaemonSettings.from_mapping({"concurrency": 3}).concurrency_for("index") == 3
    assert load_settings(None, concurrency=4).daemon.concurrency_for("dedup") == 4


def test_systemd_units_cover_every_process_and_do_not_restart_on_config_errors() -> None:
    units = {u.name: u.read_text() for u in (REPO / "deploy" / "systemd").glob("*.service")}
    assert set(units) == {"nearsync-indexer.service", "nearsync-dedup.service", "nearsync-reindex.service",
                          "nearsync-serve.service", "nearsync-refresh.service"}
    timers = {u.name: u.read_text() for u in (REPO / "deploy" / "systemd").glob("*.timer")}
    assert set(timers) == {"nearsync-refresh.timer"}  # starts the service of its own name
    assert "nearsync rarity refresh --requeue" in units["nearsync-refresh.service"]
    assert "Type=oneshot" in units["nearsync-refresh.service"] and "Persistent=true" in timers["nearsync-refresh.timer"]
    for name in ("nearsync-indexer.service", "nearsync-dedup.service", "nearsync-serve.service"):
        assert "Restart=on-failure" in units[name] and "RestartPreventExitStatus=2 3" in units[name], name
    assert "nearsync serve --host 127.0.0.1" in units["nearsync-serve.service"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
@pytest.mark.parametrize("unit", sorted(p.name for p in (REPO / "deploy" / "systemd").glob("*.service")))
def test_systemd_unit_exposure_is_at_most_2(unit: str, tmp_path: Path) -> None:
    """``systemd-analyze security`` rates each unit file 2.0 or lower (OK); 8.5 EXPOSED before hardening."""
    copy = tmp_path / unit
    copy.write_text((REPO / "deploy" / "systemd" / unit).read_text())
    proc = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(copy)],
                          capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", proc.stdout + proc.stderr)
    if m is None and "offline" in proc.stderr:
        pytest.skip(f"this systemd-analyze cannot rate unit files offline: {proc.stderr.strip()[:200]}")
    assert m is not None, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert float(m.group(1)) <= 2.0, proc.stdout


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_units_verify(tmp_path: Path) -> None:
    units = sorted((REPO / "deploy" / "systemd").glob("*.service")) + sorted((REPO / "deploy" / "systemd").glob("*.timer"))
    assert units, "no unit files"
    fake_bin = tmp_path / "nearsync"
    fake_bin.write_text(f"#!/bin/sh\nexec {sys.executable} -m daemon \"$@\"\n")
    fake_bin.chmod(0o755)
    for unit in units:
        text = unit.read_text().replace("/opt/nearsync/.venv/bin/nearsync", str(fake_bin))
        copy = tmp_path / unit.name
        copy.write_text(text)
        proc = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True)
        bad = [ln for ln in proc.stderr.splitlines() if unit.name in ln and "EnvironmentFile" not in ln]
        assert not bad, proc.stderr


async def test_payload_columns_get_no_planner_statistics_both_ways(fresh_db: str) -> None:
    """Migrations 0016 and 0018: ANALYZE gathers statistics for the columns the lookups filter on
    and none for the wide payload columns (0016) nor the candidate-key array, whose element
    statistics no estimate reads (0018, which also gives the sketch arrays lz4 compression where
    the server has it); each downgrade gives its columns back the server's statistics target (and
    0018's the default compression)."""
    from daemon.backends.base import IndexDocument
    from daemon.backends.postgres import PostgresBackend

    payload = ["bottomk", "fields", "keys", "minhash", "scope", "signature"]
    s = make_settings(fresh_db)
    upgrade(s)
    be = PostgresBackend(s.require_dsn())
    await be.open()
    try:
        await be.write([IndexDocument("public.ads", str(i), 1, {"title": f"red bike {i}"}, {"cat": "bikes"},
                                      [f"b0:{i % 7}"], {"v": 2, "bottomk": [i], "minhash": [i, i + 1]})
                        for i in range(50)], [])
    finally:
        await be.close()

    def analysed() -> list[str]:
        with psycopg.connect(fresh_db, autocommit=True) as c:
            c.execute("ANALYZE nearsync.documents")
            rows = c.execute("SELECT attname FROM pg_stats WHERE schemaname = 'nearsync' AND tablename = 'documents' "
                             "ORDER BY attname").fetchall()
            return [r[0] for r in rows]

    with psycopg.connect(fresh_db, autocommit=True) as c:
        c.execute("DELETE FROM pg_statistic WHERE starelid = 'nearsync.documents'::regclass")  # superuser: the tests' server
    def sketch_compression(expected: str) -> bool:
        """The sketch arrays' compression is ``expected`` ("l": lz4, "": the default), or the
        server has no lz4 (the migration then leaves the default)."""
        with psycopg.connect(fresh_db, autocommit=True) as c:
            lz4 = c.execute("SELECT count(*) FROM pg_settings WHERE name = 'default_toast_compression' "
                            "AND 'lz4' = ANY(enumvals)").fetchone() == (1,)
            rows = c.execute("SELECT attcompression FROM pg_attribute WHERE attrelid = 'nearsync.documents'::regclass "
                             "AND attname IN ('bottomk', 'minhash')").fetchall()
        return not lz4 or [r[0] for r in rows] == [expected, expected]

    got = analysed()
    assert {"deleted", "record_id", "table_name", "version"} <= set(got)
    assert not (set(payload) | {"key_hashes"}) & set(got)
    assert sketch_compression("l")
    downgrade(s, "0017")
    got = analysed()
    assert "key_hashes" in got and not set(payload) & set(got)
    assert sketch_compression("")
    downgrade(s, "0015")
    assert set(payload) <= set(analysed())
    upgrade(s)


def test_the_scope_index_comes_and_goes_with_its_migration(fresh_db: str) -> None:
    """Migration 0017 creates the partial btree index ``nearsync.documents_scope`` (the dedup
    worker's count of a scope's documents reads it); its downgrade drops it."""
    s = make_settings(fresh_db)

    def indexdef() -> str | None:
        with psycopg.connect(fresh_db, autocommit=True) as c:
            row = c.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = 'nearsync' "
                            "AND indexname = 'documents_scope'").fetchone()
            return row[0] if row else None

    upgrade(s, "0019")
    assert indexdef() == ("CREATE INDEX documents_scope ON nearsync.documents USING btree (table_name, scope) "
                          "WHERE (NOT deleted)")
    downgrade(s, "0016")
    assert indexdef() is None
    upgrade(s, "0019")
    assert indexdef() is not None
    upgrade(s)  # 0020: the scope count reads the lookup table's own scope index
    assert indexdef() is None
    downgrade(s, "0019")
    assert indexdef() is not None


def test_the_large_blocks_of_a_snapshot_come_and_go_with_their_migration(fresh_db: str) -> None:
    """Migration 0019 gives ``nearsync.rarity_snapshots`` the ``max_block`` and ``large_blocks``
    columns (a snapshot stored before gets 0 and none: no purging); its downgrade drops them and
    keeps the snapshot's word counts."""
    s = make_settings(fresh_db)

    def columns() -> list[tuple[str, str | None]]:
        with psycopg.connect(fresh_db, autocommit=True) as c:
            return c.execute("SELECT column_name, column_default FROM information_schema.columns "
                             "WHERE table_schema = 'nearsync' AND table_name = 'rarity_snapshots' "
                             "AND column_name IN ('max_block', 'large_blocks') ORDER BY column_name").fetchall()

    upgrade(s)
    downgrade(s, "0018")
    assert columns() == []
    with psycopg.connect(fresh_db, autocommit=True) as c:
        c.execute("INSERT INTO nearsync.rarity_snapshots (table_name, documents, tokens, active, token_hashes, dfs) "
                  "VALUES ('public.ads', 3, 0, true, '', '')")
    upgrade(s)
    assert [name for name, _ in columns()] == ["large_blocks", "max_block"]
    with psycopg.connect(fresh_db, autocommit=True) as c:
        assert c.execute("SELECT documents, max_block, length(large_blocks) FROM nearsync.rarity_snapshots"
                         ).fetchall() == [(3, 0, 0)]
    downgrade(s, "0018")
    with psycopg.connect(fresh_db, autocommit=True) as c:
        assert c.execute("SELECT documents FROM nearsync.rarity_snapshots").fetchall() == [(3,)]
    assert columns() == []
