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


async def _plans_seen(conn: psycopg.AsyncConnection, sql_text: str, ids: list[int], times: int = 6) -> list[str]:
    """Run ``sql_text`` with ``ids`` ``times`` times on ``conn`` and return the plans auto_explain
    reported for them (as NOTICE messages: the plans PostgreSQL executed; ``sql_text`` on one line)."""
    seen: list[str] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        if d.message_primary and "FROM plan_rule" in d.message_primary:
            seen.append(d.message_primary.split("\n", 2)[2])  # the plan, after the statement's text
    conn.add_notice_handler(keep)
    try:
        for _ in range(times):
            await conn.execute(sql_text, {"ids": ids})
        await conn.execute("SELECT 1")  # in a transaction the last call's portal (and plan report) ends only now
    finally:
        conn.remove_notice_handler(keep)
    return seen


async def test_pooled_sessions_plan_long_array_calls_with_their_values_and_short_ones_once(fresh_db: str) -> None:
    """The rule of daemon.db.pool.PlanModeCursor, read from the plans PostgreSQL executed
    (auto_explain): a call with an array longer than GENERIC_PLAN_MAX_ELEMENTS is planned with
    its values every time (the array appears in the plan, the statement is not prepared), also
    inside a transaction and after a rolled-back one undid a mode switch; a call with a short array
    runs from the connection's one generic plan (``$1`` in the plan, prepared, no custom plan),
    also inside a transaction, which leaves the session's mode as it was."""
    from daemon.db.pool import GENERIC_PLAN_MAX_ELEMENTS, PlanModeCursor, configure_session

    stmt = "SELECT count(*) FROM plan_rule WHERE x = ANY(%(ids)s::int[])"
    short, long = [1, 2, 3], list(range(GENERIC_PLAN_MAX_ELEMENTS + 1))
    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as conn:
        await conn.execute("DROP TABLE IF EXISTS plan_rule")
        await conn.execute("CREATE TABLE plan_rule AS SELECT g AS x FROM generate_series(1, 20000) g")
        await conn.execute("ALTER TABLE plan_rule ADD PRIMARY KEY (x)")
        await conn.execute("ANALYZE plan_rule")
    try:
        async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as conn:
            await configure_session(conn)
            assert conn.cursor_factory is PlanModeCursor
            for setting in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                            "SET auto_explain.log_level = notice"):
                await conn.execute(setting)

            def custom(plans: list[str]) -> bool:
                return len(plans) == 6 and all("$1" not in p and "{0,1,2," in p for p in plans)

            def generic(plans: list[str]) -> bool:
                return len(plans) == 6 and all("$1" in p for p in plans)

            async def prepared() -> dict[str, tuple[int, int]]:
                cur = await conn.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
                return {r[0]: (r[1], r[2]) for r in await cur.fetchall() if "plan_rule" in r[0]}

            assert generic(await _plans_seen(conn, stmt, short))
            first = list((await prepared()).values())
            assert len(first) == 1 and first[0][0] >= 1 and first[0][1] == 0  # prepared once, no custom plan
            assert custom(await _plans_seen(conn, stmt, long))
            assert list((await prepared()).values()) == first  # the long calls ran unnamed
            assert generic(await _plans_seen(conn, stmt, short))  # back to the generic plan
            async with conn.transaction():
                assert custom(await _plans_seen(conn, stmt, long))
                assert generic(await _plans_seen(conn, stmt, short))
            assert generic(await _plans_seen(conn, stmt, short))  # the session is in force_generic_plan again
            with pytest.raises(ZeroDivisionError):
                async with conn.transaction():
                    assert custom(await _plans_seen(conn, stmt, long))  # switches the session to auto...
                    raise ZeroDivisionError  # ...and the rollback switches it back to force_generic_plan
            assert custom(await _plans_seen(conn, stmt, long))  # so auto is set again
            async with conn.transaction():
                assert generic(await _plans_seen(conn, stmt, short))  # for this transaction only
            assert (await (await conn.execute("SHOW plan_cache_mode")).fetchone()) == ("auto",)
    finally:
        async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as conn:
            await conn.execute("DROP TABLE plan_rule")
