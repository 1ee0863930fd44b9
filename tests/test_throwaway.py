"""The throwaway server: where its cluster goes, and the start in the background (real servers)."""

from __future__ import annotations

import os
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
