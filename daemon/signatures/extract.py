"""Entity extraction from normalised text: model numbers, phone numbers, e-mail addresses.

All functions take text already passed through :func:`daemon.signatures.text.normalise_text` (lower
case, NFKC, markup removed) and return de-duplicated lists in order of first appearance.
"""

from __future__ import annotations

import math
import re
from itertools import chain
from typing import Iterable, TypeVar

from ._memo import fill_memo
from .text import words

_EMAIL = re.compile(r"[a-z0-9][a-z0-9._%+\-]{0,63}@[a-z0-9](?:[a-z0-9\-]{0,62}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9\-]{0,62}[a-z0-9])?)*\.[a-z]{2,24}")
# A run of digits with the separators people type in phone numbers; a leading + or ( is allowed.
_PHONE = re.compile(r"(?<![\w.])\+?\(?\d[\d\s().\-]{6,24}\d(?![\w])")
# Cheap pre-check: 8 digits with at most two separators between consecutive digits.
_PHONE_GATE = re.compile(r"\d(?:[\s().\-]{0,2}\d){7}")
# The same on ASCII text, where \d is [0-9] and \s these characters: classes matched by table
# lookups rather than a Unicode digit / space test per character (~2x faster on ad text).
_PHONE_GATE_ASCII = re.compile(r"[0-9](?:[\t\n\x0b\x0c\r\x1c-\x1f ().\-]{0,2}[0-9]){7}")
_JOIN = re.compile(r"[-./]")
# "40in", "16gb", "1080p", "2nd": a number with a unit or ordinal suffix is a quantity, not a model;
# so is an area or a volume ("65m2", as ads write m², "120m3", "800ft2").
_QUANTITY = re.compile(r"\d+(?:[a-z]{1,3}|(?:m|cm|mm|km|ft)[23])")

MIN_MODEL_LENGTH = 4
"""Shortest model number kept, counted on the joined form (``kdl40v4100`` has 10)."""
MAX_MODEL_LENGTH = 32
MIN_PHONE_DIGITS = 8
MAX_PHONE_DIGITS = 15
"""E.164 allows at most 15 digits; longer digit runs are not phone numbers."""
MAX_ITEMS = 16
"""At most this many values of each kind are kept per text (bounds the document and super tokens)."""


_T = TypeVar("_T")


def _unique(items: list[_T]) -> list[_T]:
    return list(dict.fromkeys(items))[:MAX_ITEMS]


def model_numbers(normalised: str) -> list[str]:
    """Model numbers: tokens mixing letters and digits, joined form (``-./`` removed) of length ≥ 4.

    Quantities (digits then at most three letters: ``40in``, ``16gb``, ``1080p``, ``2nd``; an area or
    volume: ``65m2``, ``120m3``) are skipped.

    Args:
        normalised: normalised text.
    Returns:
        Joined lower-case forms, e.g. ``"Sony KDL-40V4100"`` → ``["kdl40v4100"]``; at most :data:`MAX_ITEMS`.
    """
    return model_numbers_from_words(normalised.split())


_DIGIT_CODE = re.compile(r"\d{5,12}")
_CODE_SEPARATORS = re.compile(r"[-./]")
_CODE_RUN = re.compile(r"\d[\d./-]{4,}")
"""What a catalogue number's word holds: a digit, then 4 or more digits or ``-./`` (its word is
digits joined by ``-./``, starting with a digit: :func:`title_codes`)."""


_DAY_MONTH_YEAR = re.compile(r"(\d{1,2})([-./])(\d{1,2})\2(?:\d{2}|\d{4})")
_YEAR_MONTH_DAY = re.compile(r"(?:19|20)\d{2}([-./])(\d{1,2})\1(\d{1,2})")
_YEAR_SPAN = re.compile(r"(?:19|20)\d{2}[-/](?:19|20)?\d{2}")


