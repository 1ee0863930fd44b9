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
from functools import lru_cache
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.distance import OSA, JaroWinkler, Levenshtein
from rapidfuzz.utils import default_process

from daemon.signatures import (  # MAX_PRICE and price_value: the signer reads prices too
    CJK_RUN,
    MAX_PRICE,
    bottomk_jaccard,
    cjk_bigrams,
    hamming,
    jaccard_from_minhash,
    model_numbers,
    normalise_text,
    price_value,
    split_odometer,
    title_codes,
    without_prices,
    words,
)

EARTH_RADIUS_M = 6_371_008.8


def _text(value: Any) -> str | None:
    """Normalised text (rapidfuzz default_process: lower case, non-alphanumerics -> space) or None.
    Chinese and Japanese, written without spaces, come as the character bigrams of each run of their
    characters, apart from the letters and digits around them (``出售二手iphone12`` -> ``出售 售二 二手
    iphone12``: :func:`daemon.signatures.text.cjk_bigrams`), so that the word-set metrics
    (``token_set``) compare them as they compare words."""
    if value is None:
        return None
    s = default_process(str(value))
    if not s.isascii() and CJK_RUN.search(s):
        s = " ".join(CJK_RUN.sub(lambda r: " " + " ".join(cjk_bigrams(r.group())) + " ", s).split())
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


_NOT_ALNUM = re.compile(r"[\W_]+")
"""Runs of characters that are not letters or digits: the class ``\\w`` is :meth:`str.isalnum`'s
class plus the underscore (the same Unicode predicate in CPython's ``re``), so removing these keeps
what ``"".join(ch for ch in s if ch.isalnum())`` keeps."""
_ASCII_DIGIT = re.compile(r"[0-9]")


def _has_digit(s: str) -> bool:
    """``any(c.isdigit() for c in s)``, by one regular-expression search for an ASCII string (where
    the digits are ``0``-``9``)."""
    if s.isascii():
        return _ASCII_DIGIT.search(s) is not None
    return any(c.isdigit() for c in s)


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
        s = str(v).casefold()
        if not s.isalnum():  # most identifiers are letters and digits already
            s = _NOT_ALNUM.sub("", s)
        if s:
            out.add(s)
    return out


#: A quantity with a unit ("1080p", "120hz", "42in", "5disc", "18-70mm" -> "1870mm", "10x") or a
#: dimension ("1920x1080"): mixes letters and digits like a model number but identifies nothing.
_QUANTITY = re.compile(r"^(?:\d+[a-z]{1,5}|\d+x\d+|\d+(?:m|cm|mm|km|ft)[23])$")


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
    return exact_similarity_sets(
        normalised_identifiers(a, ignore_quantities), normalised_identifiers(b, ignore_quantities),
        partial=partial, partial_min_len=partial_min_len, negative=negative, common_prefix=common_prefix)


def normalised_identifiers(value: Any, ignore_quantities: bool = False) -> frozenset[str]:
    """Identifier values as :func:`exact_similarity` compares them.

    Args:
        value: a value or an iterable of values (a str is one value); None means none.
        ignore_quantities: leave out values that are quantities (:func:`is_quantity`).
    Returns:
        The values case-folded with everything but letters and digits removed (``"KX-FA83"`` ->
        ``"kxfa83"``), empty ones dropped.
    """
    if isinstance(value, list):  # a signature's list: the same lists recur across documents
        try:
            return _normalised_values(tuple(value), ignore_quantities)
        except TypeError:  # an unhashable item: not memoisable
            pass
    elif isinstance(value, frozenset):  # a title's codes (:func:`title_models`): the same sets recur
        return _normalised_set(value, ignore_quantities)
    return _normalised_uncached(value, ignore_quantities)


def _normalised_uncached(value: Any, ignore_quantities: bool) -> frozenset[str]:
    s = _as_set(value)
    if ignore_quantities:
        s = {v for v in s if not is_quantity(v)}
    return frozenset(s)


@lru_cache(maxsize=65_536)
def _normalised_values(values: tuple[Any, ...], ignore_quantities: bool) -> frozenset[str]:
    """:func:`normalised_identifiers` of a list of values, memoised (a candidate decoded again
    after it left the document cache has the same model-number list as before)."""
    return _normalised_uncached(list(values), ignore_quantities)


@lru_cache(maxsize=65_536)
def _normalised_set(values: frozenset[Any], ignore_quantities: bool) -> frozenset[str]:
    """:func:`normalised_identifiers` of a frozenset of values, memoised (the listings of one product
    carry the same title codes, and a candidate decoded again after it left the document cache has
    the same ones as before)."""
    return _normalised_uncached(values, ignore_quantities)


def digit_suffixes(values: frozenset[str], digits: int) -> frozenset[str]:
    """``values`` (normalised by :func:`normalised_identifiers`) with each all-digit value longer
    than ``digits`` cut to its last ``digits`` digits (phone numbers with and without the country
    code and trunk prefix compare equal: ``33612345678`` and ``0612345678`` both give
    ``612345678``); other values unchanged. ``digits`` 0 returns ``values``."""
    if not digits or all(len(v) <= digits for v in values):  # the common case: no phone, or short ones
        return values
    return frozenset([v[-digits:] if len(v) > digits and v.isdigit() else v for v in values])


def exact_similarity_sets(
    sa: frozenset[str] | set[str], sb: frozenset[str] | set[str], *, partial: float = 0.0,
    partial_min_len: int = 4, negative: bool = True, common_prefix: bool = True,
) -> float | None:
    """:func:`exact_similarity` of two sets already normalised by :func:`normalised_identifiers`
    (the arguments and result are those of :func:`exact_similarity`)."""
    if not sa or not sb:
        return None
    if not sa.isdisjoint(sb):
        return 1.0
    best = 0.0
    if partial > 0.0:
        for x in sa:
            head = x[:partial_min_len]
            for y in sb:
                if not y.startswith(head):  # a shared prefix shorter than partial_min_len: no credit
                    continue
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


MAX_PRICE_CHANGE_PCT = 1_000_000
"""Bound (in percent, either sign) of :func:`price_change_pct`; a larger change is reported as it."""


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


_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
MAX_NUMBER_DIGITS = 4
"""Longer digit runs (part numbers, UPCs, phone numbers) are identifiers, not sizes or versions."""
OTHERWISE_EQUAL = 0.75
"""Share of the shorter title's words (numbers aside) the longer one must hold for a number conflict
to count: the titles are otherwise equal, as a seller's ads for two sizes of one line are, while
two shops' titles of one product, worded apart, carry different specs (``Series 8`` / ``1080p``)."""


