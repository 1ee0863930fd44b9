"""IdleCheck: pooled connections are pinged on borrow only after sitting idle, against a real
PostgreSQL whose server process for the pooled connection is terminated."""

from __future__ import annotations

import asyncio
from typing import Any

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


async def _plans_seen(conn: psycopg.AsyncConnection, stmt: Any, params: dict[str, Any], times: int = 6) -> list[str]:
    """Run ``stmt`` with ``params`` ``times`` times on ``conn`` and return the plans auto_explain
    reported for them (NOTICE messages: the plans PostgreSQL executed), without the statement's text."""
    seen: list[str] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        if d.message_primary and ("nearsync.documents" in d.message_primary or "plan_rule" in d.message_primary):
            seen.append(_plan_part(d.message_primary))
    conn.add_notice_handler(keep)
    try:
        for _ in range(times):
            await conn.execute(stmt, params)
        await conn.execute("SELECT 1")  # in a transaction the last call's portal (and plan report) ends only now
    finally:
        conn.remove_notice_handler(keep)
    return seen


def _plan_part(message: str) -> str:
    """The plan of an auto_explain report: its lines from the first with a cost estimate on (the
    statement's text comes before it)."""
    lines = message.split("\n")
    return "\n".join(lines[next(i for i, line in enumerate(lines) if "(cost=" in line):])


async def test_pooled_sessions_plan_once_only_marked_queries_with_short_arrays(fresh_db: str) -> None:
    """The rule of daemon.db.pool.PlanModeCursor, read from the plans PostgreSQL executed
    (auto_explain): a call of a query marked ``-- plan: generic`` (get_versions) whose arrays hold
    at most GENERIC_PLAN_MAX_ELEMENTS elements runs from the connection's one generic plan (``$2``
    in the plan; prepared, planned once), in a transaction too, which leaves the session's mode as
    it was; its call with a longer array, and any call of an unmarked statement (with a short array
    or with scalars only), is planned with its values every time (the values appear in the plan),
    also inside a transaction, after a rolled-back one undid a mode switch, and after a marked call
    in the same transaction. A connection that also runs unmarked calls outside transactions (a
    queue loop's, with its claims) keeps custom plans there and uses generic ones in transactions."""
    from daemon.db.pool import GENERIC_PLAN_MAX_ELEMENTS, PlanModeCursor, configure_session
    from daemon.db.queries import generic_plan_ok, query
    from daemon.ops.migrate import upgrade
    from tests.conftest import make_settings

    upgrade(make_settings(fresh_db))
    marked = query("get_versions")
    assert generic_plan_ok(marked) and not generic_plan_ok(query("claim"))
    short = {"table": "public.ads", "record_ids": ["0", "1", "2"]}
    long = {"table": "public.ads", "record_ids": [str(i) for i in range(GENERIC_PLAN_MAX_ELEMENTS + 1)]}
    unmarked, unmarked_scalar = "SELECT count(*) FROM plan_rule WHERE x = ANY(%(ids)s::int[])", \
        "SELECT count(*) FROM plan_rule WHERE x < %(n)s"
    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as conn:
        await conn.execute("CREATE TABLE plan_rule AS SELECT g AS x FROM generate_series(1, 20000) g")
        await conn.execute("ANALYZE plan_rule")
    for serves_unmarked in (False, True):
        async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as conn:
            await configure_session(conn)
            assert conn.cursor_factory is PlanModeCursor
            for setting in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                            "SET auto_explain.log_level = notice"):
                await conn.execute(setting)

            async def generic(stmt: Any, params: dict[str, Any]) -> bool:
                plans = await _plans_seen(conn, stmt, params)
                return len(plans) == 6 and all("$" in p for p in plans)

            async def custom(stmt: Any, params: dict[str, Any]) -> bool:
                plans = await _plans_seen(conn, stmt, params)
                return len(plans) == 6 and all("$" not in p for p in plans)

            if serves_unmarked:
                assert await custom(unmarked_scalar, {"n": 5})
                assert await custom(marked, short)  # outside a transaction: the session stays custom
                async with conn.transaction():
                    assert await generic(marked, short)  # in one: set for it
                    assert await custom(unmarked_scalar, {"n": 5})  # and undone for the unmarked call
                    assert await custom(marked, long)
                assert await custom(marked, short)
                continue
            assert await generic(marked, short)
            cur = await conn.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                                     "WHERE statement LIKE '%%nearsync.documents%%'")
            first = await cur.fetchall()
            assert len(first) == 1 and first[0][0] >= 1 and first[0][1] == 0  # prepared on its 5th run, never re-planned
            assert await custom(marked, long)
            async with conn.transaction():
                assert await custom(unmarked, {"ids": [1, 2, 3]})
                assert await custom(unmarked_scalar, {"n": 5})
            assert await generic(marked, short)  # back to the one generic plan
            async with conn.transaction():
                assert await custom(marked, long)
                assert await generic(marked, short)
                assert await custom(unmarked_scalar, {"n": 5})
            assert await generic(marked, short)  # the session is in force_generic_plan again
            with pytest.raises(ZeroDivisionError):
                async with conn.transaction():
                    assert await custom(unmarked_scalar, {"n": 5})  # switches the session to custom plans...
                    raise ZeroDivisionError  # ...and the rollback switches it back to force_generic_plan
            assert await custom(marked, long)  # so it is switched again
            async with conn.transaction():
                assert await generic(marked, short)  # for this transaction only
            assert (await (await conn.execute("SHOW plan_cache_mode")).fetchone()) == ("force_custom_plan",)