def is_calendar(word: str) -> bool:
    """Whether a word of digits joined by ``-./`` reads as a calendar date or a span of years: a
    date, written day-month-year or month-day-year (``3/10/14``, ``10.03.2014``: both numbers 1-31,
    one of them 1-12, the same separator twice, a year of 2 or 4 digits) or year-month-day
    (``2014-03-10``: a year 1900-2099, a month 1-12, a day 1-31); or two years, or a year and a
    month (``2006-2011``, ``2006-11``). Such a word says when (an event, a sale, the model years a
    car part fits), not which item: two headlines of one day or two parts for one car's years share
    it while being about different things, so :func:`title_codes` does not count it as a catalogue
    number. No threshold: the test is the calendar's own ranges.

    Args:
        word: one word of :func:`daemon.signatures.text.words` (lower case, ``-./`` kept inside).
    Returns:
        True for a date or a span of years as above; False otherwise (a catalogue number such as
        ``12.345.678`` or ``3780001``, a size such as ``33-1/3``).
    """
    m = _DAY_MONTH_YEAR.fullmatch(word)
    if m:
        a, b = int(m[1]), int(m[3])
        return 1 <= a <= 31 and 1 <= b <= 31 and min(a, b) <= 12
    m = _YEAR_MONTH_DAY.fullmatch(word)
    if m:
        return 1 <= int(m[2]) <= 12 and 1 <= int(m[3]) <= 31
    return _YEAR_SPAN.fullmatch(word) is not None


_DISTANCE = r"(\d{1,3}(?:[ .,'’]\d{3})+|\d+(?:[.,]\d{1,2})?) ?(k)?"
_NOT_A_YEAR = r"(?!(?:19|20)\d\d(?![\d.,]))"
_UNIT = r"(km|kms|kilometres|kilometers|kilometre|kilometer|mi|mile|miles)"
_THOUSANDS_DISTANCE = r"(\d{1,3}(?:[ .,'’]\d{3})+|\d{4,}|\d+(?:[.,]\d{1,2})?(?= ?k ?(?:km|kilom|mi))) ?(k)?"
_ODOMETER = re.compile(
    r"(?<![\w.,'’])" + _NOT_A_YEAR + _THOUSANDS_DISTANCE + r" ?" + _UNIT + r"(?!\w)"
    r"|(?<![\w.,'’])" + _DISTANCE + r" ?" + _UNIT + r"(?!\w)(?! ?:? ?" + _NOT_A_YEAR + r"\d)"
    r"|(?<!\w)(km|kms|mileage|kilometrage|odometer) ?:? ?" + _NOT_A_YEAR + _DISTANCE + r"(?!\w)")
"""A vehicle's distance with its unit or label. Either a number (thousands grouped by a space,
dot, comma or apostrophe, ``85 000``, ``85.000``, ``85,000``; or plain, ``85000``, ``85.5``), an
optional ``k`` (thousands: ``85k km``) and a kilometre or mile unit, with or without a space
(``85000km``): a number of thousands that is not a year (four digits or more, or with ``k``)
whatever follows (``85000 km 9500``: the reading, then a price), any other (a year-like ``2000
km``, an engine's ``1.2``) only when no other number but a year follows (in ``2015 km 85.000`` and
``1.2 km 85.000`` the reading is the number after ``km``); or a label, ``km``,
``mileage``, ``kilometrage`` or ``odometer``, then such a number that is not a year (``km
85.000``, ``mileage: 120k``)."""
_ODOMETER_GATE = re.compile(r"\d ?k? ?(?:km|kilom|mi)|(?:km|mileage|kilometrage|odometer) ?:? ?\d")


def _may_hold_a_reading(normalised: str) -> bool:
    """Whether ``normalised`` may hold an odometer reading: substring tests first (a few hundred
    nanoseconds; most titles hold neither ``km`` nor ``mi``), then :data:`_ODOMETER_GATE`."""
    return ("km" in normalised or "mi" in normalised or "kilom" in normalised
            or "odometer" in normalised) and _ODOMETER_GATE.search(normalised) is not None


