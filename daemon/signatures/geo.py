"""Geohash location tokens: the record's cell and its 8 neighbours (seeds: "Finding similar items").

Two points closer than a cell's size are either in the same cell or in adjacent cells, so the cell +
neighbours token set of one always contains the other's own cell. Precision 6 cells are about
1.2 km × 0.6 km; precision 7 about 153 m × 153 m. Encoding and adjacency use ``pygeohash``
(``encode``, ``get_adjacent``).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import pygeohash

DEFAULT_PRECISION = 6
_DIRECTIONS: tuple[tuple[str, ...], ...] = (
    ("top",),
    ("top", "right"),
    ("right",),
    ("bottom", "right"),
    ("bottom",),
    ("bottom", "left"),
    ("left",),
    ("top", "left"),
)


def coordinate(value: Any, limit: float) -> float | None:
    """A latitude (``limit=90``) or longitude (``limit=180``) as float, or ``None`` when unusable.

    Accepts int, float, Decimal and numeric strings. ``None``, booleans, non-numeric values, NaN, ±inf
    and values outside ``[-limit, limit]`` give ``None`` (never raises).
    """
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(f) or not -limit <= f <= limit:
        return None
    return f


@lru_cache(maxsize=65_536)
def neighbours(cell: str) -> tuple[str, ...]:
    """The (up to) 8 cells around a geohash cell, clockwise from north: N, NE, E, SE, S, SW, W, NW.

    Longitude wraps at the antimeridian; rows beyond a pole do not exist, so a cell on the top or
    bottom row of the grid has 5 neighbours. Duplicates (tiny grids) are removed.

    Raises:
        ValueError: ``cell`` is not a valid geohash.
    """
    out: list[str] = []
    for path in _DIRECTIONS:
        current = cell
        try:
            for direction in path:
                current = pygeohash.get_adjacent(current, direction)  # type: ignore[arg-type]
        except ValueError:
            continue
        if current != cell and current not in out:
            out.append(current)
    return tuple(out)


def geo_tokens(lat: Any, lon: Any, precision: int = DEFAULT_PRECISION) -> list[str]:
    """Location tokens: own geohash cell first, then its neighbours (see :func:`neighbours`).

    Args:
        lat: latitude in degrees (see :func:`coordinate` for accepted values).
        lon: longitude in degrees.
        precision: geohash length, 1–12 characters.
    Returns:
        ``[cell, n1, ..., n8]`` (fewer next to a pole); ``[]`` when either coordinate is missing,
        NaN/inf, out of range, or the pair is exactly ``(0, 0)`` (the "null island" placeholder).
    Raises:
        ValueError: precision outside 1–12.
    """
    if not 1 <= precision <= 12:
        raise ValueError(f"geohash precision must be in 1..12, got {precision}")
    la, lo = coordinate(lat, 90.0), coordinate(lon, 180.0)
    if la is None or lo is None or (la == 0.0 and lo == 0.0):
        return []
    cell = pygeohash.encode(la, lo, precision)
    return [cell, *neighbours(cell)]