def _otherwise_equal(wa: frozenset[str], wb: frozenset[str]) -> bool:
    """Whether two titles' word sets are otherwise equal: both non-empty and the longer holding at
    least :data:`OTHERWISE_EQUAL` of the shorter's words."""
    return bool(wa) and bool(wb) and len(wa & wb) >= OTHERWISE_EQUAL * min(len(wa), len(wb))


_ORDINAL = re.compile(r"(\d{1,4})(?:st|nd|rd|th|er|re|ere|e|eme|nde)")
"""An ordinal written with digits (a word of a normalised title): English ``1st`` ``2nd`` ``3rd``
``4th``, French ``1er`` ``1re`` ``2e`` ``2eme`` (``2ème`` with its accent folded) ``2nde``: a floor,
an edition, a generation, an arrondissement. :func:`_title_parts` keeps it apart from the plain
number (:func:`english_ordinal`), so that ``2 bed flat, 2nd floor`` / ``2 bed flat, 4th floor`` are two
flats rather than the first title's numbers ``{2}`` being covered by the second's ``{2, 4}``."""


NUMBER_WORDS: dict[str, str] = {
    **{w: str(i) for i, w in enumerate(("one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                                        "ten", "eleven", "twelve"), start=1)},
    **{w: str(i) for i, w in ((2, "deux"), (3, "trois"), (4, "quatre"), (5, "cinq"), (6, "six"), (8, "huit"),
                              (10, "dix"), (11, "onze"), (12, "douze"))},
}
"""Numbers written as words (English and French, one to twelve), which :func:`_title_parts` reads
as the title's numbers where the word stands alone: ``Two bedroom flat`` / ``Three bedroom flat``
(one agency's two flats, one description) are two numbers apart as ``2 bed`` / ``3 bed`` are, and
``2 bedroom`` / ``Two bedroom`` (a repost) agree. A word joined to others is left as a word
(``All-in-One``, ``two-way``); French ``un``/``une`` (also the article), ``sept`` (also September)
and ``neuf`` (also "new") are left out."""


def english_ordinal(digits: str | int) -> str:
    """The canonical, English, form of an ordinal's number (:data:`_ORDINAL`): ``"02"`` ->
    ``"2nd"``, ``11`` -> ``"11th"``, ``"21"`` -> ``"21st"``; so ``7e`` and ``7ème`` and ``7th``
    are one, and a summary shows ``different numbers (2nd / 4th)``. Raises ValueError when
    ``digits`` is no whole number."""
    n = int(digits)
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _canonical_number(text: str) -> str:
    """``"007"`` -> ``"7"``, ``"2.0"`` -> ``"2"``, ``"14.70"`` -> ``"14.7"``."""
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text.lstrip("0") or "0"


@lru_cache(maxsize=65_536)
def title_models(title: str, price: float | None = None) -> frozenset[str]:
    """The codes of a title alone (:func:`daemon.signatures.title_codes` of the normalised title):
    its model numbers and its all-digit catalogue numbers of 5 to 12 digits (``3780001``), other
    than dates and the record's own ``price`` written in the title (:func:`price_value` of its
    price field, or None): the product the listing is about, whereas a body may name compatible
    products too. A signed document stores them (the signature's ``title_codes``), which
    :meth:`daemon.scoring.side.Side.title_codes` reads instead of calling this."""
    return frozenset(title_codes(normalise_text(title), price=price))


def record_title_models(fields: Mapping[str, Any]) -> frozenset[str]:
    """:func:`title_models` of a record's ``title`` and ``price`` fields (empty without a title):
    what the signer stores as the record's ``title_codes``."""
    t = fields.get("title")
    return title_models(str(t), price_value(fields.get("price"))) if t else frozenset()


@lru_cache(maxsize=65_536)
def _prefix_closure(codes: frozenset[str], min_len: int) -> frozenset[str]:
    """Every prefix of at least ``min_len`` characters of each code (the codes themselves included)."""
    return frozenset(c[:k] for c in codes for k in range(min_len, len(c) + 1))


@lru_cache(maxsize=65_536)
def _code_prefixes(code: str, min_len: int) -> frozenset[str]:
    """The prefixes of ``code`` of at least ``min_len`` characters (``code`` itself included)."""
    return frozenset(code[:k] for k in range(min_len, len(code) + 1))


def _matches_set(x: str, ys: frozenset[str], min_len: int) -> bool:
    """Whether ``x`` equals a code of ``ys`` or one is a prefix of the other, both of ``min_len``
    characters or more (``FS105`` / ``FS105NA``), by set look-ups instead of a walk over ``ys``
    (``tests/test_scoring.py`` checks both give the same answer): ``x`` is in ``ys``, or (``x`` of
    ``min_len`` characters or more) ``x`` is a prefix of a code of ``ys`` (:func:`_prefix_closure`,
    memoised per set) or a code of ``ys`` of ``min_len`` characters or more is a prefix of ``x``
    (:func:`_code_prefixes`, memoised per code)."""
    return x in ys or (len(x) >= min_len and (x in _prefix_closure(ys, min_len)
                                             or not _code_prefixes(x, min_len).isdisjoint(ys)))


def codes_conflict(a_title_codes: frozenset[str], b_title_codes: frozenset[str], a_all: Any, b_all: Any,
                   min_len: int = 4) -> bool:
    """Whether two titles name different products by their codes (:func:`title_models`).

    True when each title has a code the other title lacks (neither equal nor a prefix variant,
    ``FS105`` / ``FS105NA``), so a shared spec string (``CD/WMA/MP3``) does not hide two models
    (``DEHP500UB`` / ``DEHP400UB``); False when one title's unmatched code is named anywhere in the
    other record (``a_all`` / ``b_all``: all its model numbers, body included: a typo in a title).
    """
    return codes_conflict_sets(a_title_codes, b_title_codes, normalised_identifiers(a_all),
                               normalised_identifiers(b_all), min_len)


@lru_cache(maxsize=65_536)
def unmatched_codes(a_title_codes: frozenset[str], b_title_codes: frozenset[str],
                    min_len: int = 4) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The codes of each title that the other title lacks: ``(a's, b's)``, each a code that is
    neither in the other set nor a prefix variant of one of its codes (:func:`_matches_set`), in
    no particular order. Memoised per pair of code sets: the listings of one product mostly carry
    the same title codes, so the pairs of a product line repeat the same pairs of sets."""
    return (tuple(x for x in a_title_codes if not _matches_set(x, b_title_codes, min_len)),
            tuple(y for y in b_title_codes if not _matches_set(y, a_title_codes, min_len)))


def codes_conflict_sets(a_title_codes: frozenset[str], b_title_codes: frozenset[str], a_set: frozenset[str],
                        b_set: frozenset[str], min_len: int = 4) -> bool:
    """:func:`codes_conflict` with each record's model numbers already normalised
    (:func:`normalised_identifiers` of ``a_all`` / ``b_all``)."""
    only_a, only_b = unmatched_codes(a_title_codes, b_title_codes, min_len)
    if not only_a or not only_b:
        return False
    return not (any(_matches_set(x, b_set, min_len) for x in only_a) or any(_matches_set(y, a_set, min_len) for y in only_b))


def separate_schemes(a_title_codes: frozenset[str], b_title_codes: frozenset[str], min_len: int = 4) -> bool:
    """Whether the codes two titles do not share come from different numbering schemes, so that
    their difference is no evidence either way: every code of one title that the other title lacks
    (neither equal nor a prefix variant, as :func:`codes_conflict` reads them) is all digits (a
    catalogue number, :func:`title_models`: a shop's or distributor's own item number, an EAN/UPC-like
    code), and none of the other title's is (a maker's model number, ``COOLPIXS550PL``, ``0615B002``,
    mixes letters and digits).

    Two listings that each give only their own kind of number (``Nikon Coolpix S550 Plum - 26110`` /
    ``Nikon CoolPix S550 Plum - COOLPIXS550PL``) have not said which item they are in comparable
    terms; two numbers of one scheme that differ (``26110`` / ``26108``, ``MB565LL`` / ``MB913LL``)
    still name two items, and the titles' other evidence (colours, sizes, codes) still counts. This
    holds for any catalogue or ad site: an all-digit item number and a letters-and-digits model
    number are never spellings of one another.

    Args:
        a_title_codes, b_title_codes: the titles' codes (:func:`title_models`), normalised or not.
        min_len: shortest code that matches another as a prefix (as in :func:`codes_conflict`).
    Returns:
        True when each title has an unshared code and exactly one side's unshared codes are all
        all-digit while the other side's include none.
    """
    only_a, only_b = unmatched_codes(a_title_codes, b_title_codes, min_len)
    if not only_a or not only_b:
        return False
    a_digits = [x.isdigit() for x in only_a]
    b_digits = [y.isdigit() for y in only_b]
    return (all(a_digits) and not any(b_digits)) or (all(b_digits) and not any(a_digits))


class TitleCodes:
    """One record's title codes and model numbers, prepared for :func:`title_codes_verdict`: what
    :func:`codes_conflict_sets` and :func:`separate_schemes` derive from them on every pair, derived
    once per record (:meth:`daemon.scoring.side.Side.title_code_profile`), so that a pair costs a few
    set look-ups per code.

    Args:
        codes: the title's codes (:func:`title_models`).
        ids: the record's model numbers, normalised (:func:`normalised_identifiers`).
        min_len: shortest code that matches another as a prefix (as in :func:`codes_conflict`).

    Attributes:
        codes, ids: as given. closure, ids_closure: their :func:`_prefix_closure`. reach,
        ids_reach: ``codes`` and ``closure`` together, ``ids`` and ``ids_closure`` together (a code
        of another title matches one of these codes, :func:`_matches_set`, exactly when it is in
        ``reach`` or one of ``codes`` is a prefix of it: since ``closure`` holds only prefixes of
        ``min_len`` characters or more, and a code shorter than that has no such prefix, neither
        needs a length check). items: per code ``(code, len(code) >= min_len, its prefixes of
        min_len characters or more, all digits)``. digits: how many codes are all digits.
    """

    __slots__ = ("closure", "codes", "digits", "ids", "ids_closure", "ids_reach", "items", "reach")

    def __init__(self, codes: frozenset[str], ids: frozenset[str], min_len: int) -> None:
        self.codes, self.ids = codes, ids
        self.closure = _prefix_closure(codes, min_len)
        self.reach = codes | self.closure
        self.ids_closure = _prefix_closure(ids, min_len)
        self.ids_reach = ids | self.ids_closure
        self.items = tuple((c, len(c) >= min_len, _code_prefixes(c, min_len), c.isdigit()) for c in codes)
        self.digits = sum(1 for it in self.items if it[3])


_CodeItem = tuple[str, bool, frozenset[str], bool]


@lru_cache(maxsize=65_536)
def title_code_profile(codes: frozenset[str], ids: frozenset[str], min_len: int) -> TitleCodes:
    """The :class:`TitleCodes` of a title's codes and a record's normalised model numbers, memoised:
    the listings of one product mostly carry the same codes, so records share their profile."""
    return TitleCodes(codes, ids, min_len)


def _unmatched_items(items: tuple[_CodeItem, ...], ys: frozenset[str], closure: frozenset[str]) -> list[_CodeItem]:
    """The items whose code matches no code of ``ys`` (:func:`_matches_set`, with ``closure`` the
    prefix closure of ``ys``)."""
    out = []
    for it in items:
        x = it[0]
        if not (x in ys or (it[1] and (x in closure or not it[2].isdisjoint(ys)))):
            out.append(it)
    return out


def _any_matches(items: list[_CodeItem], ys: frozenset[str], closure: frozenset[str]) -> bool:
    """Whether the code of one of ``items`` matches a code of ``ys`` (:func:`_matches_set`, with
    ``closure`` the prefix closure of ``ys``)."""
    for it in items:
        x = it[0]
        if x in ys or (it[1] and (x in closure or not it[2].isdisjoint(ys))):
            return True
    return False


def title_codes_verdict(a: TitleCodes, b: TitleCodes) -> bool | None:
    """:func:`codes_conflict_sets` and, on a conflict, :func:`separate_schemes` of two prepared
    records in one pass (the same answers; ``tests/test_scoring.py`` compares them on real titles).

    Args:
        a, b: the two records' :class:`TitleCodes` (same ``min_len``), both titles with codes.
    Returns:
        False when the titles' codes do not conflict; True on a conflict; None on a conflict that
        :func:`separate_schemes` calls two numbering schemes (no evidence either way).
    """
    if a is b or a.codes <= b.reach:  # every code of a is one of b's or a prefix (min_len+) of one
        return False
    if a.codes.isdisjoint(b.reach) and b.codes.isdisjoint(a.reach):
        # No code of either title matches one of the other's (the common case: two models), so
        # every code is unmatched on both sides and the checks below reduce to set operations on
        # the prepared sets (see TitleCodes): one of a's codes matches b's model numbers exactly
        # when a code is in b.ids_reach or one of b's model numbers is in a.closure.
        if not (a.codes.isdisjoint(b.ids_reach) and a.closure.isdisjoint(b.ids)
                and b.codes.isdisjoint(a.ids_reach) and b.closure.isdisjoint(a.ids)):
            return False
        a_digits, b_digits, a_count, b_count = a.digits, b.digits, len(a.items), len(b.items)
    else:
        only_a = _unmatched_items(a.items, b.codes, b.closure)
        if not only_a or b.codes <= a.reach:
            return False
        only_b = _unmatched_items(b.items, a.codes, a.closure)
        if not only_b or _any_matches(only_a, b.ids, b.ids_closure) or _any_matches(only_b, a.ids, a.ids_closure):
            return False
        a_digits = b_digits = 0  # unmatched codes that are all digits, per side
        for it in only_a:
            a_digits += it[3]
        for it in only_b:
            b_digits += it[3]
        a_count, b_count = len(only_a), len(only_b)
    if (a_digits == a_count and not b_digits) or (b_digits == b_count and not a_digits):
        return None
    return True


COLOURS = frozenset((
    "black", "white", "silver", "grey", "gray", "red", "blue", "green", "pink", "purple", "yellow", "orange",
    "brown", "gold", "beige", "cherry", "rose", "plum", "navy", "graphite", "titanium", "bronze", "cobalt",
    "crimson", "ivory", "cream", "teal", "champagne", "bisque", "maroon", "turquoise", "lilac", "violet",
    "noir", "blanc", "rouge", "bleu", "vert", "gris", "argent", "jaune", "marron",
    "onyx", "burgundy", "charcoal", "magenta", "cyan", "lavender", "indigo", "olive", "khaki", "aqua",
    "fuchsia", "scarlet",
    # Chinese and Japanese, each a run of its own characters (:func:`_pieces`)
    "黑色", "白色", "红色", "蓝色", "绿色", "黄色", "粉色", "紫色", "灰色", "金色", "银色", "橙色", "棕色",
    "ブラック", "ホワイト", "レッド", "ブルー", "グリーン", "イエロー", "ピンク", "パープル", "グレー", "ゴールド",
    "シルバー",
))
"""Colour words (English, French; Chinese and Japanese where the colour stands as a run of its own,
``128G 黑色``, not inside a longer run) recognised in titles by :func:`colours_conflict`."""

_LETTER_SIZES = ("xxs", "xs", "s", "m", "l", "xl", "xxl", "xxxl")
SIZES = frozenset(("xxs", "xs", "xl", "xxl", "xxxl", *(f"size:{s}" for s in _LETTER_SIZES)))
"""Garment sizes recognised in titles by :func:`colours_conflict`: the letter sizes of two letters
or more as words (``XL``), and any letter size after a size label as ``size:<letter>`` (``size M``,
``taille S``, ``Gr. L``: a lone ``M`` names no size without it). A seller's dress in M and in L is
two items, as are a black and a red one. Number sizes (``42`` / ``43``, ``2XL`` / ``3XL``) are
numbers of the title (:func:`numbers_conflict`)."""
_SIZE_LABELS = frozenset(("size", "taille", "talla", "taglia", "grosse", "gr", "maat", "tam"))
_SIZE_LABEL = re.compile(r"(?<!\w)(?:" + "|".join(sorted(_SIZE_LABELS)) + r")\.? ?:? ?(" + "|".join(
    sorted(_LETTER_SIZES, key=len, reverse=True)) + r")(?!\w)")

_ATTRIBUTE_VALUES: dict[str, dict[str, tuple[str, ...]]] = {
    "gender": {"men": ("men", "mens", "male", "gents", "homme", "hommes"),
               "women": ("women", "womens", "ladies", "female", "femme", "femmes"),
               "boys": ("boys", "boy", "garcon", "garcons"), "girls": ("girls", "girl", "fille", "filles")},
    "side": {"left": ("left", "lh", "nearside", "gauche"), "right": ("right", "rh", "offside", "droite", "droit")},
    "position": {"front": ("front", "avant"), "rear": ("rear", "arriere")},
    "fuel": {"petrol": ("petrol", "gasoline", "essence"), "diesel": ("diesel",), "electric": ("electric", "electrique"),
             "hybrid": ("hybrid", "hybride"), "lpg": ("lpg", "gpl")},
    "gearbox": {"manual": ("manual", "manuelle"), "automatic": ("automatic", "auto", "automatique")},
    "bed size": {"single": ("single",), "double": ("double",), "king": ("king", "kingsize"), "queen": ("queen",)},
}
ATTRIBUTES: dict[str, tuple[str, str]] = {
    word: (kind, value) for kind, values in _ATTRIBUTE_VALUES.items() for value, ws in values.items() for word in ws}
"""Title words (English and French, accents folded, as :func:`_title_parts` gives them) naming a
value of an attribute that sets one item of a seller's or a shop's line apart from the next, as a
colour does, word -> ``(attribute, value)``: who it is for (``mens`` / ``womens`` jacket, ``boys``
/ ``girls`` shoes; ``male`` / ``female`` puppy or connector), which side (a car's ``left`` /
``right`` headlight) or end (``front`` / ``rear`` brake discs), which fuel or gearbox (a dealer's
``petrol`` / ``diesel`` and ``manual`` / ``automatic`` cars of one model), which bed size
(``single`` / ``double`` frame, ``king`` / ``queen`` mattress). A seller lists such a pair with one
title and one description, the word swapped: with the text shared they scored 89-95, often
``duplicate`` (auto-reject), before :func:`colours_conflict` counted them. Each list holds the
words of one value only, so a title naming both values (``male to female`` adapter) covers one
naming either, and words with a common other sense stay out (``man``, ``back``, ``twin``). The
values of the words of the attribute, not the words, are compared: ``mens`` / ``men`` and
``petrol`` / ``essence`` agree."""
_ATTRIBUTE_WORDS = frozenset(ATTRIBUTES)
_VARIANT_WORDS = COLOURS | SIZES | _ATTRIBUTE_WORDS


def _each_lacks(x: frozenset[str], y: frozenset[str]) -> bool:
    """Whether two non-empty sets each hold a value the other lacks (neither covers the other)."""
    return bool(x) and bool(y) and not (x <= y or y <= x)


def variant_difference(wa: frozenset[str], wb: frozenset[str]) -> tuple[str, frozenset[str], frozenset[str]] | None:
    """The first attribute in which two titles' words (:func:`_title_parts`) each name a value the
    other lacks: ``("colour", {"black"}, {"red"})``, ``("size", {"size:m"}, {"size:l"})`` (:data:`SIZES`), or one
    of :data:`ATTRIBUTES`' (``("gender", {"men"}, {"women"})``, values in their canonical form);
    None when no attribute does (a value named by one title only, or by both, is no difference)."""
    for kind, vocabulary in (("colour", COLOURS), ("size", SIZES)):
        ca, cb = wa & vocabulary, wb & vocabulary
        if _each_lacks(ca, cb):
            return kind, ca - cb, cb - ca
    aa, ab = wa & _ATTRIBUTE_WORDS, wb & _ATTRIBUTE_WORDS
    if not aa or not ab:
        return None
    for kind in sorted({ATTRIBUTES[w][0] for w in aa} & {ATTRIBUTES[w][0] for w in ab}):
        va = frozenset(ATTRIBUTES[w][1] for w in aa if ATTRIBUTES[w][0] == kind)
        vb = frozenset(ATTRIBUTES[w][1] for w in ab if ATTRIBUTES[w][0] == kind)
        if _each_lacks(va, vb):
            return kind, va - vb, vb - va
    return None


def colours_conflict(a: Any, b: Any) -> float | None:
    """Evidence against a match from the colours named in two otherwise equal titles.

    A colour is part of the item: a seller's black and red cases, a shop's white and black
    dishwashers are two items. Each title naming a colour the other lacks (``Black`` / ``Red``,
    ``Cobalt/Black`` / ``Crimson/Black``) in otherwise equal titles (:data:`OTHERWISE_EQUAL`, colours
    aside) is evidence against; a colour named by one title only is none (``Graphite Black`` /
    ``Black``, or no colour at all). Garment sizes (:data:`SIZES`: ``size M`` / ``size L``, ``XL`` /
    ``XXL``) count as colours do, and so do the other attributes of :data:`ATTRIBUTES` (``mens`` /
    ``womens``, ``left`` / ``right``, ``petrol`` / ``diesel``, ``single`` / ``double``:
    :func:`variant_difference`).

    Returns:
        0.0 on a conflict, else None.
    """
    if not a or not b:
        return None
    return colours_conflict_parts(_title_parts(str(a)), _title_parts(str(b)))


def colours_conflict_parts(a: TitleParts, b: TitleParts) -> float | None:
    """:func:`colours_conflict` of two titles' :func:`_title_parts` (which the scorer keeps per
    record, :meth:`daemon.scoring.side.Side.title_parts`): 0.0 on a conflict, else None."""
    wa, wb = a[1], b[1]
    if (wa.isdisjoint(_VARIANT_WORDS) or wb.isdisjoint(_VARIANT_WORDS)  # most titles: no such word
            or variant_difference(wa, wb) is None):
        return None
    pa, pb = wa - _VARIANT_WORDS, wb - _VARIANT_WORDS
    if not _otherwise_equal(pa, pb):
        return None
    return 0.0


MIN_CAPS_CODE = 5
"""Fewest letters of a digit-less code written in capitals (``EFSATB``, ``LCSCSJ``): shorter
capitalised words are mostly abbreviations of a technology that titles of different items share
(``HDTV``, ``HDMI``, ``DECT``, ``SATA``, ``USB``), not a maker's code."""
MIN_SHORT_CODE = 3
"""Fewest characters of a letters-and-digits code seen by :func:`variants_conflict` (``G10``): model
numbers of 4 or more are the ``models`` field's (:func:`title_models`); 3-character ones (``G10``,
``S90``) are a maker's codes too, but too short to be candidate keys."""
MIN_SERIES_PREFIX = 2
"""Leading characters two codes must share when one has no digit for their difference to count: a
maker's variants of one line keep its series letters (``EFSATB`` / ``EFSATS``, ``LCSCSQB`` /
``LCSCSJ``, ``MB15PNKSEEV2`` / ``MBAPNKSEE``), while two capitalised names that happen to sit in
otherwise equal titles (a line name ``VIERA`` / ``DUET``, ``BRAVIA`` / ``HDTV``) share none."""
_SPLIT_CODE = re.compile(r"[-./]")
_EDGE_PUNCT = "\"'`()[]{},;:!?*#&+=<>|"
_EDGE_PUNCT_NO_PLUS = _EDGE_PUNCT.replace("+", "")

SERIES_MARKS = frozenset({"plus", "max", "ultra", "mini", "lite", "pro"})
"""Words that, right after the number of a product line's model (``iPhone 12 Pro Max``, ``Galaxy
S21 Ultra``, ``iPhone 12 mini``, ``Redmi 9 Lite``, ``iPhone 8 Plus``; a ``+`` written onto the number,
``S21+``, reads as ``plus``), name another model of the line: a different screen, camera, battery
and price, which a seller or shop selling both lists with otherwise equal titles
(:func:`variants_conflict`). The makers' own naming of these tiers, not a tuned list: a word that
merely describes (``new``, ``unlocked``, ``black``) is not one."""

_SERIES = re.compile(r"[a-z]{0,2}\d{1,3}[a-z]?")
"""A model's number within its line, as :data:`SERIES_MARKS` follow it: 1-3 digits, at most two
letters before and one after (``12``, ``8``, ``S21``, ``A52``, ``P30``). Longer codes are model
numbers (the ``models`` field's), 4-digit numbers are mostly years, and a number with a unit letter
is a quantity (``4k``, ``5g``, ``3d``, ``10x``), unless the letter is a revision's
(:data:`_REVISION`: ``6s``)."""

_REVISION = re.compile(r"\d{1,2}[ct]|\d?[1-9]s")
"""A line number with a revision letter, which :func:`is_quantity` would read as a quantity: the
``s`` and ``c`` of ``iPhone 6s`` / ``5c``, the ``t`` of ``OnePlus 7T`` / ``Xiaomi 10T``. None of
the three is a unit letter a tier word follows in a title (those are ``k``, ``g``, ``d``, ``x``,
``p``: ``4K Ultra HD``, ``5G``, ``3D``, ``10x``, ``1080p``); a tens' ``s`` is a decade (``80s``),
not a revision. The number counts only where :func:`_tiers` finds a tier word right after it, so
``2t`` or ``5s`` elsewhere change nothing."""


Tiers = tuple[frozenset[str], tuple[str, ...], frozenset[str]]
"""``(lines, marks, tiered)`` of a title (:func:`_tiers`)."""

_NO_TIERS: Tiers = (frozenset(), (), frozenset())


def _pieces(title: str) -> list[str]:
    """A raw title's whitespace-separated pieces, each run of Chinese or Japanese characters
    (:data:`~daemon.signatures.text.CJK_RUN`, written without spaces) a piece of its own:
    ``"出售二手iPhone12 Pro"`` -> ``["出售二手", "iPhone12", "Pro"]``, as the signer's word candidates
    split them."""
    if title.isascii() or not CJK_RUN.search(title):
        return title.split()
    return CJK_RUN.sub(lambda r: f" {r.group()} ", title).split()


def _ends_plus(following: str | None) -> bool:
    """Whether the word ``plus`` before ``following`` (the title's next token, None at its end) can
    name a tier (``iPhone 8 Plus``, ``Galaxy S21 Plus 128GB``, ``... Plus - black``, ``... Plus
    black``): at the end of the title, before a punctuation mark, a spec with a digit or a colour.
    Before any other word it is the conjunction (``Season 4 Plus Plot Details``, ``sofa 3 seater
    plus footstool``)."""
    return following is None or not following.isalnum() or _has_digit(following) or following in COLOURS


def _tier_tokens(title: str) -> list[str]:
    """The tokens :func:`_tiers` reads: each whitespace-separated word of a raw title, edge
    punctuation stripped and ``-./`` removed, lower-cased; a ``+`` written onto a word as a token
    ``+`` after it (``S21+``); a punctuation mark ending a word as a token of its own (``12,``), and
    a word of punctuation alone as itself: both end a run of tier words."""
    tokens: list[str] = []
    for raw in _pieces(title):
        joined = _SPLIT_CODE.sub("", raw.strip(_EDGE_PUNCT))
        if not joined.isalnum():
            tokens.append(raw.casefold())
            continue
        tokens.append(joined.casefold())
        if "+" in raw and raw.rstrip(_EDGE_PUNCT_NO_PLUS).endswith("+"):
            tokens.append("+")
        elif raw[-1] in _EDGE_PUNCT:
            tokens.append(raw[-1])
    return tokens


def _tiers(tokens: list[str], lines: frozenset[str]) -> Tiers:
    """A title's model numbers within a line and its tier words.

    Args:
        tokens: the title's :func:`_tier_tokens` (a ``+`` token reads as ``plus``).
        lines: those of the tokens that read as a line's model number (:func:`_variant_parts`
            tests only the tokens with a digit).
    Returns:
        ``(lines, marks, tiered)``: the tokens that read as a model number within its line
        (:data:`_SERIES`, not a quantity such as ``4k`` or ``5g``: :func:`is_quantity`); the
        :data:`SERIES_MARKS` of the title in the order they first occur (the word ``plus`` only
        where it can name a tier, :func:`_ends_plus`); and
        those of them that stand in a run right after a line number (``12 pro max``: ``pro`` and
        ``max``; not the ``pro`` of ``bike pro`` nor of ``12, pro``).
    """
    marks: list[str] = []
    tiered: set[str] = set()
    after_line = False  # the token before is a line number, or a tier word in a run after one
    for i, tok in enumerate(tokens):
        if tok == "+":
            tok = "plus"
        elif tok == "plus" and not _ends_plus(tokens[i + 1] if i + 1 < len(tokens) else None):
            after_line = False  # "Season 4 plus plot details", "iPhone 12 plus charger": "and"
            continue
        if tok in SERIES_MARKS:
            if tok not in marks:
                marks.append(tok)
            if after_line:
                tiered.add(tok)
        elif tok in lines:
            after_line = True
        else:
            after_line = False
    return lines, tuple(marks), frozenset(tiered)


VariantParts = tuple[frozenset[str], frozenset[str], Tiers]
"""``(codes, words, tiers)`` of a title (:func:`_variant_parts`)."""


@lru_cache(maxsize=65_536)
def _variant_parts(title: str) -> VariantParts:
    """``(codes, words, tiers)`` of a raw title for :func:`variants_conflict`.

    Codes (lower-cased, ``-./`` removed): tokens mixing letters and digits of at least
    :data:`MIN_SHORT_CODE` characters that are not quantities (:func:`is_quantity`: ``40in``,
    ``1080p``), and -- only in a title that also has lower-case letters, where capitals mark a code
    -- tokens of :data:`MIN_CAPS_CODE` or more capital letters that are not colour words. Words: the
    other tokens without digits, lower-cased, split at ``-./``, single letters left out (as
    :func:`colours_conflict` compares them). Tiers: the model numbers within a line and the
    tier words (:func:`_tiers`).
    """
    mixed_case = any(c.islower() for c in title)
    codes: set[str] = set()
    plain: set[str] = set()
    lines: set[str] = set()
    for raw in _pieces(title):
        tok = raw.strip(_EDGE_PUNCT)
        joined = _SPLIT_CODE.sub("", tok)
        if not joined.isalnum():
            continue
        low = joined.casefold()
        has_digit = _has_digit(joined)
        if has_digit:
            digits_only = joined.isdigit()
            quantity = not digits_only and is_quantity(low)
            if not digits_only and len(joined) >= MIN_SHORT_CODE and not quantity:
                codes.add(low)
            if len(low) <= 6 and (not quantity or _REVISION.fullmatch(low)) and _SERIES.fullmatch(low):
                # a line number (S21, 12, 6s)
                lines.add(low)
            continue
        if mixed_case and joined.isupper() and len(joined) >= MIN_CAPS_CODE and low not in COLOURS:
            codes.add(low)
            continue
        plain.update(x.casefold() for x in _SPLIT_CODE.split(tok) if len(x) > 1)
    if not lines:
        return frozenset(codes), frozenset(plain), _NO_TIERS
    if "+" not in title and SERIES_MARKS.isdisjoint(plain) and SERIES_MARKS.isdisjoint(codes):  # most titles
        return frozenset(codes), frozenset(plain), (frozenset(lines), (), frozenset())
    return frozenset(codes), frozenset(plain), _tiers(_tier_tokens(title), frozenset(lines))


def series_conflict(a: Tiers, b: Tiers) -> tuple[str, str] | None:
    """Whether two titles' :func:`_tiers` name two tiers of one line: a line number in both, and a
    tier word in one title only that stands in a run after a line number (in either title).

    Comparing the tier words of the whole titles, not only those after the number, keeps a repost
    that moved the number (``iPhone 11 Pro`` / ``11 iPhone Pro``) one model; requiring the differing
    word in a tier run keeps a describing word elsewhere (``mountain bike pro``) out.

    Returns:
        The two tiers to show, each the first shared line number followed by the title's tier
        words (``("s21", "s21 plus")``), or None.
    """
    (la, ma, ta), (lb, mb, tb) = a, b
    if ma == mb or not ta and not tb:  # the same tier words (most titles: none), or none in a tier run
        return None
    shared = la & lb
    if not shared or set(ma) == set(mb) or (set(ma) ^ set(mb)).isdisjoint(ta | tb):
        return None
    line = min(shared)
    return " ".join((line, *ma)), " ".join((line, *mb))


def _same_code(x: str, y: str) -> bool:
    """Whether two title codes name one item: equal, one a prefix of the other of at least
    4 characters (a shop's suffix, ``FS105`` / ``FS105NA``: the ``models`` field's
    partial rule decides how much that counts), or one mistyped (:func:`_mistyped`)."""
    if x == y:
        return True
    if min(len(x), len(y)) >= 4 and (x.startswith(y) or y.startswith(x)):
        return True
    return _mistyped(x, y)


def _mistyped(x: str, y: str) -> bool:
    """One slip of the keyboard (two neighbours swapped, one character dropped, doubled or struck
    wrong: optimal string alignment distance 1; Damerau 1964) that keeps the last character. A
    variant suffix changes the last character (``EFSATB`` / ``EFSATS``, a colour or finish letter);
    a typo in the middle of a code (``EFSATS`` / ``EFSSATS``) keeps it."""
    return x[-1:] == y[-1:] and OSA.distance(x, y, score_cutoff=1) <= 1


def variants_conflict(a: Any, b: Any) -> float | None:
    """Evidence against a match from the codes of two otherwise equal titles that the ``models``
    field does not see: a digit-less code in capitals (``EFSATB`` / ``EFSATS``, ``LCSCSQB`` /
    ``LCSCSJ``, ``MBAPNKSEE`` / ``MB15PNKSEEV2``) or a letters-and-digits code shorter than a
    model number (``G10`` / ``SX10IS``).

    A seller's items of one line, and a shop's colour or size variants, carry equal titles apart
    from their codes; the code is the item. So when the titles are otherwise equal
    (:data:`OTHERWISE_EQUAL` of the shorter title's words) and each has a code the other lacks
    (neither equal, a prefix variant of 4 characters or more, nor a typo of the other:
    :func:`_same_code`), and one such pair of codes is outside the ``models`` field's view (one
    code without digits, or shorter than 4) -- with a digit-less code the two sharing their first
    :data:`MIN_SERIES_PREFIX` characters, as a line's variants do -- the two are different items.
    A code in one title only is no evidence (a shortened title, a code left out).

    So are two tiers of one line: otherwise equal titles whose shared model number within its line
    (``S21``, ``12``) is followed by different :data:`SERIES_MARKS` (``Galaxy S21`` / ``Galaxy
    S21+``, ``iPhone 12 Pro`` / ``iPhone 12 Pro Max``, ``iPhone 12`` / ``iPhone 12 mini``). The
    title metric cannot see it: the longer title holds every word of the shorter, and ``+`` is no
    word at all. A repost keeps its model's name; shops that add or drop such a word add or drop it
    beside a full model number, or in titles worded apart, which this rule does not reach.

    Args:
        a, b: raw titles (None or blank means missing); the case matters (capitals mark a code).
    Returns:
        0.0 on a conflict, else None (no evidence: the field is skipped).
    """
    if not a or not b:
        return None
    return variants_conflict_parts(_variant_parts(str(a)), _variant_parts(str(b)))


def variants_conflict_parts(a: VariantParts, b: VariantParts) -> float | None:
    """:func:`variants_conflict` of two titles' :func:`_variant_parts` (which the scorer keeps per
    record, :meth:`daemon.scoring.side.Side.variant_parts`): 0.0 on a conflict, else None."""
    (ca, wa, sa), (cb, wb, sb) = a, b
    if (sa[2] or sb[2]) and series_conflict(sa, sb) is not None and _otherwise_equal(wa, wb):
        return 0.0
    if not ca or not cb or ca == cb:  # equal code sets: every code matches itself
        return None
    if not _otherwise_equal(wa, wb):
        return None
    only_a = [x for x in ca - cb if not any(_same_code(x, y) for y in cb)]
    if not only_a:
        return None
    only_b = [y for y in cb - ca if not any(_same_code(x, y) for x in ca)]
    if not only_b:
        return None
    for x in only_a:
        x_digits = _has_digit(x)
        for y in only_b:
            y_digits = _has_digit(y)
            if x_digits and y_digits:
                if min(len(x), len(y)) >= 4:
                    continue  # two model numbers: the ``models`` field decides
                return 0.0
            if len(os.path.commonprefix((x, y))) >= MIN_SERIES_PREFIX:
                return 0.0
    return None


TitleParts = tuple[frozenset[str], frozenset[str], frozenset[int], frozenset[str]]
"""``(numbers, words, mileages, priced)`` of a title (:func:`_title_parts`)."""


@lru_cache(maxsize=65_536)
def _title_parts(title: str, price: float | None = None) -> TitleParts:
    """``(numbers, words, mileages, priced)`` of a title: the numbers of :func:`title_numbers` (an
    ordinal as one of its own, :data:`_ORDINAL`: ``2nd``, not ``2``; a number written as a word
    alone as its digits, :data:`NUMBER_WORDS`), the
    set of its other words (no digit in them; split at ``-./``, single letters left out; a letter
    size after a size label as ``size:<letter>``, :data:`SIZES`), its
    odometer readings in kilometres (:func:`daemon.signatures.odometer_readings`) and those of its
    numbers that equal the record's own ``price`` (:func:`price_value` of its price field, to the
    cent, or in thousands written with a ``k``: ``250k`` at price 250,000; empty without one). Odometer readings are left out of the numbers and the words, and so
    are amounts of money (:func:`daemon.signatures.without_prices`: ``1500 EUR``, ``€1500/month``)
    in the title of a record with a price: a listing's own price or rent, which its price field
    compares. A record without one (a headline) keeps them: ``$450 million`` is what it reports."""
    nums: set[str] = set()
    plain: set[str] = set()
    normalised = normalise_text(title)
    readings, cleaned = split_odometer(normalised)
    mileages = frozenset(readings)
    if price is not None:
        cleaned = without_prices(cleaned)
    thousands: set[str] = set()  # numbers written with a "k" (250k), when that is the record's price
    ordinals: set[str] = set()
    for w in words(_THOUSANDS.sub("", cleaned)):
        if not _has_digit(w):
            if w in NUMBER_WORDS:
                nums.add(NUMBER_WORDS[w])
            else:
                plain.update([x for x in _SPLIT_CODE.split(w) if len(x) > 1])
        elif (o := _ORDINAL.fullmatch(w)) is not None:
            ordinals.add(english_ordinal(o.group(1)))
        elif not model_numbers(w):
            nums.update(_canonical_number(n) for n in _NUMBER.findall(w)
                        if len(n.split(".")[0]) <= MAX_NUMBER_DIGITS)
            if price is not None and w[-1] == "k" and _NUMBER.fullmatch(w[:-1]) \
                    and abs(float(w[:-1]) * 1000 - price) < 0.5:
                thousands.add(_canonical_number(w[:-1]))
    if not plain.isdisjoint(_SIZE_LABELS):  # a size label (a word of the title) and its letter
        plain.update("size:" + s for s in _SIZE_LABEL.findall(normalised))
    priced = frozenset(n for n in nums if n in thousands or abs(float(n) - price) < 0.005) \
        if price is not None else frozenset()
    return frozenset(nums | ordinals), frozenset(plain), mileages, priced


def title_numbers(title: str) -> frozenset[str]:
    """The numbers of a title that are not inside a model number, an amount of money nor an
    odometer reading and have
    at most :data:`MAX_NUMBER_DIGITS` digits before the point: sizes, capacities, versions,
    generations (``40'``, ``120GB``, ``7th``, ``Windows 7``, ``Passport 8500``, ``9500ci``), as
    canonical decimal strings (``"2.0"`` -> ``"2"``; ``"50,000"`` is one 5-digit number, so left
    out); an ordinal in its English form (``"7th"``, from ``7th`` or French ``7e``, :func:`english_ordinal`)."""
    return _title_parts(title)[0]


MILEAGE_SLACK_KM = 3000
"""Kilometres by which two readings of one vehicle may differ (:func:`mileages_agree`): a repost
weeks later states a few hundred to a couple of thousand kilometres more (cars run ~1,000-1,500 km
a month), and a seller may round the figure."""
MILEAGE_SLACK_SHARE = 0.05
"""The same as a share of the larger reading, for high mileages written rounded (``150 000 km``
for 147,800)."""


def mileages_agree(a: frozenset[int], b: frozenset[int]) -> bool:
    """Whether two titles' odometer readings (km) can be one vehicle's: some reading of each lies
    within :data:`MILEAGE_SLACK_KM` or :data:`MILEAGE_SLACK_SHARE` of the larger of some reading
    of the other. Farther apart, they are two vehicles of one make, model and year (a dealer's two
    ``VW Golf 1.4 TSI 2015``). True when either has none."""
    if not a or not b:
        return True
    return any(abs(x - y) <= max(MILEAGE_SLACK_KM, MILEAGE_SLACK_SHARE * max(x, y)) for x in a for y in b)


def _covered(small: frozenset[str], large: frozenset[str]) -> bool:
    """Every number of ``small`` is in ``large``, or is the whole part of one there (``14`` for
    ``14.7``: a rounded figure) or the other way round, or is an ordinal whose plain number is
    there (``4th`` for the ``4`` of ``4G Nano``, a 4th generation) or the other way round, as long
    as ``small`` does not hold that plain number (or that ordinal) itself: then the one there is
    its own, and ``{2, 2nd}`` (``2 bed, 2nd floor``) is not covered by ``{2, 4th}``."""
    whole = {n.split(".")[0] for n in large}
    for n in small:
        if n in large or n in whole or n.split(".")[0] in large:
            continue
        other = n.rstrip("stndrh") if n[-1].isalpha() else english_ordinal(n) if n.isdigit() else None
        if other is None or other not in large or other in small:
            return False
    return True


def numbers_conflict(a: Any, b: Any) -> float | None:
    """Evidence against a match from the numbers of two otherwise equal titles (:func:`title_numbers`).

    Two listings of one item may drop numbers (a shortened title) or add some (a spec the other
    omits), so one number set covering the other is no evidence either way; when each title has a
    number the other lacks (``40'`` / ``46'``, ``120GB`` / ``16GB``, ``Passport 8500`` / ``9500ci``,
    version 7 / 8) and the titles are otherwise equal (:data:`OTHERWISE_EQUAL`), the two are other
    sizes, capacities or versions of one product line. In listings with a price, amounts of money
    are no such numbers (``Sofa 3 seater 250€`` then ``200€``: a repost whose price dropped; this
    string form, without prices, keeps them), nor are the numbers that
    equal each record's own price when both titles state theirs (``- 450`` then ``- 420``); the
    price field compares prices. Odometer readings are compared apart, with
    a tolerance (:func:`mileages_agree`): a repost states its vehicle's mileage a little higher,
    which is no conflict; two readings far apart in otherwise equal titles are one.

    Args:
        a, b: titles (None or blank means missing).
    Returns:
        0.0 (evidence against) on a conflict, else None (no evidence: the field is skipped).
    """
    if not a or not b:
        return None
    return numbers_conflict_parts(_title_parts(str(a)), _title_parts(str(b)))


def compared_numbers(a: TitleParts, b: TitleParts) -> tuple[frozenset[str], frozenset[str]]:
    """The numbers of two titles' :func:`_title_parts` that :func:`numbers_conflict` compares:
    each title's numbers, less those equal to its record's own price when both titles state theirs
    (the price field compares prices)."""
    (na, _, _, pa), (nb, _, _, pb) = a, b
    return (na - pa, nb - pb) if pa and pb else (na, nb)


def numbers_conflict_parts(a: TitleParts, b: TitleParts) -> float | None:
    """:func:`numbers_conflict` of two titles' :func:`_title_parts` (which the scorer keeps per
    record, :meth:`daemon.scoring.side.Side.title_parts`): 0.0 on a conflict, else None."""
    (_, wa, ma, _), (_, wb, mb, _) = a, b
    na, nb = compared_numbers(a, b)
    if not (ma and mb and not mileages_agree(ma, mb)):  # no mileage conflict: the numbers decide
        if not na or not nb:
            return None
        small, large = (na, nb) if len(na) <= len(nb) else (nb, na)
        if small <= large or _covered(small, large):
            return None
    if not _otherwise_equal(wa, wb):
        return None
    return 0.0


def price_conflict(a: Any, b: Any, gap: float = 0.5) -> float | None:
    """Evidence against a match from a large price gap.

    ``r = |a - b| / max(a, b)``; at ``r >= gap`` (default 0.5: one price at most half the other)
    the two offers are not the same item at the same terms: a seller does not repost an ad at half
    or twice its price, and independent shops rarely price one product 2x apart (what they do
    differ by, a few percent, is left to the ``price`` metric).

    Args:
        a, b: prices (numbers >= 0); missing, negative or non-numeric means missing.
        gap: relative difference (fraction in (0, 1]) from which the gap counts.
    Returns:
        0.0 at or beyond ``gap``, else None (no evidence).
    """
    x, y = price_value(a), price_value(b)
    if x is None or y is None:
        return None
    top = max(x, y)
    if top == 0.0:
        return None
    return 0.0 if abs(x - y) / top >= gap else None