MIN_ODOMETER = 1000
"""The smallest distance read as an odometer reading (in kilometres or miles, as written): a
vehicle's mileage is thousands of kilometres, while a product's own distances are below a
thousand (a radio's ``22 mile`` range, an e-bike's ``80 km``, a ``5 km`` cable run) and stay
numbers of the title, which tell two products apart. A new car shown with ``10 km`` is left as a
number too."""
KM_PER_MILE = 1.609344


def split_odometer(normalised: str) -> tuple[list[int], str]:
    """:func:`odometer_readings` and :func:`without_odometer` of ``normalised`` in one scan (both
    are this function's halves; the scorer's title parts take the two at once).

    Returns:
        ``(readings, text)``: the readings in kilometres as :func:`odometer_readings` gives them,
        and the text with each reading blanked out as :func:`without_odometer` gives it.
    """
    if not _may_hold_a_reading(normalised):
        return [], normalised
    out: list[int] = []
    pieces: list[str] = []
    at = 0
    for m in _ODOMETER.finditer(normalised):
        number, thousands, unit = _reading_parts(m)
        value = _distance(number, thousands)
        if value >= MIN_ODOMETER:  # a label other than km (mileage, odometer) names no unit: as written
            out.append(round(value * (KM_PER_MILE if unit.startswith("mi") and unit != "mileage" else 1.0)))
            pieces += [normalised[at:m.start()], " "]
            at = m.end()
    return _unique(out), "".join(pieces) + normalised[at:] if pieces else normalised


def odometer_readings(normalised: str) -> list[int]:
    """The odometer readings of a normalised text, in kilometres (:data:`_ODOMETER`, at least
    :data:`MIN_ODOMETER` in the written unit; miles × :data:`KM_PER_MILE`; after a ``mileage`` or
    ``odometer`` label, which names no unit, as written): ``"vw golf 2015 85 000 km"`` →
    ``[85000]``, ``"120k miles"`` → ``[193121]``, ``"fiat panda 2015 km 85.000"`` → ``[85000]``. A mileage says how far a vehicle
    has gone, not which one it is: a seller's repost states it again a few hundred kilometres on.

    Returns:
        The readings rounded to a kilometre, in order of appearance; at most :data:`MAX_ITEMS`.
    """
    return split_odometer(normalised)[0]


def without_odometer(normalised: str) -> str:
    """``normalised`` with each odometer reading (:func:`odometer_readings`) blanked out, so that
    its digits are read neither as a catalogue number (``85000`` in ``vw golf 2015 85000 km``) nor,
    with the year before it, as a phone number (``2015 85000``). Readings under
    :data:`MIN_ODOMETER` are kept. Returns the text unchanged when it holds none."""
    return split_odometer(normalised)[1]


def _reading_parts(m: re.Match[str]) -> tuple[str, str, str]:
    """``(number, thousands, unit or label)`` of an :data:`_ODOMETER` match, whichever of its three
    forms matched (``thousands`` is ``"k"`` or empty)."""
    if m[1] is not None:
        return m[1], m[2] or "", m[3]
    if m[4] is not None:
        return m[4], m[5] or "", m[6]
    return m[8], m[9] or "", m[7]


def _distance(number: str, thousands: str) -> float:
    """The value of an :data:`_ODOMETER` match's number and ``k``: groups of three after a
    separator are thousands (``85.000`` is 85,000), otherwise a dot or comma is a decimal point
    (``85.5k`` is 85,500)."""
    if len(number) > 4 and number[-4] in " .,'’" and number[-3:].isdigit():
        value = float(re.sub(r"[ .,'’]", "", number))
    else:
        value = float(number.replace(",", "."))
    return value * 1000 if thousands else value


