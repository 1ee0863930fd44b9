"""Tracking-table hygiene under churn: rows are deleted on acknowledgement, so after the daemon drains
and VACUUM runs, the size of ``nearsync.index_tracking`` plus ``nearsync.change_log`` (where the
triggers append; relayed rows are deleted from it) depends on the largest
backlog seen, not on how many changes went through.

The default variant pushes 100,000 changes (20 waves of 5,000 updates on the same rows); the
``slow`` variant 1,000,000 (run with ``-m slow`` or ``NEARSYNC_SLOW=1``). The rows are inactive
(``status = 'sold'``), so every change is a cheap index delete and the test measures the tracking
table, not signature throughput.
"""

from __future__ import annotations


import psycopg
import pytest

from tests.conftest import slow_enabled

from daemon.config import Settings
from daemon.db.queries import query
from tests.conftest import pending, running_indexer, wait_until
from tests.test_cdc import in_sync

WAVE = 5_000


async def tracking_size(dsn: str) -> tuple[int, int]:
    """``(bytes, rows)`` of the tracking table and the change log after a plain VACUUM of both
    (what autovacuum does)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        await c.execute("VACUUM nearsync.index_tracking, nearsync.change_log")
        row = await (await c.execute(query("tracking_size"))).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


async def churn(s: Settings, waves: int) -> list[int]:
    """Insert ``WAVE`` ads, then update all of them ``waves`` times with the daemon running; returns
    the tracking table's size (bytes) after each drained and vacuumed wave."""
    sizes: list[int] = []
    async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
        await c.execute("INSERT INTO ads (title, body, price, status) SELECT 'Listing ' || g, 'Body ' || g, g, 'sold' "
                        "FROM generate_series(1, %s) g", (WAVE,))
    async with running_indexer(s):
        for k in range(waves):
            async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
                await c.execute("UPDATE ads SET title = 'Listing ' || id || ' edit ' || %s::text", (k,))
            await wait_until(lambda: _drained(s.dsn), timeout=300, interval=0.2)
            size, rows = await tracking_size(s.dsn)
            assert rows == 0
            sizes.append(size)
        await wait_until(lambda: in_sync(s), timeout=120)
    return sizes


async def _drained(dsn: str) -> bool:
    return await pending(dsn) == 0


def assert_bounded(sizes: list[int]) -> None:
    """The size plateaus after the second wave (the primary-key index settles at about two waves'
    worth of pages; a table that kept its rows would grow by about 0.7 MB per wave)."""
    settled, last = sizes[1], sizes[-1]
    assert last <= settled * 1.25, f"tracking table grew from {settled} to {last} bytes over {len(sizes)} waves: {sizes}"


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
async def test_tracking_table_stays_small_after_100k_changes(settings: Settings) -> None:
    sizes = await churn(settings, 20)
    assert_bounded(sizes)


@pytest.mark.slow
@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
async def test_tracking_table_stays_small_after_1m_changes(settings: Settings, request: pytest.FixtureRequest) -> None:
    if not slow_enabled(request.config):
        pytest.skip("slow: run with -m slow or NEARSYNC_SLOW=1")
    sizes = await churn(settings, 200)
    assert_bounded(sizes)
