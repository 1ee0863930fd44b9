"""Property tests of the title rules on generated titles (hypothesis): the conflict detectors are
symmetric and total, and the phone and odometer readers never raise and return well-formed values,
whatever mix of words, tier words, numbers, ordinals, number words, attribute words, units,
separators, punctuation and Chinese or Japanese a title holds."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.scoring import metrics as m
from daemon.signatures import normalise_text
from daemon.signatures.extract import MAX_PHONE_DIGITS, MIN_PHONE_DIGITS, odometer_readings, phone_numbers

_WORDS = ["iPhone", "Galaxy", "Pro", "pro", "Max", "plus", "Plus", "Ultra", "mini", "Lite", "black", "size",
          "M", "XL", "flat", "km", "miles", "EUR", "€", "Call", "S21", "S21+", "12", "8+", "2015", "85000",
          "85 000", "1500", "75011", "06 12 34 56 78", "+33", "967562-0403", "3/10/14", "64GB", "4K", "-",
          ",", "(", ")", ":", "+", "/month", "Note", "10+", "1.2", "85.000", "120k", "2.0+", "MB15PNKSEEV2",
          "2nd", "4th", "7ème", "floor", "Two", "three", "All-in-One", "6s", "7T", "80s", "mens", "womens",
          "men's", "left", "right", "petrol", "diesel", "king", "queen", "male", "female", "出售二手iPhone12",
          "黑色", "白色", "ブラック", "128G黑色"]
_TITLE = st.lists(st.sampled_from(_WORDS), min_size=0, max_size=12).map(" ".join)
_FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(_TITLE, _TITLE)
def test_title_conflicts_are_symmetric(a: str, b: str) -> None:
    """Each title rule gives the same answer whichever title comes first (flags must not depend on
    the order records are compared in), and answers 0.0 or None."""
    for rule in (m.variants_conflict, m.numbers_conflict, m.colours_conflict):
        x, y = rule(a, b), rule(b, a)
        assert x == y and x in (None, 0.0), (rule.__name__, a, b, x, y)
    ta, tb = m._variant_parts(a)[2], m._variant_parts(b)[2]
    assert (m.series_conflict(ta, tb) is None) == (m.series_conflict(tb, ta) is None)
    wa, wb = m._title_parts(a)[1], m._title_parts(b)[1]
    d, e = m.variant_difference(wa, wb), m.variant_difference(wb, wa)
    assert (d is None) == (e is None) and (d is None or (d[0], d[1], d[2]) == (e[0], e[2], e[1])), (a, b, d, e)


@_FUZZ
@given(_TITLE | st.text(max_size=80))
def test_phone_and_odometer_readers_are_total(title: str) -> None:
    """The phone and odometer readers take any text: phones are digit strings of the allowed
    lengths, readings whole kilometres of at least a thousand."""
    text = normalise_text(title)
    for p in phone_numbers(text):
        assert p.isdigit() and MIN_PHONE_DIGITS <= len(p) <= MAX_PHONE_DIGITS, (title, p)
    assert all(isinstance(r, int) and r >= 1000 for r in odometer_readings(text)), title