_CURRENCY_NAMES = ("eur", "euro", "euros", "usd", "gbp", "chf", "dollar", "dollars", "sek", "nok", "dkk", "pln", "zł",
                   "czk", "huf", "ron", "inr", "cad", "aud", "nzd", "brl", "mxn", "zar", "yen", "rmb", "cny")
"""Currency codes and words written beside an amount (``1500 EUR``, ``CHF 1500.-``)."""
_CURRENCY_WORDS = "|".join(_CURRENCY_NAMES)
_AMOUNT = r"(?:\d{1,3}(?:[ .,'’]\d{3})+|\d+)(?:[.,]\d{1,2})?(?: ?k)?"
_PER = r"(?:(?: ?/ ?(?:month|mo|mth|week|wk|night|day|year|yr|an|mois|semaine|nuit|jour)|(?: ?pcm| ?pw))(?!\w))"
_PRICE = re.compile(
    r"(?:[€$£¥₹₽₺₩]|(?<!\w)(?:" + _CURRENCY_WORDS + r")) ?" + _AMOUNT + r"(?:[.,]-)?" + _PER + "?"
    r"|(?<![\w.,'’])" + _AMOUNT + r" ?(?:[€$£¥₹₽₺₩]|(?:" + _CURRENCY_WORDS + r")(?!\w))" + _PER + "?"
    r"|(?<![\w.,'’])" + _AMOUNT + _PER)
"""An amount of money written in a text: a number (thousands grouped by a space, dot, comma or
apostrophe; cents; an optional ``k``) with a currency symbol or code before or after it (``€1500``,
``1.500 €``, ``250k€``, ``CHF 1500.-``, ``1500 EUR``, ``US$ 1,500``), or with a rent's period
(``1500/month``, ``£1,500 pcm``). Not weights (``10 pounds``) nor bare numbers."""
_MONEY_MARKS = re.compile("[€$£¥₹₽₺₩]")
_RENT = re.compile(r"\d ?/ ?(?:month|mo|mth|week|wk|night|day|year|yr|an|mois|semaine|nuit|jour)(?!\w)")
_MONEY_WORDS = frozenset((*_CURRENCY_NAMES, "pcm", "pw"))
_LETTER_RUNS = re.compile(r"[a-zł]+")


def _may_hold_money(normalised: str) -> bool:
    """Whether ``normalised`` may hold an amount of money (:data:`_PRICE`): a currency symbol, a
    rent's period after a number (``1500/month``), or a currency code or word (or ``pcm``, ``pw``)
    among its runs of letters (~2 µs a title, where one scan of :data:`_PRICE` costs ~6; a slash
    alone, ``DVD/VCR``, ``1/2``, is no reason to scan)."""
    return (_MONEY_MARKS.search(normalised) is not None or ("/" in normalised and _RENT.search(normalised) is not None)
            or not _MONEY_WORDS.isdisjoint(_LETTER_RUNS.findall(normalised)))


def without_prices(normalised: str) -> str:
    """``normalised`` with each amount of money (:data:`_PRICE`) blanked out: an ad's price or
    rent says what the item costs, not which item it is, so its digits are read neither as a
    catalogue number, a model number (``1500/month`` as ``1500month``), a phone number, nor a
    number of the title (``2 bed flat - 1500 EUR`` then ``- 1450 EUR``: a repost whose price
    dropped, which the price field compares with its tolerance). Returns the text unchanged when
    it holds none.

    Args:
        normalised: text normalised by :func:`daemon.signatures.text.normalise_text`.
    Returns:
        The text with each amount replaced by a space.
    """
    if not _may_hold_money(normalised):
        return normalised
    return _PRICE.sub(" ", normalised)


