"""Bulk-load records into the reference ``ads`` table with COPY (demo, evaluate, benchmarks)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import psycopg

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


async def copy_ads(conn: psycopg.AsyncConnection[Any], records: Iterable[tuple[str, dict[str, Any]]]) -> int:
    """COPY ``(key, fields)`` records into ``public.ads`` in one statement; returns the row count.

    ``key`` is stored in ``source_id`` so results can be mapped back to the input's ids.
    """
    n = 0
    async with conn.cursor() as cur, cur.copy(query("copy_ads")) as copy:
        for key, f in records:
            await copy.write_row((
                f.get("user"), f.get("category"), f.get("title"), f.get("body"), parse_price(f.get("price")),
                parse_price(f.get("lat")), parse_price(f.get("lon")), f.get("source"), key))
            n += 1
    return n


async def key_to_id(conn: psycopg.AsyncConnection[Any]) -> dict[str, str]:
    """``{source_id (the loaded key): ads.id}`` for loaded records."""
    cur = await conn.execute(query("ads_source_ids"))
    return {r[2]: r[0] for r in await cur.fetchall()}
