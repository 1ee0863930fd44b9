"""Connection-pool callbacks shared by nearsync's psycopg pools (psycopg_pool.AsyncConnectionPool).

:func:`configure_session` sets up each new pooled connection (``sql/queries/queue.sql``,
``session_settings``: JIT off).

``AsyncConnectionPool.check_connection`` pings every connection it hands out: one more round trip
(~0.12 ms here) on every borrow, three or four of them per record in the dedup worker's one-record
batches. :class:`IdleCheck` pings only a connection that sat in the pool longer than
``max_idle_s``; one returned moments ago was working moments ago. A connection that broke in
between (the server restarting) fails its statement with ``psycopg.OperationalError``, which every
caller already treats as transient (retry with backoff), and the pool then discards it.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import psycopg
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

from daemon.db import jsoncodec
from daemon.db.queries import query


async def configure_session(conn: psycopg.AsyncConnection[Any]) -> None:
    """Pool ``configure`` callback for a new connection: parse ``json``/``jsonb`` with orjson
    (:func:`daemon.db.jsoncodec.loads`; the dedup worker reads thousands of documents and links per
    batch), and apply ``session_settings`` (JIT off: the planner over-estimates a recursive CTE by
    orders of magnitude and PostgreSQL then spent ~180 ms compiling a ~20 ms statement at
    1,000,000 records).

    Raises:
        psycopg.Error: the connection failed (the pool discards it).
    """
    set_json_loads(jsoncodec.loads, conn)
    await conn.execute(query("session_settings"))


class IdleCheck:
    """``check`` and ``reset`` callbacks for an ``AsyncConnectionPool``.

    Args:
        max_idle_s: a connection idle in the pool longer than this (s) is pinged before it is handed
            out; default 1 s.

    Usage: ``AsyncConnectionPool(dsn, check=ic.check, reset=ic.reset)`` with ``ic = IdleCheck()``.
    """

    def __init__(self, max_idle_s: float = 1.0) -> None:
        self.max_idle_s = max_idle_s
        self._returned: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = weakref.WeakKeyDictionary()

    async def reset(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Pool callback on a connection given back: remember when (monotonic s)."""
        self._returned[conn] = time.monotonic()

    async def check(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Pool callback before handing ``conn`` out: ping it when it was idle too long or never used.

        Raises:
            psycopg.OperationalError: the connection is broken (the pool discards it and tries another).
        """
        returned = self._returned.get(conn)
        if returned is None or time.monotonic() - returned > self.max_idle_s:
            await AsyncConnectionPool.check_connection(conn)
