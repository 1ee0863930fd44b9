"""The throwaway server: where its cluster goes, and the start in the background (real servers)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from daemon.db.throwaway import (MEMORY_DIR, THROWAWAY_DIR_ENV, PgServerError, ThrowawayPostgres, available_memory,
                                 cluster_parent)


def _system_id(dsn: str) -> int:
    """The cluster's system identifier (set by ``initdb``), after a write that must succeed."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE t (x int)")
        c.execute("INSERT INTO t VALUES (1)")
        row = c.execute("SELECT system_identifier FROM pg_control_system()").fetchone()
    assert row is not None
    return int(row[0])


def test_where_a_cluster_goes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``NEARSYNC_THROWAWAY_DIR`` wins; else memory when the room asked for is free there; else
    the temp dir (``None``). A setting that names no directory is an error naming it."""
    monkeypatch.delenv(THROWAWAY_DIR_ENV, raising=False)
    assert cluster_parent(0) is None
    assert cluster_parent(1 << 60) is None  # more than any /dev/shm has free
    if MEMORY_DIR.is_dir():
        assert cluster_parent(1) == MEMORY_DIR
        available = available_memory()
        if available is not None:  # room in /dev/shm is not enough without the memory to back it
            free = os.statvfs(MEMORY_DIR).f_bavail * os.statvfs(MEMORY_DIR).f_frsize
            if available // 2 + 1 <= free:
                assert cluster_parent(available // 2 + 1) is None
    monkeypatch.setenv(THROWAWAY_DIR_ENV, str(tmp_path))
    assert cluster_parent(1) == tmp_path
    monkeypatch.setenv(THROWAWAY_DIR_ENV, str(tmp_path / "missing"))
    with pytest.raises(PgServerError, match=THROWAWAY_DIR_ENV):
        cluster_parent(0)


@pytest.mark.skipif(not MEMORY_DIR.is_dir(), reason="no /dev/shm on this machine")
def test_a_cluster_in_memory_works_and_is_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server given the room it needs in ``/dev/shm`` lives there, takes writes, and leaves
    nothing behind once stopped."""
    monkeypatch.delenv(THROWAWAY_DIR_ENV, raising=False)
    with ThrowawayPostgres(fast=True, memory_bytes=64 << 20) as server:
        assert server.base_dir is not None and server.base_dir.parent == MEMORY_DIR
        assert _system_id(server.dsn) > 0
    assert not server.base_dir.exists()


def test_a_start_in_the_background_gives_its_dsn_or_its_error(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``start()`` after ``start_in_background()`` returns that start's DSN; a failed background
    start raises its error from ``start()``, and ``stop()`` after it does not raise."""
    server = ThrowawayPostgres(fast=True)
    server.start_in_background()
    try:
        dsn = server.start()
        assert dsn == server.dsn and _system_id(dsn) > 0
    finally:
        server.stop()
    assert server.base_dir is not None and not server.base_dir.exists()

    monkeypatch.setenv("NEARSYNC_PG_BINDIR", str(tmp_path / "no-such-bindir"))
    broken = ThrowawayPostgres(fast=True)
    broken.start_in_background()
    with pytest.raises(PgServerError, match="NEARSYNC_PG_BINDIR"):
        broken.start()
    broken.stop()


_HOLD_A_SERVER = """
import time
from daemon.db.throwaway import ThrowawayPostgres
server = ThrowawayPostgres(fast=True)
print(server.start(), server.base_dir, flush=True)
time.sleep(600)
"""


def _accepts(dsn: str) -> bool:
    """Whether a server answers at ``dsn`` within 3 s."""
    try:
        with psycopg.connect(dsn, connect_timeout=3) as c:
            c.execute("SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


@pytest.fixture
def shared_parent() -> Iterator[Path]:
    """A directory of its own for clusters, traversable by the server's account (``tmp_path`` is
    not, when the tests run as root and the server as ``postgres``)."""
    import shutil
    import tempfile

    parent = Path(tempfile.mkdtemp(prefix="nearsync-test-parent-"))
    parent.chmod(0o755)
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


def test_a_cluster_left_by_a_killed_process_is_reaped_by_the_next_start(shared_parent: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A process killed with ``kill -9`` leaves its server running and its directory behind (in
    ``/dev/shm``: memory). The next throwaway start in the same place stops that server and removes
    its directory; the cluster of a live process (this one's) is left alone."""
    import subprocess
    import sys

    monkeypatch.setenv(THROWAWAY_DIR_ENV, str(shared_parent))
    with ThrowawayPostgres(fast=True) as live:
        child = subprocess.Popen([sys.executable, "-c", _HOLD_A_SERVER], stdout=subprocess.PIPE, text=True,
                                 env=os.environ | {THROWAWAY_DIR_ENV: str(shared_parent)})
        try:
            assert child.stdout is not None
            dsn, left_dir = child.stdout.readline().split()
        finally:
            child.kill()
            child.wait()  # a zombie still counts as a process
        assert Path(left_dir).is_dir() and _accepts(dsn)  # what kill -9 leaves
        with ThrowawayPostgres(fast=True) as after:
            assert after.base_dir is not None and after.base_dir.parent == shared_parent
            assert not Path(left_dir).exists() and not _accepts(dsn)
            assert live.base_dir is not None and live.base_dir.is_dir() and _accepts(live.dsn)
        assert sorted(shared_parent.iterdir()) == [live.base_dir]


def test_a_start_reaps_both_default_places_unless_a_directory_is_set(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster killed in ``/dev/shm`` is reaped by a later start that goes to the temp dir, and
    the other way round; with ``NEARSYNC_THROWAWAY_DIR`` set, only that directory is looked at."""
    import tempfile

    from daemon.db.throwaway import _reaped_places

    monkeypatch.delenv(THROWAWAY_DIR_ENV, raising=False)
    temp = Path(tempfile.gettempdir())
    expected = [temp] + ([MEMORY_DIR] if MEMORY_DIR.is_dir() else [])
    assert sorted(_reaped_places()) == sorted(expected)  # whether the start goes to memory or to disk
    monkeypatch.setenv(THROWAWAY_DIR_ENV, str(tmp_path))
    assert _reaped_places() == [tmp_path]
