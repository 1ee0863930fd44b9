"""The rules a number field (``price``, ``lat``, ``lon``) must meet, wherever it comes from.

One rule for the check API (:mod:`daemon.http.models`, which answers 422 naming the field) and for
rows of the tracked table (:func:`daemon.capture.documents.coerce_numbers`, which sends the row to
the dead-letter table with an error naming the field): a value the scorer could not use is refused
in both places, never silently read as "no value". Pure, no I/O.
"""

from __future__ import annotations

import math
import re
from typing import Any

from daemon.scoring.metrics import MAX_PRICE

NUMBER_RANGES: dict[str, tuple[float, float]] = {"price": (0.0, MAX_PRICE), "lat": (-90.0, 90.0),
                                                 "lon": (-180.0, 180.0)}
"""Role -> inclusive ``(low, high)``: a price from 0 to :data:`~daemon.scoring.metrics.MAX_PRICE`
(1e12, beyond any listing; the scorer ignores larger ones), WGS84 latitude and longitude in degrees."""

MAX_NUMBER_TEXT = 100
"""Most characters of a number given as text."""

NUMBER_TEXT = re.compile(r"\s*[$€£]?\s*([+-]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?"
                          r"(?:[eE][+-]?[0-9]{1,4})?|[+-]?\.[0-9]+(?:[eE][+-]?[0-9]{1,4})?)\s*")
"""A number as text: an optional currency sign, thousands in groups of three, decimals, exponent."""


def parse_number(value: Any, low: float, high: float, *, low_open: bool = False) -> float | None:
    """A number within ``[low, high]`` (``(low, high]`` with ``low_open``), from a number or from text.

    Text may carry a leading currency sign and thousands separators in groups of three
    (``"$1,299.00"``; ``"$1,2,3"`` is refused); blank text and ``None`` are no value.

    Args:
        value: ``None``, an int or float (a ``decimal.Decimal`` is read as a float), or text.
        low, high: the inclusive bounds.

    Returns:
        The value as a float, or None for ``None`` / blank text.

    Raises:
        ValueError: not a number (booleans included), malformed text, not finite, or out of range.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("must be a number, got a boolean")
    if isinstance(value, str):
        if not value.strip():
            return None
        m = NUMBER_TEXT.fullmatch(value) if len(value) <= MAX_NUMBER_TEXT else None
        if m is None:
            raise ValueError("must be a number (text like \"1,299.00\": thousands grouped by three)")
        x = float(m.group(1).replace(",", ""))
    else:
        try:
            x = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"must be a number, got {type(value).__name__}") from None
    if not math.isfinite(x):
        raise ValueError("must be a finite number")
    if x < low or x > high or (low_open and x == low):
        raise ValueError(f"must be within {'(' if low_open else '['}{low:g}, {high:g}]")
    return x
