"""Connection-pool callbacks shared by nearsync's psycopg pools (psycopg_pool.AsyncConnectionPool).

:func:`configure_session` sets up each new pooled connection (``sql/queries/listen.sql``,
``session_settings``: JIT off, custom plans) and gives it :class:`PlanModeCursor`, which lets the
calls of the queries marked ``-- plan: generic`` with short arrays run from a plan made once per
connection (generic) and every other call from one made with its values (custom).

``AsyncConnectionPool.check_connection`` pings every connection it hands out: one more round trip
(~0.12 ms here) on every borrow, three or four of them per record in the dedup worker's one-record
batches. :class:`IdleCheck` pings only a connection that sat in the pool longer than
``max_idle_s``; one returned moments ago was working moments ago. A connection that broke in
between (the server restarting) fails its statement with ``psycopg.OperationalError``, which every
caller already treats as transient (retry with backoff), and the pool then discards it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sized
import enum
import time
import weakref
from typing import Any

import psycopg
from psycopg.pq import PipelineStatus, TransactionStatus
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

from daemon.db import jsoncodec
from daemon.db.queries import generic_plan_ok, query

GENERIC_PLAN_MAX_ELEMENTS = 100
"""The longest array parameter (elements) of a call that may run from a generic plan (see
:class:`PlanModeCursor`). A generic plan is made once per connection without the parameter values,
taking every array parameter to hold 10 elements (``= ANY($1)``, ``unnest($1)``); a custom plan
sees the values and costs a planning pass per call: 0.02-0.5 ms for nearsync's statements, about a
quarter of PostgreSQL's time per one-record dedup batch. Up to 100 elements a statement's work is
a few index probes per element, within an order of magnitude of what the generic plan was costed
for: one record's candidate keys (10-40 per record on product listings: bands, blocks and super
tokens, a number set by the signature settings, not by the catalogue's size), the ids of a
one-record or realtime batch and of its partners. The generic plans of the statements marked
``-- plan: generic``, compared with their custom plans on the calls of the dense bench at 20,000
and 100,000 listings, ran in 0.9-1.4x their time at these sizes (medians per statement; the dearest,
``insert_links``, 0.10 against 0.07 ms; docs/benchmarks.md). A call with
a longer array (a backlog batch: hundreds to thousands of ids or keys) does enough work that
planning is a small share of it, and a plan costed for 10 elements can be far off there: generic
plans of such calls once chose a nested loop over thousands of candidate keys (500-600 ms against
50 ms per 100 lookups) and made ``delete_links_of`` 140-167 ms against 11 ms (docs/operations.md),
so those calls are always planned with their values."""


def has_long_array(params: Mapping[str, Any] | tuple[Any, ...] | list[Any] | None) -> bool | None:
    """Whether a call with ``params`` has an array parameter too long for a generic plan.

    Args:
        params: the call's parameters (a mapping or a sequence of values; None: none). An array
            parameter is any sized value other than text, bytes and mappings (a list, a tuple,
            :class:`~daemon.db.arrays.Int8Array` and the like).

    Returns:
        True when some array parameter holds more than :data:`GENERIC_PLAN_MAX_ELEMENTS`
        elements; False when there are array parameters and none is that long; None when there is
        no array parameter (scalars only, or no parameters).
    """
    if not params:
        return None
    found = None
    for v in params.values() if isinstance(params, Mapping) else params:
        if isinstance(v, Sized) and not isinstance(v, (str, bytes, bytearray, Mapping)):
            if len(v) > GENERIC_PLAN_MAX_ELEMENTS:
                return True
            found = False
    return found


class _Mode(enum.Enum):
    """A ``plan_cache_mode`` value, or UNKNOWN (set inside a transaction, which may still roll it back)."""

    CUSTOM = "force_custom_plan"
    GENERIC = "force_generic_plan"
    UNKNOWN = "unknown"


class _Modes:
    """What :class:`PlanModeCursor` knows of one connection's ``plan_cache_mode``: ``session``, the
    session-level value (exact when set where it holds for good, :func:`_settled`), and ``local``,
    the value set for the current transaction (None: none, or the transaction ended). ``local`` may
    outlive its transaction when a new one began before the next call: it is trusted only where
    trusting it wrongly costs a planning pass, never to run a call from a generic plan. ``mixed``:
    the connection also runs unmarked calls outside transactions (a queue loop's claims), so its
    session stays in ``force_custom_plan`` and generic plans are set per transaction only."""

    __slots__ = ("local", "mixed", "session")

    def __init__(self, session: _Mode) -> None:
        self.session = session
        self.local: _Mode | None = None
        self.mixed = False


_MODES: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], _Modes] = weakref.WeakKeyDictionary()


def _settled(conn: psycopg.AsyncConnection[Any]) -> bool:
    """True when a session setting made now is in force for good: autocommit, outside any
    transaction and pipeline (a ``SET`` inside a transaction is undone if it rolls back)."""
    return (conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE
            and conn.pgconn.pipeline_status == PipelineStatus.OFF)


async def _set_mode(conn: psycopg.AsyncConnection[Any], mode: _Mode, *, local: bool) -> None:
    """Set ``plan_cache_mode`` on ``conn`` (named query ``plan_cache_mode``): for the current
    transaction when ``local``, else for the session."""
    await psycopg.AsyncCursor(conn).execute(query("plan_cache_mode"), {"mode": mode.value, "local": local})


class PlanModeCursor(psycopg.AsyncCursor[Any]):
    """The cursor of every pooled connection (:func:`configure_session`). Sessions plan every call
    with its values (``plan_cache_mode = force_custom_plan``) except the calls of a query marked
    ``-- plan: generic`` (:func:`~daemon.db.queries.generic_plan_ok`) whose array parameters all
    hold at most :data:`GENERIC_PLAN_MAX_ELEMENTS` elements: those run under
    ``force_generic_plan``, so once psycopg has prepared the statement (its 5th run on the
    connection) PostgreSQL plans it once per connection instead of once per call.

    Before a call that needs the other mode than the connection is known to have, the mode is set
    (one more statement, only on a change). For a generic call: for the session when that holds for
    good (autocommit, outside a transaction and a pipeline) and the connection runs no unmarked
    calls there (a queue loop's connection, with its claims, would switch twice per batch; its
    generic calls outside transactions keep custom plans), else for the transaction (``SET
    LOCAL``, undone when it ends whatever the outcome). For any other call with parameters:
    ``force_custom_plan`` for the session, wherever the connection is (inside a transaction the
    call then sees it, and the session's mode is unknown until it is set again), or only for the
    transaction when the session is known to be in it. So a call that is not marked, or has a long
    array, never runs from a generic plan; a connection that serves marked short calls (the dedup
    worker's index reads in one-record batches) keeps ``force_generic_plan`` between them. A call
    without parameters has one plan either way. ``executemany`` is left as psycopg's.

    Why not ``plan_cache_mode = auto``: PostgreSQL keeps custom plans for statements whose generic
    plan is costed for 10 array elements against the 1-40 of one record (``delete_links_of``,
    ``scope_members``, ``get_documents_known``: planning 1.35 against 0.3 ms a record), and would
    choose a generic plan for the queue's ``claim`` on a queue that grew after its choice (its
    ``LIMIT`` is then costed at 10% of the table: 91-126 ms against 0.7-38 ms a claim on 200,000
    queued rows; docs/benchmarks.md).
    """

    async def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None,
                      binary: bool | None = None) -> "PlanModeCursor":
        """psycopg's ``AsyncCursor.execute`` under the plan mode the call needs (see the class).

        Raises:
            psycopg.Error: as psycopg's.
        """
        conn = self.connection
        modes = _MODES.get(conn)
        if modes is not None and params:
            settled = _settled(conn)
            if settled:
                modes.local = None  # no transaction: whatever was set for one is gone
            marked = generic_plan_ok(query)
            if marked and not has_long_array(params):
                if modes.session != _Mode.GENERIC and modes.local != _Mode.GENERIC:
                    if not settled:
                        await _set_mode(conn, _Mode.GENERIC, local=True)
                        modes.local = _Mode.GENERIC
                    elif not modes.mixed:
                        await _set_mode(conn, _Mode.GENERIC, local=False)
                        modes.session = _Mode.GENERIC
            else:
                if settled and not marked:
                    modes.mixed = True
                if modes.session != _Mode.CUSTOM:
                    await _set_mode(conn, _Mode.CUSTOM, local=False)
                    modes.session, modes.local = (_Mode.CUSTOM, None) if settled else (_Mode.UNKNOWN, _Mode.CUSTOM)
                elif modes.local == _Mode.GENERIC:  # maybe set for this transaction: undo it for this call on
                    await _set_mode(conn, _Mode.CUSTOM, local=True)
                    modes.local = _Mode.CUSTOM
        await super().execute(query, params, prepare=prepare, binary=binary)
        return self


async def configure_session(conn: psycopg.AsyncConnection[Any]) -> None:
    """Pool ``configure`` callback for a new connection: parse ``json``/``jsonb`` with orjson
    (:func:`daemon.db.jsoncodec.loads`; the dedup worker reads thousands of documents and links per
    batch), create cursors as :class:`PlanModeCursor` (generic plans for the marked queries' calls
    with short arrays, custom plans for every other call), and apply ``session_settings`` (JIT
    off: the planner over-estimates a recursive CTE by orders of magnitude and PostgreSQL then
    spent ~180 ms compiling a ~20 ms statement at 1,000,000 records; ``force_custom_plan``).

    Raises:
        psycopg.Error: the connection failed (the pool discards it).
    """
    set_json_loads(jsoncodec.loads, conn)
    settled = _settled(conn)
    await conn.execute(query("session_settings"))
    _MODES[conn] = _Modes(_Mode.CUSTOM if settled else _Mode.UNKNOWN)
    conn.cursor_factory = PlanModeCursor


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
