"""The command line fails clearly (issue 19): every failure ends with one line naming the problem
and the documented exit code (2 configuration or usage, 3 database not ready, 4 database, index or
port unreachable), with no traceback unless ``--debug``. Against a real PostgreSQL server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from daemon.cli import (
    EXIT_CONFIG,
    EXIT_PROBLEM,
    EXIT_SCHEMA,
    EXIT_UNREACHABLE,
    exit_status,
    main,
)
from daemon.ops.migrate import current_revision, upgrade
from tests.conftest import REPO, make_settings

UNREACHABLE = "postgresql://u:pw-s3cret@127.0.0.1:1/x"  # nothing listens on port 1


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run ``nearsync argv`` in this process; returns ``(exit code, stderr)`` (argparse's exit too)."""
    capsys.readouterr()
    try:
        rc = main(list(argv))
    except SystemExit as e:  # argparse usage errors
        rc = int(e.code or 0)
    return rc, capsys.readouterr().err


def spawn(*argv: str, env: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, str]:
    """Run ``python -m daemon argv`` as a real process; returns ``(exit code, stderr)``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NEARSYNC_")}
    proc = subprocess.run([sys.executable, "-m", "daemon", *argv], cwd=REPO, env={**clean, **(env or {})},
                          capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, proc.stderr


def last_line(err: str) -> str:
    """The last line of stderr, after asserting there is no traceback in it."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert lines, "nothing on stderr"
    return lines[-1]


@pytest.fixture(autouse=True)
def _no_nearsync_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cases set the variables they are about and no other."""
    for k in list(os.environ):
        if k.startswith("NEARSYNC_"):
            monkeypatch.delenv(k)


@pytest.fixture
def migrated(fresh_db: str) -> str:
    """A migrated database with the reference ads table; its DSN."""
    upgrade(make_settings(fresh_db))
    return fresh_db


def write(tmp_path: Path, text: str) -> str:
    """A TOML config file holding ``text``; its path."""
    path = tmp_path / "nearsync.toml"
    path.write_text(text)
    return str(path)


# -- 4: unreachable ---------------------------------------------------------------------------------

def test_migrate_against_an_unreachable_server_is_one_line_exit_4_without_the_password() -> None:
    rc, err = spawn("migrate", "--dsn", UNREACHABLE)
    assert rc == EXIT_UNREACHABLE
    assert err.strip().splitlines() == [last_line(err)]
    assert last_line(err).startswith("nearsync: cannot reach the database: ") and "Connection refused" in err
    assert "pw-s3cret" not in err


def test_downgrade_through_sqlalchemy_against_an_unreachable_server_is_exit_4(
        capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = cli(capsys, "migrate", "--downgrade", "base", "--dsn", UNREACHABLE)
    assert rc == EXIT_UNREACHABLE and last_line(err).startswith("nearsync: cannot reach the database")
    assert "pw-s3cret" not in err and "sqlalche" not in err


def test_debug_prints_the_traceback_then_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = cli(capsys, "migrate", "--debug", "--dsn", UNREACHABLE)
    assert rc == EXIT_UNREACHABLE and "Traceback" in err
    assert err.strip().splitlines()[-1].startswith("nearsync: cannot reach the database")


def test_a_metrics_port_in_use_is_one_line_exit_4(migrated: str) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc, err = spawn("run", "--dsn", migrated, "--metrics-port", str(port))
    assert rc == EXIT_UNREACHABLE
    assert last_line(err).startswith("nearsync: cannot listen: ") and "address already in use" in err.lower()


# -- 3: database not ready ----------------------------------------------------------------------------

def test_migrate_without_the_source_table_is_exit_3_and_migrates_nothing(
        fresh_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = cli(capsys, "migrate", "--dsn", fresh_db)
    assert rc == EXIT_SCHEMA
    assert last_line(err).startswith("nearsync: table public.ads does not exist (source.schema / source.table)")
    s = make_settings(fresh_db)
    assert current_revision(s) is None  # not left half migrated
    with psycopg.connect(fresh_db) as c:
        assert c.execute("SELECT to_regnamespace('nearsync')").fetchone() == (None,)


def test_deadletter_list_on_a_database_never_migrated_is_exit_3(
        fresh_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = cli(capsys, "deadletter", "list", "--dsn", fresh_db)
    assert rc == EXIT_SCHEMA and "nearsync migrate" in last_line(err) and "dead_letters" in last_line(err)


def test_serve_on_a_database_never_migrated_exits_3_at_start(fresh_db: str) -> None:
    """Before: ``serve`` started and answered 500 to everything."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    rc, err = spawn("serve", "--dsn", fresh_db, "--port", str(port), timeout=30)  # a server would time out
    assert rc == EXIT_SCHEMA and "nearsync migrate" in last_line(err)


