"""Per-field similarity functions: each returns a similarity in [0, 1], or None when a side is missing.

None means "no evidence" (the field is skipped and the other weights renormalised), which is not
the same as 0 ("evidence against"). Sources: rapidfuzz (Bachmann, https://github.com/rapidfuzz) for
Levenshtein (Levenshtein 1966), Jaro-Winkler (Winkler 1990) and token-set ratio; MinHash and
bottom-k Jaccard estimators (Broder 1997); simhash (Charikar 2002; Manku et al. 2007); haversine
great-circle distance (mean Earth radius 6,371,008.8 m).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.distance import JaroWinkler, Levenshtein
from rapidfuzz.utils import default_process

from daemon.signatures import bottomk_jaccard, hamming, jaccard_from_minhash

EARTH_RADIUS_M = 6_371_008.8


def _text(value: Any) -> str | None:
    """Normalised text (rapidfuzz default_process: lower case, non-alphanumerics -> space) or None."""
    if value is None:
        return None
    s = default_process(str(value))
    return s or None


def levenshtein_similarity(a: str | None, b: str | None) -> float | None:
    """Normalised Levenshtein similarity ``1 - d / max(len(a), len(b))`` of the normalised strings.

    Args:
        a, b: short texts (titles); None or blank means missing.
    Returns:
        Similarity in [0, 1], or None when either side is missing. (rapidfuzz Levenshtein.)
    """
    x, y = _text(a), _text(b)
    if x is None or y is None:
        return None
    return Levenshtein.normalized_similarity(x, y)


def jaro_winkler_similarity(a: str | None, b: str | None, prefix_weight: float = 0.1) -> float | None:
    """Jaro-Winkler similarity (Winkler 1990, via rapidfuzz) of the normalised strings.

    Args:
        a, b: short texts; None or blank means missing.
        prefix_weight: Winkler's common-prefix bonus, 0-0.25.
    Returns:
        Similarity in [0, 1], or None when either side is missing.
    """
    x, y = _text(a), _text(b)
    if x is None or y is None:
        return None
    return JaroWinkler.normalized_similarity(x, y, prefix_weight=prefix_weight)


def token_set_similarity(a: str | None, b: str | None) -> float | None:
    """rapidfuzz ``fuzz.token_set_ratio`` / 100: word-order-insensitive, tolerant of extra words.

    Returns:
        Similarity in [0, 1], or None when either side is missing.
    """
    x, y = _text(a), _text(b)
    if x is None or y is None:
        return None
    return fuzz.token_set_ratio(x, y) / 100.0


def minhash_similarity(a: Sequence[int] | None, b: Sequence[int] | None) -> float | None:
    """Jaccard of the shingle sets estimated from MinHash vectors (fraction of equal positions).

    Returns:
        Estimate in [0, 1], or None when a vector is missing/empty or the lengths differ.
    """
    if not a or not b or len(a) != len(b):
        return None
    return jaccard_from_minhash(a, b)


def bottomk_similarity(a: Sequence[int] | None, b: Sequence[int] | None) -> float | None:
    """Jaccard estimated from bottom-k sketches (Broder's estimator over the union's k smallest,
    :func:`daemon.signatures.bottomk_jaccard`; exact when both sets fit in their sketches).

    Returns:
        Estimate in [0, 1], or None when a sketch is missing/empty.
    """
    if not a or not b:
        return None
    return bottomk_jaccard(a, b)


def simhash_similarity(a: int | None, b: int | None, max_distance: int = 24) -> float | None:
    """Simhash similarity ``max(0, 1 - d / max_distance)`` with d the 64-bit Hamming distance.

    The mapping is steeper than ``1 - d/64`` on purpose: two unrelated texts differ in about 32
    bits, which ``1 - d/64`` would call 0.5 similar; with the default ``max_distance`` 24, d = 3
    (Manku et al.'s near-duplicate bound) gives 0.875 and d >= 24 gives 0.

    Args:
        a, b: 64-bit simhashes (signed int64 as serialised, or unsigned).
        max_distance: distance (1-64) at which the similarity reaches 0.
    Returns:
        Similarity in [0, 1], or None when either side is missing.
    """
    if a is None or b is None:
        return None
    return max(0.0, 1.0 - hamming(int(a), int(b)) / max_distance)


def _as_set(value: Any) -> set[str]:
    if value is None:
        return set()
    if isinstance(value, str):
        items: Iterable[Any] = [value]
    elif isinstance(value, Iterable):
        items = value
    else:
        items = [value]
    out = set()
    for v in items:
        if v is None:
            continue
        s = "".join(ch for ch in str(v).casefold() if ch.isalnum())
        if s:
            out.add(s)
    return out


#: A quantity with a unit ("1080p", "120hz", "42in", "5disc", "18-70mm" -> "1870mm", "10x") or a
#: dimension ("1920x1080"): mixes letters and digits like a model number but identifies nothing.
_QUANTITY = re.compile(r"^(?:\d+[a-z]{1,5}|\d+x\d+)$")


#: Shared-prefix fraction of the longer value below which two model numbers count as disjoint.
PARTIAL_MIN_RATIO = 0.7


def is_quantity(value: str) -> bool:
    """True when a normalised (case-folded, alphanumeric) token is a quantity, not an identifier."""
    return bool(_QUANTITY.match(value))


def exact_similarity(
    a: Any, b: Any, *, partial: float = 0.0, partial_min_len: int = 4, negative: bool = True,
    common_prefix: bool = True,
    ignore_quantities: bool = False,
) -> float | None:
    """Set overlap of normalised identifiers (model numbers, phones, e-mails, categories).

    Values are case-folded and stripped of everything but letters and digits
    (``"KX-FA83"`` == ``"kxfa83"``); a str is a one-element set.

    Args:
        a, b: a value or an iterable of values; None/empty means missing.
        partial: similarity when no value is shared but one is a prefix of another and the shorter
            has at least ``partial_min_len`` characters (``"FS105"`` / ``"FS105NA"``); when they
            only share a prefix of at least ``partial_min_len`` characters covering at least
            :data:`PARTIAL_MIN_RATIO` of the longer, ``partial`` times that fraction
            (``"MMV4205BT"`` / ``"MMV4205BAQ"`` -> 0.9 * 8/10: colour or region variants, while
            ``"KDL40V4100"`` / ``"KDL40W5100"`` stay disjoint); the best pair counts; 0 disables.
        partial_min_len: see ``partial``.
        common_prefix: also give credit for a shared prefix (not only when one value is a prefix of
            the other); False treats colour/variant codes (``WMS3B`` / ``WMS3S``) as different.
        ignore_quantities: drop values that are quantities with units (:func:`is_quantity`:
            ``"1080p"``, ``"120hz"``) before comparing -- for model numbers.
        negative: when True, both sides non-empty and disjoint give 0.0 -- a strong negative
            signal: it enters the weighted mean at the field's (high) weight and, with
            ``strong_negative_cap``, forbids auto-rejection (see :func:`score_pair`); when False
            that case gives None.
    Returns:
        1.0 when any value is shared, ``partial`` for a prefix match, 0.0 (or None) when disjoint,
        None when either side is empty.
    """
    sa, sb = _as_set(a), _as_set(b)
    if ignore_quantities:
        sa = {v for v in sa if not is_quantity(v)}
        sb = {v for v in sb if not is_quantity(v)}
    if not sa or not sb:
        return None
    if sa & sb:
        return 1.0
    best = 0.0
    if partial > 0.0:
        for x in sa:
            for y in sb:
                lcp = len(os.path.commonprefix((x, y)))
                if lcp < partial_min_len:
                    continue
                if lcp == min(len(x), len(y)):
                    best = max(best, partial)
                elif common_prefix and lcp / max(len(x), len(y)) >= PARTIAL_MIN_RATIO:
                    best = max(best, partial * lcp / max(len(x), len(y)))
    if best > 0.0:
        return best
    return 0.0 if negative else None


MAX_PRICE = 1e12
"""The largest price (in any currency unit) the scorer uses. A larger one is no real listing's
price (a typo, ``1e308``, a 400-digit integer) and is treated as no price, so price arithmetic
stays within a float and the percentage in a summary stays readable."""

MAX_PRICE_CHANGE_PCT = 1_000_000
"""Bound (in percent, either sign) of :func:`price_change_pct`; a larger change is reported as it."""


def price_value(value: Any) -> float | None:
    """A price the scorer can use, or None for "no price".

    Args:
        value: a number or numeric text (``"49"``, ``"1e3"``) of any size.
    Returns:
        ``float(value)`` when it is finite and within ``0 <= x <=`` :data:`MAX_PRICE`; None for
        None, booleans, non-numeric text, NaN, infinities, negative prices and prices above
        :data:`MAX_PRICE` (including integers too large for a float). Never raises.
    """
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) and 0.0 <= x <= MAX_PRICE else None


def price_change_pct(a: Any, b: Any) -> int | None:
    """The change from price ``a`` to price ``b`` in percent of ``a``, rounded, for summaries.

    Args:
        a, b: prices as accepted by :func:`price_value`.
    Returns:
        ``round((b - a) / a * 100)`` bounded to ±:data:`MAX_PRICE_CHANGE_PCT` (a tiny ``a`` would
        otherwise give an infinite ratio); 0 when equal; 100 when ``a`` is 0 and ``b`` is not; None
        when either side is no price (:func:`price_value`). Never raises.
    """
    x, y = price_value(a), price_value(b)
    if x is None or y is None:
        return None
    if x == y:
        return 0
    if x == 0.0:
        return 100
    pct = (y - x) / x * 100.0
    return round(max(-MAX_PRICE_CHANGE_PCT, min(MAX_PRICE_CHANGE_PCT, pct)))


def price_similarity(a: Any, b: Any, tolerance: float = 0.3) -> float | None:
    """Price similarity from the relative difference ``r = |a - b| / max(a, b)``.

    Args:
        a, b: prices (numbers or numeric text, same currency). A side that is no usable price
            (:func:`price_value`: None, negative, NaN, infinite, non-numeric, or above
            :data:`MAX_PRICE`) means missing.
        tolerance: relative difference (fraction, > 0) at which the similarity reaches 0.
    Returns:
        ``max(0, 1 - r / tolerance)``: 1.0 when equal (both 0 included), 0 at ``tolerance`` and
        beyond; None when either side is missing. Never raises: with both prices bounded by
        :data:`MAX_PRICE` the arithmetic cannot overflow.
    """
    x, y = price_value(a), price_value(b)
    if x is None or y is None:
        return None
    top = max(x, y)
    if top == 0.0:
        return 1.0
    return max(0.0, 1.0 - (abs(x - y) / top) / tolerance)


def haversine_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in metres between two points given in degrees (haversine formula)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(h)))


def _coords(fields: Mapping[str, Any], lat_key: str, lon_key: str) -> tuple[float, float] | None:
    lat, lon = fields.get(lat_key), fields.get(lon_key)
    if lat is None or lon is None or isinstance(lat, bool) or isinstance(lon, bool):
        return None
    try:
        la, lo = float(lat), float(lon)
    except (TypeError, ValueError, OverflowError):
        return None
    if not (-90.0 <= la <= 90.0 and -180.0 <= lo <= 180.0):
        return None
    return la, lo


def geo_similarity(
    a: Mapping[str, Any], b: Mapping[str, Any], radius_m: float = 2000.0,
    lat_key: str = "lat", lon_key: str = "lon",
) -> float | None:
    """Location similarity ``max(0, 1 - d / radius_m)``, d the haversine distance in metres.

    Args:
        a, b: field mappings holding latitude/longitude in degrees under ``lat_key``/``lon_key``.
        radius_m: distance in metres (> 0) at which the similarity reaches 0.
    Returns:
        1.0 at 0 m, 0.0 at ``radius_m`` and beyond; None when a side lacks valid coordinates.
    """
    pa, pb = _coords(a, lat_key, lon_key), _coords(b, lat_key, lon_key)
    if pa is None or pb is None:
        return None
    return max(0.0, 1.0 - haversine_m(*pa, *pb) / radius_m)
