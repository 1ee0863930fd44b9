"""Named SQL, loaded from the ``sql/`` directory.

``sql/migrations/*.sql`` are scripts, run whole by the Alembic migrations (:func:`script`).
``sql/queries/*.sql`` are the runtime queries, one file per concern (the queues, dead letters, the
source table, reindex, the LISTEN connection, the dedup worker, moderation, the PostgreSQL index,
metrics, roles), each query introduced by a ``-- name: <name>`` line (:func:`query`). Queries take
psycopg ``%(name)s`` parameters; ``{placeholders}`` stand for identifiers from configuration and are
filled with :func:`psycopg.sql.SQL.format` and ``sql.Identifier`` by the caller. Nothing else in the
package writes SQL text. A query whose text has a ``-- plan: generic`` line may run from a generic
plan when its array parameters are short (:func:`generic_plan_ok`, :class:`daemon.db.pool.PlanModeCursor`).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from psycopg import sql

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.M)
_GENERIC = re.compile(r"^--\s*plan:\s*generic\b", re.M)


def sql_dir() -> Path:
    """The directory with the ``.sql`` files (source checkout, or ``daemon/_sql`` in a wheel).

    Raises:
        FileNotFoundError: neither exists (a broken install).
    """
    here = Path(__file__).resolve().parents[1]  # the daemon package
    for candidate in (here.parent / "sql", here / "_sql"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"nearsync's sql/ directory is missing next to {here}")


_COMMENT_LINE = re.compile(r"^[ \t]*--[^\n]*\n?", re.M)


@functools.cache
def _raw_queries() -> dict[str, str]:
    """Each named query's text as written, its comment lines included."""
    out: dict[str, str] = {}
    for path in sorted((sql_dir() / "queries").glob("*.sql")):
        text = path.read_text()
        parts = _NAME.split(text)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in out:
                raise ValueError(f"query {name!r} is defined twice (second time in {path.name})")
            out[name] = body.strip().rstrip(";")
    return out


@functools.cache
def _all_queries() -> dict[str, str]:
    """Each named query's text as sent to the server: without its whole-line comments, which are
    for the reader of ``sql/``. A text longer than psycopg's conversion cache takes
    (``psycopg._queries.MAX_CACHED_STATEMENT_LENGTH``, 4,096 bytes) is parsed for its placeholders
    again on every execution (60-110 us for ``scope_members``, whose comments made it 4.7 kB)."""
    return {name: _COMMENT_LINE.sub("", body).strip() for name, body in _raw_queries().items()}


def query(name: str) -> sql.SQL:
    """The named query as ``sql.SQL`` (call ``.format(...)`` for its ``{identifiers}``).

    Raises:
        KeyError: no query of that name in ``sql/``.
    """
    try:
        return sql.SQL(_all_queries()[name])  # type: ignore[arg-type]
    except KeyError:
        raise KeyError(f"no SQL query named {name!r} in {sql_dir()}") from None


@functools.cache
def _generic_bodies() -> frozenset[str]:
    sent = _all_queries()
    return frozenset(sent[name] for name, body in _raw_queries().items() if _GENERIC.search(body))


def generic_plan_ok(q: object) -> bool:
    """Whether ``q`` is a named query marked ``-- plan: generic``: its generic plan (made once per
    connection without the parameter values) was measured against the plan made with the values,
    on the calls of the dense bench whose array parameters hold at most
    :data:`~daemon.db.pool.GENERIC_PLAN_MAX_ELEMENTS` elements, and ran in 0.9-1.4x its time
    (medians; docs/benchmarks.md). A query filled with identifiers (``.format``) or any other
    statement is not.

    Args:
        q: a statement as passed to psycopg's ``execute`` (``sql.SQL``, ``sql.Composed``, ``str``...).

    Returns:
        True for a marked query's ``sql.SQL``, else False.
    """
    return isinstance(q, sql.SQL) and q.as_string() in _generic_bodies()


def script(name: str) -> str:
    """The whole text of ``sql/migrations/<name>.sql`` (a migration script, run as is).

    Raises:
        FileNotFoundError: no such file.
    """
    return (sql_dir() / "migrations" / f"{name}.sql").read_text()