def test_a_missing_id_column_is_named_as_source_id_column(
        migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(tmp_path, '[source]\nid_column = "ad_id"\n')
    for command in ("status", "migrate"):
        rc, err = cli(capsys, command, "--config", cfg, "--dsn", migrated)
        assert rc == EXIT_SCHEMA, command
        assert last_line(err) == "nearsync: table public.ads has no column ad_id (source.id_column)", command


def test_a_missing_field_column_is_named_as_source_fields(
        migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(tmp_path, '[source.fields]\ntitle = "headline"\n')
    rc, err = cli(capsys, "status", "--config", cfg, "--dsn", migrated)
    assert rc == EXIT_CONFIG and "source.tracked_columns" in last_line(err)  # caught before any connection
    cfg = write(tmp_path, '[source]\ntracked_columns = ["user_id", "headline"]\n'
                          '[source.fields]\ntitle = "headline"\nuser = "user_id"\n')
    rc, err = cli(capsys, "migrate", "--config", cfg, "--dsn", migrated)
    assert rc == EXIT_SCHEMA and last_line(err) == "nearsync: table public.ads has no column(s) headline (source.fields)"


# -- 2: configuration and usage ------------------------------------------------------------------------

def test_a_dsn_that_is_no_dsn_is_exit_2_naming_the_setting(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = cli(capsys, "status", "--dsn", "not a dsn")
    assert rc == EXIT_CONFIG and last_line(err).startswith("nearsync: config error at 'database.dsn': not a PostgreSQL")
    rc, err = cli(capsys, "status", "--dsn", "host=db password='s3cret pw")
    assert rc == EXIT_CONFIG and "database.dsn" in last_line(err) and "s3cret" not in err
    rc, err = cli(capsys, "status", "--dsn", "host=db port=54x2")
    assert rc == EXIT_CONFIG and "port must be a TCP port" in last_line(err)


def test_a_bad_dsn_in_the_environment_names_the_variable(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NEARSYNC_DSN", "not a dsn")
    rc, err = cli(capsys, "status")
    assert rc == EXIT_CONFIG and "NEARSYNC_DSN (database.dsn)" in last_line(err)


@pytest.mark.parametrize(("argv", "message"), [
    (["deadletter", "list", "--limit", "-1"], "argument --limit: must be a positive integer, got -1"),
    (["reindex", "--page-size", "-3"], "argument --page-size: must be a positive integer, got -3"),
    (["reindex", "--page-size", "0"], "argument --page-size: must be a positive integer, got 0"),
    (["reindex", "--verify", "--sample", "0"], "argument --sample: must be a positive integer, got 0"),
    (["lsh", "--threshold", "2"], "argument --threshold: must be between 0 and 1 (both excluded), got 2"),
    (["lsh", "--threshold", "0"], "argument --threshold: must be between 0 and 1 (both excluded), got 0"),
    (["lsh", "--num-perm", "0"], "argument --num-perm: must be a positive integer, got 0"),
])
def test_out_of_range_flags_are_usage_errors(argv: list[str], message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Before: tracebacks (a negative LIMIT reached PostgreSQL; lsh_params raised ValueError), and
    ``reindex --page-size 0`` rebuilt nothing and exited 0."""
    rc, err = cli(capsys, *argv, *(["--dsn", UNREACHABLE] if argv[0] != "lsh" else []))
    assert rc == EXIT_CONFIG
    assert last_line(err).endswith(f"error: {message}") and err.startswith("usage: nearsync")


def test_lsh_in_range_still_works(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lsh", "--threshold", "0.8", "--num-perm", "64"]) == 0
    assert capsys.readouterr().out.startswith("threshold 0.8 with 64 permutations: ")


def test_a_bad_metrics_port_variable_is_one_line_naming_it() -> None:
    rc, err = spawn("run", "--dsn", UNREACHABLE, env={"NEARSYNC_METRICS_PORT": "abc"})
    assert rc == EXIT_CONFIG
    assert err.strip().splitlines() == [
        "nearsync: config error at 'NEARSYNC_METRICS_PORT (daemon.metrics_port)': must be a number, got 'abc'"]


def test_a_bad_mode_variable_is_named(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NEARSYNC_MODE", "fast")
    rc, err = cli(capsys, "run", "--dsn", UNREACHABLE)
    assert rc == EXIT_CONFIG and "NEARSYNC_MODE (daemon.mode)" in last_line(err)


def test_evaluate_without_records_or_the_shared_set_names_the_missing_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``nearsync evaluate`` with no ``--records`` reads the shared Abt-Buy set; a data directory
    without it is a configuration error naming the files, before any server is started."""
    (tmp_path / "abt-buy").mkdir()
    (tmp_path / "abt-buy" / "Abt.csv").write_text("id,name\n")
    monkeypatch.setenv("NEARSYNC_DATA", str(tmp_path))
    rc, err = cli(capsys, "evaluate")
    line = last_line(err)
    assert rc == EXIT_CONFIG and line.startswith("nearsync: config error at '--records'")
    assert "Buy.csv" in line and "abt_buy_perfectMapping.csv" in line and "Abt.csv," not in line
    monkeypatch.setenv("NEARSYNC_DATA", str(tmp_path / "absent"))
    rc, err = cli(capsys, "evaluate")
    assert rc == EXIT_CONFIG and "NEARSYNC_DATA" in last_line(err)


def test_a_metrics_port_out_of_range_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = cli(capsys, "run", "--dsn", UNREACHABLE, "--metrics-port", "99999")
    assert rc == EXIT_CONFIG and "daemon.metrics_port" in last_line(err) and "99999" in last_line(err)


@pytest.mark.parametrize(("dedup", "key"), [
    ("duplicate_threshold = 150", "dedup.duplicate_threshold"),
    ("potential_threshold = -1", "dedup.potential_threshold"),
    ("duplicate_threshold = 60\npotential_threshold = 80", "dedup.potential_threshold"),
])
def test_status_validates_the_dedup_thresholds(migrated: str, tmp_path: Path, dedup: str, key: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """``status`` (and every other command) validates ``[dedup]``, not only the worker: thresholds
    within 0-100, potential <= duplicate."""
    cfg = write(tmp_path, f"[dedup]\n{dedup}\n")
    for command in ("status", "migrate"):
        rc, err = cli(capsys, command, "--config", cfg, "--dsn", migrated)
        assert rc == EXIT_CONFIG and f"'{key}'" in last_line(err), (command, err)


def test_an_unexpected_error_is_one_line_with_its_type() -> None:
    code, line = exit_status(RuntimeError("boom\nsecond line"))
    assert code == EXIT_PROBLEM and line == "unexpected error: RuntimeError: boom (--debug shows the traceback)"
    try:
        try:
            raise psycopg.OperationalError("connection to postgresql://a:hunter2@h/x failed")
        except psycopg.OperationalError as e:
            raise RuntimeError("wrapped") from e
    except RuntimeError as wrapped:
        code, line = exit_status(wrapped)
    assert code == EXIT_UNREACHABLE and "hunter2" not in line


MAPPED_AUTHORS = ('[source]\ntracked_columns = ["user_id", "category", "title", "body", "price", "lat", "lon", '
                  '"status", "source", "authors"]\n[source.fields]\ntitle = "title"\nuser = "user_id"\n'
                  'authors = "authors"\n')


@pytest.mark.parametrize(("toml", "key", "says"), [
    ('[source.fields]\n"Authors" = "title"\n', "source.fields.Authors", "lower-case letters"),
    ('[source.fields]\ntokens = "title"\n', "source.fields.tokens", "reserved"),
    (MAPPED_AUTHORS + '[dedup.fields.authors]\nmetric = "fuzzy"\nweight = 1\n', "dedup.fields.authors.metric",
     "must be one of"),
    (MAPPED_AUTHORS + '[dedup.fields.authors]\nweight = 1\n', "dedup.fields.authors.metric", "no default metric"),
    ('[dedup.fields.authors]\nmetric = "token_set"\nweight = 1\n', "dedup.fields.authors",
     "is not mapped to a column: add source.fields.authors"),
], ids=["bad-name", "reserved-name", "unknown-metric", "no-metric", "unmapped"])
def test_a_field_of_ones_own_misconfigured_is_one_line_naming_the_key(
        migrated: str, tmp_path: Path, toml: str, key: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 17, item 5: a bad field name, a scored field of one's own with an unknown or no metric,
    or one no ``[source.fields]`` entry maps: exit 2 at start, one line naming the key."""
    rc, err = cli(capsys, "status", "--config", write(tmp_path, toml), "--dsn", migrated)
    assert rc == EXIT_CONFIG and f"'{key}'" in last_line(err) and says in last_line(err), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_demo_falls_back_to_generated_ads_naming_each_missing_file(tmp_path: Path) -> None:
    """A data folder with Abt.csv but not Buy.csv or the mapping: the demo does not crash reading the
    set, it uses generated ads and its note names the two files it lacks (``evaluate``'s check)."""
    from daemon.evaluation.demo import load_dataset

    (tmp_path / "abt-buy").mkdir()
    (tmp_path / "abt-buy" / "Abt.csv").write_text("id,name,description,price\n1,a,b,1\n")
    ds, note = load_dataset(str(tmp_path), 10)
    assert ds.name == "generated" and len(ds.records) == 20
    assert note.startswith("NOTE: ") and "Buy.csv" in note and "abt_buy_perfectMapping.csv" in note
    assert "Abt.csv," not in note and "20 ads generated" in note