def is_price(word: str, joined: str, price: float | None) -> bool:
    """Whether a catalogue-number word of a title is the record's own price written in it
    (``iPhone 12 - 45000`` at price 45,000; ``1299.99`` at 1,299.99; ``45.000`` at 45,000): its
    digits, or the word read as one decimal number, equal ``price`` to the cent. An ad's price
    says what it costs, not which item it is: a repost whose price dropped has another number in
    its title, which would otherwise read as another model number. No threshold: equality with
    the record's own price field.

    Args:
        word: the word (digits joined by ``-./``). joined: its digits (``-./`` removed).
        price: the record's price (:func:`price_value`), or None when it has none.
    Returns:
        True when the word is that price; False otherwise (and always without a price).
    """
    if price is None:
        return False
    if abs(int(joined) - price) < 0.005:
        return True
    if word.count(".") == 1 and "-" not in word and "/" not in word:
        return abs(float(word) - price) < 0.005
    return False


MAX_PRICE = 1e12
"""The largest price (in any currency unit) the scorer uses (and the signer compares with a
title's numbers, :func:`is_price`). A larger one is no real listing's
price (a typo, ``1e308``, a 400-digit integer) and is treated as no price, so price arithmetic
stays within a float and the percentage in a summary stays readable."""


def price_value(value: object) -> float | None:
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
        x = float(value)  # type: ignore[arg-type]  # TypeError for what is no number
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) and 0.0 <= x <= MAX_PRICE else None


def title_codes(normalised_title: str, pieces: list[str] | None = None, price: float | None = None) -> tuple[str, ...]:
    """The codes of a title alone: its model numbers (:func:`model_numbers`) and its all-digit
    catalogue numbers of 5 to 12 digits once ``-./`` are removed (``3780001``), other than dates
    and spans of years (:func:`is_calendar`), the record's own price (:func:`is_price`), for a
    record with a price any amount of money (:func:`without_prices`, ``€1500/month``: the listing's
    price or rent, while in a headline without a price ``$450 million`` is what it reports) and a
    vehicle's mileage
    (:func:`odometer_readings`, ``85000 km``): the
    product the listing is about, whereas a body may name compatible products too. Stored in the
    signature (``title_codes``), so the scorer does not derive them again for every candidate it
    reads (``daemon.scoring.metrics.title_models``, the same function).

    Args:
        normalised_title: the title normalised by :func:`daemon.signatures.text.normalise_text`
            (default options). pieces: ``normalised_title.split()`` when the caller has it.
        price: the record's price (:func:`price_value` of its ``price`` field), or None.
    Returns:
        The distinct codes, sorted.
    """
    if price is not None:  # a listing's title: an amount of money in it is its price, no code
        priced = without_prices(normalised_title)
        if priced != normalised_title:
            normalised_title, pieces = priced, None
    codes = set(model_numbers_from_words(normalised_title.split() if pieces is None else pieces))
    if _CODE_RUN.search(normalised_title):  # else no word can be a catalogue number
        for w in words(without_odometer(normalised_title)):
            # A word starts with a letter or digit (words()), so a catalogue number's word starts
            # with a digit and has 5 characters or more: the others are skipped without the regexes.
            if len(w) >= 5 and w[0].isdecimal():
                joined = _CODE_SEPARATORS.sub("", w)
                if _DIGIT_CODE.fullmatch(joined) and not is_calendar(w) and not is_price(w, joined, price):
                    codes.add(joined)
    return tuple(sorted(codes))


def model_numbers_from_words(candidates: Iterable[str]) -> list[str]:
    """:func:`model_numbers` from word candidates (``daemon.signatures.text.words``) or from the
    whitespace-separated pieces of a normalised text (``normalised.split()``), skipping the regex pass
    over the whole text. The model numbers of each distinct piece are memoised (bounded).

    Returns:
        Joined lower-case forms in order of first appearance; at most :data:`MAX_ITEMS`.
    """
    if type(candidates) is not list:
        candidates = list(candidates)
    try:  # the common case: every piece seen before (most pieces give none)
        return list(dict.fromkeys(chain.from_iterable(map(_piece_models.__getitem__, candidates))))[:MAX_ITEMS]
    except KeyError:
        pass
    fill_memo(_piece_models, candidates, _piece_model_numbers, PIECE_CACHE_SIZE)
    return _unique(list(chain.from_iterable(map(_piece_models.__getitem__, candidates))))


