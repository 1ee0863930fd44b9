"""Bulk-load records into the reference ``ads`` table with COPY (demo, evaluate, benchmarks)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from psycopg import sql

from daemon.db.queries import query

COPY_COLUMNS = ("user", "category", "title", "body", "price", "lat", "lon", "source")


def parse_price(v: Any) -> float | None:
    """``"$1,299.00"`` → 1299.0; ``None``/empty/garbage/non-finite → ``None``."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    text = str(v).strip().replace(",", "").lstrip("$€£").strip()
    try:
        f = float(text)
    except ValueError:
        return None
    return f if math.isfinite(f) and abs(f) < 1e10 else None


FIELD_COLUMN_PREFIX = "x_"
"""The reference ``ads`` table's column of a field that is not a fixed role is ``x_<field>``
(:func:`field_column`), so that no field name clashes with a column of the table (``status``, ...)."""


def field_column(name: str) -> str:
    """The ``ads`` column holding field ``name`` (a name that is no role of :data:`COPY_COLUMNS`)."""
    return FIELD_COLUMN_PREFIX + name


async def add_field_columns(conn: psycopg.AsyncConnection[Any], names: Iterable[str]) -> None:
    """Add a text column (:func:`field_column`) to ``public.ads`` for each field name; idempotent.

    Raises:
        psycopg.Error: the table is missing or the role may not alter it.
    """
    for name in names:
        await conn.execute(query("add_ads_field").format(column=sql.Identifier(field_column(name))))


async def copy_ads(conn: psycopg.AsyncConnection[Any], records: Iterable[tuple[str, dict[str, Any]]],
                   fields: Sequence[str] = ()) -> int:
    """COPY ``(key, fields)`` records into ``public.ads`` in one statement; returns the row count.

    ``key`` is stored in ``source_id`` so results can be mapped back to the input's ids.

    Args:
        records: ``(key, {field: value})``; the roles of :data:`COPY_COLUMNS` go to their columns.
        fields: other field names, each copied as text to its :func:`field_column` (added first
            with :func:`add_field_columns`).
    """
    n = 0
    stmt = query("copy_ads")
    if fields:
        stmt = query("copy_ads_fields").format(fields=sql.SQL(", ").join(sql.Identifier(field_column(f))
                                                                          for f in fields))
    async with conn.cursor() as cur, cur.copy(stmt) as copy:
        for key, f in records:
            extra = tuple(None if f.get(name) is None else str(f[name]) for name in fields)
            await copy.write_row((
                f.get("user"), f.get("category"), f.get("title"), f.get("body"), parse_price(f.get("price")),
                parse_price(f.get("lat")), parse_price(f.get("lon")), f.get("source"), key, *extra))
            n += 1
    return n


async def key_to_id(conn: psycopg.AsyncConnection[Any]) -> dict[str, str]:
    """``{source_id (the loaded key): ads.id}`` for loaded records."""
    cur = await conn.execute(query("ads_source_ids"))
    return {r[2]: r[0] for r in await cur.fetchall()}
