"""One record as the scorer reads it: its fields and signature, with every derived value computed once.

Scoring a record against its ~50 candidates used to re-derive the same values for every pair
(normalised text, model-number sets, parsed prices, MinHash vectors), one Python call per pair and
per field. A :class:`Side` derives each value on first use and keeps it, so a record's values are
computed once per record, not once per pair; the dedup worker keeps one :class:`Side` per index
document (:attr:`daemon.backends.base.IndexDocument.side`), so a candidate shared by many records
of a batch, or fetched again by a later batch at the same version, is prepared once.

The values are exactly those the per-value metrics of :mod:`daemon.scoring.metrics` compute from
the raw fields, so a score from prepared sides equals the score from the raw values bit for bit
(``tests/test_scoring_sides.py`` checks it against the per-pair reference on real listings).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from daemon.scoring import metrics as m
from daemon.scoring.rarity import Weighted
from daemon.signatures import MINHASH_EMPTY

_MISSING = object()


def profile_key(name: str, min_len: int) -> tuple[str, str, int]:
    """The key under which :meth:`Side.title_code_profile` keeps its value: a caller that reads it
    pair after pair (:func:`daemon.scoring.combine.comparator`) makes it once and looks it up in
    :attr:`Side.memo`."""
    return ("title_code_profile", name, min_len)


class Side:
    """One record's scoring inputs, derived lazily and memoised (pure; no I/O).

    Args:
        fields: role -> value, as in :attr:`IndexDocument.fields` (``title``, ``body``,
            ``price``, ``lat``/``lon``, ...). Not copied: it must not be changed afterwards.
        sig: the serialised signature (``simhash``, ``minhash``, ``bottomk``, ``models``,
            ``phones``, ``emails``, ...). Not copied either.

    Each accessor returns what the corresponding metric of :mod:`daemon.scoring.metrics` would
    derive from the raw value (see each one), computed on the first call.

    Attributes:
        memo: the values computed so far, by key (``("text", name)``, :func:`profile_key`, ...):
            read only, by the comparators of :mod:`daemon.scoring.combine` that look a value up
            pair after pair without a method call (falling back to the accessor when it is absent).
    """

    __slots__ = ("fields", "memo", "sig")

    def __init__(self, fields: Mapping[str, Any], sig: Mapping[str, Any]) -> None:
        self.fields = fields
        self.sig = sig
        self.memo: dict[Any, Any] = {}

    def text(self, name: str) -> str | None:
        """``fields[name]`` normalised as the text metrics compare it (rapidfuzz ``default_process``),
        or None when missing or blank."""
        key = ("text", name)
        v = self.memo.get(key, _MISSING)
        if v is _MISSING:
            v = self.memo[key] = m._text(self.fields.get(name))
        return v  # type: ignore[no-any-return]

    def rarity_weights(self, name: str, snapshot: Any) -> Weighted:
        """``fields[name]``'s words with their rarity weights under ``snapshot`` (a
        :class:`~daemon.scoring.rarity.Rarity`; :meth:`Rarity.weights`), prepared
        (:class:`~daemon.scoring.rarity.Weighted`, shared by the records whose normalised titles are
        equal: :meth:`Rarity.prepared`) and kept per snapshot version."""
        key = ("rarity", name, snapshot.version)
        v = self.memo.get(key, _MISSING)
        if v is _MISSING:
            v = self.memo[key] = snapshot.prepared(self.text(name))
        return v  # type: ignore[no-any-return]

    def blank(self, name: str) -> bool:
        """True when ``fields`` holds ``name`` with None or only white space (the sketch-based
        metrics then skip the field: the signature was computed without it)."""
        v = self.fields.get(name, _MISSING)
        if v is _MISSING:
            return False
        return v is None or (isinstance(v, str) and not v.strip())

    def minhash(self) -> tuple[np.ndarray, bool] | None:
        """The MinHash vector as ``int64`` numpy array and whether it is the empty-set signature
        (all :data:`~daemon.signatures.MINHASH_EMPTY`), or None when missing or empty."""
        v = self.memo.get("minhash", _MISSING)
        if v is _MISSING:
            raw = self.sig.get("minhash")
            if not raw:
                v = None
            else:
                arr = np.asarray(raw, dtype=np.int64)
                # all empty only if the first value is (the usual answer, no, without a pass over all)
                v = (arr, bool(arr[0] == MINHASH_EMPTY) and bool((arr == MINHASH_EMPTY).all()))
            self.memo["minhash"] = v
        return v  # type: ignore[no-any-return]

    def identifiers(self, name: str) -> Any:
        """The raw identifier values of field ``name``: the signature list ``sig[name]`` when there
        is one (``models``, ``phones``, ``emails``), else ``fields[name]``."""
        raw = self.sig.get(name)
        return raw if isinstance(raw, list) else self.fields.get(name)

    def identifier_set(self, name: str, ignore_quantities: bool = False, suffix_digits: int = 0) -> frozenset[str]:
        """:meth:`identifiers` normalised as :func:`~daemon.scoring.metrics.exact_similarity`
        compares them (case-folded, alphanumerics only), quantities left out on request, all-digit
        values cut to their last ``suffix_digits`` digits when above 0
        (:func:`~daemon.scoring.metrics.digit_suffixes`)."""
        key = ("ids", name, ignore_quantities, suffix_digits)
        v = self.memo.get(key)
        if v is None:
            v = m.digit_suffixes(m.normalised_identifiers(self.identifiers(name), ignore_quantities), suffix_digits)
            self.memo[key] = v
        return v  # type: ignore[no-any-return]

    def title(self) -> str | None:
        """``str(fields["title"])``, or None when the title is missing or empty."""
        t = self.fields.get("title")
        return str(t) if t else None

    def title_codes(self) -> frozenset[str]:
        """The title's own codes (:func:`~daemon.scoring.metrics.title_models`); empty without a title.

        Read from the signature's ``title_codes`` when it holds them (the signer computed them from
        the same title by the same function: a dedup worker that reads ~50 candidate documents per
        record no longer derives them for each one it reads again), else derived from the title."""
        v = self.memo.get("title_codes")
        if v is None:
            stored = self.sig.get("title_codes")
            if type(stored) is list or type(stored) is tuple:
                v = self.memo["title_codes"] = frozenset(stored)
            else:
                v = self.memo["title_codes"] = m.record_title_models(self.fields)
        return v  # type: ignore[no-any-return]

    def title_parts(self) -> m.TitleParts | None:
        """The title's ``(numbers, words, mileages, priced)`` with the record's price
        (:func:`~daemon.scoring.metrics._title_parts`, as
        :func:`~daemon.scoring.metrics.numbers_conflict` and
        :func:`~daemon.scoring.metrics.colours_conflict` read them), or None without a title."""
        return self._of_title("title_parts", lambda title: m._title_parts(title, self.price()))

    def variant_parts(self) -> m.VariantParts | None:
        """The title's ``(codes, words, tiers)`` (:func:`~daemon.scoring.metrics._variant_parts`, as
        :func:`~daemon.scoring.metrics.variants_conflict` reads them), or None without a title."""
        return self._of_title("variant_parts", m._variant_parts)

    def _of_title(self, key: str, derive: Any) -> Any:
        """``derive(title)`` (a pure function of the title text) kept under ``key``; None without a title."""
        v = self.memo.get(key, _MISSING)
        if v is _MISSING:
            t = self.title()
            v = self.memo[key] = derive(t) if t else None
        return v

    def title_code_set(self, ignore_quantities: bool) -> frozenset[str]:
        """:meth:`title_codes` normalised as :meth:`identifier_set` normalises identifiers."""
        key = ("title_ids", ignore_quantities)
        v = self.memo.get(key)
        if v is None:
            v = self.memo[key] = m.normalised_identifiers(self.title_codes(), ignore_quantities)
        return v  # type: ignore[no-any-return]

    def title_code_profile(self, name: str, min_len: int) -> m.TitleCodes:
        """:meth:`title_codes` with the normalised model numbers of field ``name``
        (:meth:`identifier_set`), prepared for :func:`~daemon.scoring.metrics.title_codes_verdict`
        (:func:`~daemon.scoring.metrics.title_code_profile`: shared by records with the same ones)."""
        key = profile_key(name, min_len)
        v = self.memo.get(key)
        if v is None:
            v = self.memo[key] = m.title_code_profile(self.title_codes(), self.identifier_set(name), min_len)
        return v  # type: ignore[no-any-return]

    def price(self, name: str = "price") -> float | None:
        """``fields[name]`` as a usable price (:func:`~daemon.scoring.metrics.price_value`) or None."""
        key = ("price", name)
        v = self.memo.get(key, _MISSING)
        if v is _MISSING:
            v = self.memo[key] = m.price_value(self.fields.get(name))
        return v  # type: ignore[no-any-return]

    def coords(self, lat_key: str, lon_key: str) -> tuple[float, float] | None:
        """``(lat, lon)`` in degrees when both are valid (:func:`~daemon.scoring.metrics.geo_similarity`'s
        rule), else None."""
        key = ("coords", lat_key, lon_key)
        v = self.memo.get(key, _MISSING)
        if v is _MISSING:
            v = self.memo[key] = m._coords(self.fields, lat_key, lon_key)
        return v  # type: ignore[no-any-return]
