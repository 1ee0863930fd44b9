"""The rules a number field (``price``, ``lat``, ``lon``) or a numeric or date field must meet,
wherever it comes from, and the ``numeric`` and ``date`` similarities.

One rule for the check API (:mod:`daemon.http.models`, which answers 422 naming the field) and for
rows of the tracked table (:func:`daemon.capture.documents.coerce_numbers`, which sends the row to
the dead-letter table with an error naming the field): a value the scorer could not use is refused
in both places, never silently read as "no value". The same holds for a mapped field scored with
the ``numeric`` or ``date`` metric (:data:`TYPED_METRICS`): :func:`typed_value` is the rule. Pure,
no I/O.
"""

from __future__ import annotations

import datetime as dt
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


TYPED_METRICS = ("numeric", "date")
"""Metrics whose field values must parse (:func:`typed_value`): a row whose value does not goes to
the dead-letter table naming the field, and the check API answers 422 naming it."""

MAX_DATE_TEXT = 40
"""Most characters of a date or timestamp given as text."""

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def parse_date(value: Any) -> float | None:
    """A date or timestamp as days since 1970-01-01 UTC (fractional for a timestamp).

    Accepted: ISO 8601 text, a date (``2024-03-01``) or a timestamp (``2024-03-01T12:00:00``,
    ``2024-03-01 12:00:00+02:00``, ``...Z``; a timestamp without a zone is read as UTC), or a
    ``datetime.date`` / ``datetime.datetime``. Blank text and ``None`` are no value.

    Returns:
        Days since the epoch as a float, or None for ``None`` / blank text.
    Raises:
        ValueError: anything else (a number, a boolean, text that is not an ISO date).
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        if len(text) > MAX_DATE_TEXT:
            raise ValueError(f"must be an ISO 8601 date or timestamp of at most {MAX_DATE_TEXT} characters")
        try:
            value = dt.date.fromisoformat(text) if len(text) == 10 else dt.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError("must be an ISO 8601 date or timestamp (2024-03-01, 2024-03-01T12:00:00Z)") from None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return (value - _EPOCH).total_seconds() / 86_400.0
    if isinstance(value, dt.date):
        return float((value - _EPOCH.date()).days)
    raise ValueError(f"must be an ISO 8601 date or timestamp, got {type(value).__name__}")


def typed_value(metric: str, value: Any) -> Any:
    """The stored value of a field scored with ``metric`` (one of :data:`TYPED_METRICS`).

    Args:
        metric: ``"numeric"``: any finite number, or text as :func:`parse_number` reads it (no
            range); ``"date"``: :func:`parse_date`'s input.
        value: the column value or the API value.
    Returns:
        ``numeric``: a float; ``date``: the ISO 8601 text (a timestamp normalised by
        ``isoformat``, a date as ``YYYY-MM-DD``); None for ``None`` / blank text.
    Raises:
        ValueError: the value does not parse (the message says what is expected).
    """
    if metric == "numeric":
        return parse_number(value, -math.inf, math.inf)
    if parse_date(value) is None:
        return None
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    return str(value).strip()


def numeric_value(value: Any) -> float | None:
    """A stored ``numeric`` field value as a float, or None when missing, blank or unreadable
    (documents indexed before the field was scored may hold text: no evidence, never an error)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    try:
        return parse_number(value, -math.inf, math.inf)
    except ValueError:
        return None


def date_value(value: Any) -> float | None:
    """A stored ``date`` field value as days since the epoch (:func:`parse_date`), or None when
    missing, blank or unreadable (no evidence, never an error)."""
    try:
        return parse_date(value)
    except ValueError:
        return None


def numeric_similarity(a: float, b: float, tolerance: float, relative: bool = False) -> float:
    """``max(0, 1 - d / tolerance)`` in [0, 1]: 1 when equal, 0 at ``tolerance`` apart and beyond.

    Args:
        a, b: finite numbers. tolerance: > 0, the difference at which the similarity reaches 0.
        relative: False: ``d = |a - b|`` in the field's own units (a year: ``tolerance = 2``
            gives 0.5 one year apart); True: ``d = |a - b| / max(|a|, |b|)``, a fraction (0.1:
            10 % apart is no evidence), and two zeros are equal.
    """
    d = abs(a - b)
    if relative:
        top = max(abs(a), abs(b))
        d = d / top if top > 0 else 0.0
    return max(0.0, 1.0 - d / tolerance)


def date_similarity(a_days: float, b_days: float, max_days: float) -> float:
    """``max(0, 1 - |a - b| / max_days)``: 1 on the same instant, 0 at ``max_days`` apart and beyond.

    Args:
        a_days, b_days: days since the epoch (:func:`parse_date`). max_days: > 0.
    """
    return max(0.0, 1.0 - abs(a_days - b_days) / max_days)


def typed_detail(metric: str, label: str, a: Any, b: Any) -> str:
    """The short phrase of a compared ``numeric`` or ``date`` field (both values readable), e.g.
    ``"same year"``, ``"year 1999 / 2000"``, ``"listed 12 days apart"``.

    Args:
        metric: ``"numeric"`` or ``"date"``. label: the field's name in the phrase.
        a, b: the two stored values (:func:`typed_value`).
    """
    if metric == "date":
        days = abs((date_value(a) or 0.0) - (date_value(b) or 0.0))
        if days < 0.5:
            return f"same {label}"
        return f"{label} {days:.0f} day{'' if round(days) == 1 else 's'} apart"
    x, y = numeric_value(a), numeric_value(b)
    if x == y:
        return f"same {label}"
    return f"{label} {x:g} / {y:g}"