PIECE_CACHE_SIZE = 200_000
"""Distinct pieces whose model numbers are memoised (the memo is emptied past this size)."""
_piece_models: dict[str, tuple[str, ...]] = {}


def _piece_model_numbers(piece: str) -> tuple[str, ...]:
    out: list[str] = []
    for tok in words(piece):
        if tok.isalpha() or tok.isdigit() or len(tok) < MIN_MODEL_LENGTH:
            continue
        joined = tok if tok.isalnum() else _JOIN.sub("", tok)
        if MIN_MODEL_LENGTH <= len(joined) <= MAX_MODEL_LENGTH and not joined.isalpha() and not joined.isdigit():
            if not _QUANTITY.fullmatch(joined):
                out.append(joined)
    return tuple(out)


def phone_numbers(normalised: str) -> list[str]:
    """Phone numbers: digit runs (with spaces, dots, dashes, parentheses, leading ``+``) of 8–15 digits,
    amounts of money and odometer readings left out first (:func:`without_prices`,
    :func:`without_odometer`: ``2015 85000 km`` is a year and a mileage, not the phone ``201585000``).
    A year that starts a run of groups is not part of it (``2015 06 12 34 56 78``; ``vw golf 2015
    9500`` holds no phone), and a run must be grouped as phones are (:func:`_phone_shaped`: not
    ``1500 75011``). Written without a ``+``, an eight-digit number grouped 4-4 whose first group
    reads as a year (a Danish ``2012 3456``) is read as a year and a number.

    Returns:
        Digits only (``"+33 6 12-34-56-78"`` → ``"33612345678"``); at most :data:`MAX_ITEMS`.
    """
    if not (_PHONE_GATE_ASCII if normalised.isascii() else _PHONE_GATE).search(normalised):
        return []
    normalised = without_odometer(without_prices(normalised))
    out: list[str] = []
    for m in _PHONE.findall(normalised):
        groups = _DIGITS.findall(m)
        if len(groups) > 1 and not m.startswith("+") and _YEAR.fullmatch(groups[0]):
            groups = groups[1:]  # a year before a phone or before other numbers ("vw golf 2015 9500")
        digits = "".join(groups)
        if MIN_PHONE_DIGITS <= len(digits) <= MAX_PHONE_DIGITS and (m.startswith("+") or _phone_shaped(groups)):
            out.append(digits)
    return _unique(out)


_DIGITS = re.compile(r"\d+")
_YEAR = re.compile(r"(?:19|20)\d\d")


def _phone_shaped(groups: list[str]) -> bool:
    """Whether digit groups written apart (without a leading ``+``) can be one phone number rather
    than numbers side by side. National formats group a number in twos to fours (``06 12 34 56
    78``, ``612 345 678``, ``(201) 555-0123``, ``4123 4567``); a group of five digits or more
    follows only a trunk ``0`` (``07700 900123``, ``030 12345678``) or a short area or mobile
    prefix (``347 1234567``, ``98765 43210``). So four digits then five or more (``1500 75011``: a
    rent and a postcode), or a first group of six or more followed by others (``120000 9000``: a
    mileage and a price), are not one. A single group is (``0612345678``)."""
    if len(groups) < 2 or groups[0].startswith("0"):
        return True
    if len(groups[0]) >= 6:
        return False
    return not (len(groups[0]) == 4 and any(len(g) >= 5 for g in groups[1:]))


def emails(normalised: str) -> list[str]:
    """E-mail addresses, lower-cased (the input is already case-folded).

    Returns:
        ``list[str]`` such as ``["jean.dupont@example.fr"]``; at most :data:`MAX_ITEMS`.
    """
    if "@" not in normalised:
        return []
    return _unique(_EMAIL.findall(normalised))
