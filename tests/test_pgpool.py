"""IdleCheck: pooled connections are pinged on borrow only after sitting idle, against a real
PostgreSQL whose server process for the pooled connection is terminated."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from daemon.db.pool import IdleCheck


async def _pid(pool: AsyncConnectionPool) -> int:
    async with pool.connection() as c:
        row = await (await c.execute("SELECT pg_backend_pid()")).fetchone()
        assert row is not None
        return int(row[0])


async def _terminate(dsn: str, pid: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        await c.execute("SELECT pg_terminate_backend(%s)", (pid,))
    await asyncio.sleep(0.05)


async def test_idle_connection_is_checked_and_a_fresh_one_is_not(fresh_db: str) -> None:
    ic = IdleCheck(max_idle_s=0.3)
    async with AsyncConnectionPool(fresh_db, min_size=1, max_size=1, open=False, check=ic.check, reset=ic.reset,
                                   kwargs={"autocommit": True}) as pool:
        first = await _pid(pool)
        await _terminate(fresh_db, first)
        await asyncio.sleep(0.4)  # idle longer than max_idle_s: pinged, found dead, replaced
        second = await _pid(pool)
        assert second != first
        await _terminate(fresh_db, second)  # returned moments ago: handed out unchecked
        with pytest.raises(psycopg.OperationalError):
            await _pid(pool)
        assert await _pid(pool) not in (first, second)  # the pool discarded the broken one
