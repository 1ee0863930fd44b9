"""Weighted combination of per-field similarities into one 0-100 pair score.

Following the per-field approach of "Finding similar items" (Scrapinghub, seed 002): each field is
compared on its own with a metric suited to it, and the similarities are combined as a weighted
mean, so that a long field cannot dominate. Fields missing on either side carry no evidence: they
are skipped and the remaining weights renormalised. Identifier fields (model numbers, phones,
e-mails) that are present on both sides but disjoint give similarity 0 at their (high) weight --
a strong negative signal -- and, with ``strong_negative_cap``, cap the score just below the
duplicate threshold, so such a pair may reach a moderator but is never auto-rejected. The
``numbers`` (conflicting sizes or versions in the titles) and ``price_gap`` metrics give only
such evidence against (0, or no evidence at all), with the same cap.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, TypeVar

import numpy as np
from rapidfuzz import fuzz
from rapidfuzz.distance import JaroWinkler, Levenshtein

from daemon.scoring import metrics as m
from daemon.scoring import numbers as num
from daemon.scoring import rarity
from daemon.scoring.config import FieldSpec, ScoringConfig
from daemon.scoring.side import Side, profile_key

_NEGATIVE_METRICS = ("exact", "numbers", "colours", "variants", "price_gap")
"""Metrics whose 0 is evidence against a match: with ``strong_negative_cap`` it forbids auto-rejection."""
_LABELS = {"models": "model number", "phones": "phone", "emails": "e-mail", "body": "text"}


TITLE_FIRST_MEMO = 100_000
"""Pairs of title-code profiles (:func:`daemon.scoring.metrics.title_code_profile`) whose ``models``
similarity a ``title_first`` comparator keeps (about 200 bytes each: ~20 MB at most). The similarity
is a function of the two titles' codes and the two records' model numbers, which the interned
profiles stand for; the listings of one product share them, so a product line's pairs repeat the
same pairs of profiles (43% of the dense product bench's pairs were a repeat)."""

_UNKNOWN = object()

TEXT_METRICS = frozenset({"token_set", "levenshtein", "jaro_winkler"})
"""The metrics that compare a field's normalised text (:meth:`Side.text`)."""


class PairScore:
    """The score of one pair of records.

    Attributes:
        score: weighted similarity, 0-100, rounded to 0.1.
        reasons: field -> ``{"metric": str, "similarity": float (0-1, 4 decimals), "weight": float}``
            for every field compared (missing ones are absent); JSON-serialisable.
        details: field -> short human phrase (``"same model number"``, ``"price −3%"``).
        capped: True when the score was capped just below the duplicate threshold: a strong
            negative signal (``strong_negative_cap``), or one text field alone that is not the same
            text (``single_field_cap``; the summary then ends with "nothing else to compare").

    ``reasons`` and ``details`` are built on first access from the compared fields' similarities:
    most scored pairs are below the link threshold and are never explained, so a pair costs its
    arithmetic only. Immutable once built; equality compares all four attributes.
    """

    __slots__ = ("_a", "_b", "_details", "_entries", "_reasons", "capped", "score")

    def __init__(self, score: float, reasons: dict[str, dict[str, Any]] | None = None,
                 details: dict[str, str] | None = None, capped: bool = False, *,
                 entries: list[tuple[FieldSpec, float, bool]] | None = None,
                 sides: tuple[Side, Side] | None = None) -> None:
        self.score = score
        self.capped = capped
        self._reasons = reasons if reasons is not None or entries is not None else {}
        self._details = details if details is not None or entries is not None else {}
        self._entries = entries
        self._a, self._b = sides if sides is not None else (None, None)

    @property
    def reasons(self) -> dict[str, dict[str, Any]]:
        """See the class attributes (built on first access)."""
        if self._reasons is None:
            out: dict[str, dict[str, Any]] = {}
            for spec, sim, counted in self._entries or ():
                r: dict[str, Any] = {"metric": spec.metric, "similarity": round(sim, 4), "weight": spec.weight}
                if not counted:
                    r["counted"] = False
                out[spec.name] = r
            self._reasons = out
        return self._reasons

    @property
    def details(self) -> dict[str, str]:
        """See the class attributes (built on first access)."""
        if self._details is None:
            a, b = self._a, self._b
            assert a is not None and b is not None  # set whenever entries are
            self._details = {spec.name: _detail(spec, sim, a.fields, b.fields, (a, b))
                             for spec, sim, _ in self._entries or ()}
        return self._details

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PairScore):
            return NotImplemented
        return (self.score, self.capped, self.reasons, self.details) == (other.score, other.capped, other.reasons,
                                                                         other.details)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PairScore(score={self.score!r}, reasons={self.reasons!r}, capped={self.capped!r})"

    def summary(self, limit: int = 4) -> str:
        """Short human text, heaviest fields first, e.g. ``"same title, same model number, price −3%"``.

        Args:
            limit: maximum number of fields mentioned.
        Returns:
            Comma-separated phrases; ``"no comparable fields"`` when nothing was compared.
        """
        details, reasons = self.details, self.reasons
        order = sorted(details, key=lambda f: -reasons[f]["weight"])
        parts = [details[f] for f in order[:limit]]
        if self.capped and sum(1 for r in reasons.values() if r.get("counted", True)) == 1:
            parts.append("nothing else to compare")  # single_field_cap: a strong negative is a field of its own
        return ", ".join(parts) if parts else "no comparable fields"


def field_similarity(
    spec: FieldSpec,
    a_fields: Mapping[str, Any], a_sig: Mapping[str, Any],
    b_fields: Mapping[str, Any], b_sig: Mapping[str, Any],
) -> float | None:
    """Similarity in [0, 1] of one configured field for a pair, or None when a side is missing.

    Where values come from, by metric: text metrics and ``price`` read ``fields[name]``;
    ``jaccard`` reads the signature's ``minhash`` or ``bottomk`` and ``simhash`` its ``simhash``
    (both computed over title+body; skipped when ``fields[name]`` is present but blank);
    ``exact`` reads the signature list ``sig[name]`` when there is one (``models``, ``phones``,
    ``emails``), else ``fields[name]``; ``geo`` reads the latitude/longitude fields.

    Raises:
        ValueError: on an unknown metric (cannot happen with a validated config).
    """
    return side_similarity(spec, Side(a_fields, a_sig), Side(b_fields, b_sig))


def side_similarity(spec: FieldSpec, a: Side, b: Side) -> float | None:
    """:func:`field_similarity` of two prepared records (:class:`~daemon.scoring.side.Side`), the
    form the scorer uses: each record's derived values are computed once, not once per pair.

    Raises:
        ValueError: on an unknown metric (cannot happen with a validated config).
    """
    return comparator(spec)(a, b)


Comparator = Callable[[Side, Side], "float | None"]
"""``(a, b) -> similarity in [0, 1] or None`` of one field for two prepared records."""


COMMON_CODE_DOCUMENTS = 20
"""Titles of the corpus snapshot above which an all-digit code of a title (``69003``, ``75011``) is
no evidence when two titles share it: one item is listed by a handful of shops or reposted a
handful of times, so a number that more than 20 titles carry names what many items share, most
often a postcode (an agency's flats of one district), and agreeing on it says nothing of the item
(Winkler's frequency-based agreement weights, in the limit; Winkler 1989). Two such codes that
differ still tell two items apart (two districts). Letters-and-digits model numbers are left
alone: a popular product's own number shared by many shops' listings is the evidence a catalogue
matches on."""


def comparator(spec: FieldSpec, snapshot: rarity.Rarity | None = None) -> Comparator:
    """The similarity function of one configured field, its metric and parameters bound once
    (:func:`score_sides` calls one per field and pair; see :func:`field_similarity` for what each
    metric reads). ``snapshot``: the corpus snapshot attached to the configuration, if any (an
    ``exact`` field with ``title_first`` then leaves out of its agreement the all-digit codes more
    than :data:`COMMON_CODE_DOCUMENTS` titles carry).

    Raises:
        ValueError: on an unknown metric (cannot happen with a validated config).
    """
    name, p, metric = spec.name, spec.params, spec.metric
    if metric in TEXT_METRICS:
        if metric == "token_set":
            token_set_ratio = fuzz.token_set_ratio
            ratio: Callable[[str, str], float] = lambda x, y: token_set_ratio(x, y) / 100.0  # noqa: E731
        elif metric == "levenshtein":
            ratio = Levenshtein.normalized_similarity
        else:
            pw = p["prefix_weight"]
            ratio = lambda x, y: JaroWinkler.normalized_similarity(x, y, prefix_weight=pw)  # noqa: E731

        return _both_values(("text", name), lambda side: side.text(name), ratio)  # Side.text's key
    if metric == "exact":
        iq, negative, min_len = p["ignore_quantities"], p["negative"], p["partial_min_len"]
        kw = {"partial": p["partial"], "partial_min_len": min_len, "negative": negative,
              "common_prefix": p["common_prefix"]}
        exact_sets, verdict, tail = m.exact_similarity_sets, m.title_codes_verdict, p["suffix_digits"]

        def exact(a: Side, b: Side) -> float | None:
            sa = a.identifier_set(name, iq, tail)
            if not sa:  # the common case for phones and e-mails: no evidence, nothing to compare
                return None
            sb = b.identifier_set(name, iq, tail)
            return exact_sets(sa, sb, **kw) if sb else None
        if not p["title_first"]:
            return exact

        # a's profile -> b's profile -> similarity: nested, so that a look-up allocates no key
        memo: dict[m.TitleCodes, dict[m.TitleCodes, float | None]] = {}
        held = [0]  # similarities in ``memo``
        profile, key = Side.title_code_profile, profile_key(name, min_len)

        def title_first(a: Side, b: Side) -> float | None:
            pa, pb = a.memo.get(key) or profile(a, name, min_len), b.memo.get(key) or profile(b, name, min_len)
            if not (pa.codes and pb.codes):
                return exact(a, b)
            row = memo.get(pa)
            if row is None:
                row = memo[pa] = {}
            sim = row.get(pb, _UNKNOWN)
            if sim is _UNKNOWN:
                if held[0] >= TITLE_FIRST_MEMO:
                    memo.clear()
                    held[0] = 0
                    row = memo[pa] = {}
                sim = row[pb] = by_codes(a, b, pa, pb)
                held[0] += 1
            return sim  # type: ignore[return-value]

        common: dict[str, bool] = {}  # an all-digit code -> carried by more than COMMON_CODE_DOCUMENTS titles

        def is_common(code: str) -> bool:
            v = common.get(code)
            if v is None:
                v = common[code] = (snapshot is not None and code.isdigit()
                                    and int(snapshot.frequency([code])[0]) > COMMON_CODE_DOCUMENTS)
            return v

        def by_codes(a: Side, b: Side, pa: m.TitleCodes, pb: m.TitleCodes) -> float | None:
            conflict = verdict(pa, pb)
            if conflict is None:  # two numbering schemes: no evidence either way
                return None
            if conflict:
                return 0.0 if negative else None
            sa, sb = a.title_code_set(iq), b.title_code_set(iq)
            if snapshot is not None:
                shared = sa & sb
                if shared and all(map(is_common, shared)):  # a postcode, not the item
                    sa, sb = sa - shared, sb - shared
                    if not sa or not sb:
                        return None
            sim = exact_sets(sa, sb, **kw)
            if sim == 0.0:  # one title's model is named elsewhere in the other record
                cross = [exact_sets(sa, b.identifier_set(name, iq), **kw), exact_sets(a.identifier_set(name, iq), sb, **kw)]
                sim = max([sim, *(x for x in cross if x is not None)])
            return sim
        return title_first
    if metric == "simhash":
        max_distance = p["max_distance"]

        def simhash(a: Side, b: Side) -> float | None:
            if a.blank(name) or b.blank(name):
                return None
            return m.simhash_similarity(a.sig.get("simhash"), b.sig.get("simhash"), max_distance)
        return simhash
    if metric == "jaccard" and p["estimator"] == "bottomk":
        def bottomk(a: Side, b: Side) -> float | None:
            if a.blank(name) or b.blank(name):
                return None
            return m.bottomk_similarity(a.sig.get("bottomk"), b.sig.get("bottomk"))
        return bottomk
    if metric == "jaccard":
        def minhash(a: Side, b: Side) -> float | None:
            if a.blank(name) or b.blank(name):
                return None
            ha, hb = a.minhash(), b.minhash()
            if ha is None or hb is None or ha[0].shape != hb[0].shape:
                return None
            if ha[1] or hb[1]:
                return 0.0
            return float(np.count_nonzero(ha[0] == hb[0])) / ha[0].size
        return minhash
    if metric == "price":
        tolerance = p["tolerance"]

        return _both_values(("price", name), lambda side: side.price(name),  # Side.price's key
                            functools.partial(m.price_similarity, tolerance=tolerance))
    if metric == "price_gap":
        gap = p["gap"]

        def price_gap(a: Side, b: Side) -> float | None:
            x, y = a.price(), b.price()
            return None if x is None or y is None else m.price_conflict(x, y, gap)
        return price_gap
    if metric in ("numbers", "colours", "variants"):  # the titles' parts, kept on each record's Side
        return _title_conflict(metric)
    if metric == "geo":
        lat_key, lon_key, radius_m = p["lat_key"], p["lon_key"], p["radius_m"]

        def geo(a: Side, b: Side) -> float | None:
            pa, pb = a.coords(lat_key, lon_key), b.coords(lat_key, lon_key)
            return None if pa is None or pb is None else max(0.0, 1.0 - m.haversine_m(*pa, *pb) / radius_m)
        return geo
    if metric == "numeric":
        tolerance, relative = p["tolerance"], p["relative"]

        def numeric(a: Side, b: Side) -> float | None:
            x, y = num.numeric_value(a.fields.get(name)), num.numeric_value(b.fields.get(name))
            return None if x is None or y is None else num.numeric_similarity(x, y, tolerance, relative)
        return numeric
    if metric == "date":
        max_days = p["max_days"]

        def date(a: Side, b: Side) -> float | None:
            x, y = num.date_value(a.fields.get(name)), num.date_value(b.fields.get(name))
            return None if x is None or y is None else num.date_similarity(x, y, max_days)
        return date
    raise ValueError(f"unknown metric {metric!r}")


def _title_conflict(metric: str) -> Comparator:
    """The comparator of an against-only title metric (``numbers``, ``colours``, ``variants``): the
    metric of :mod:`daemon.scoring.metrics` on the two titles' parts as each record's
    :class:`~daemon.scoring.side.Side` keeps them (a missing title: None, as the metric gives)."""
    parts: Callable[[Side], Any]
    conflict: Callable[[Any, Any], float | None]
    if metric == "variants":
        parts, conflict = Side.variant_parts, m.variants_conflict_parts
        key = "variant_parts"
    else:
        parts, key = Side.title_parts, "title_parts"
        conflict = m.numbers_conflict_parts if metric == "numbers" else m.colours_conflict_parts

    return _both_values(key, parts, conflict)  # type: ignore[arg-type]


def _both_values(key: Any, value: Callable[[Side], Any], compare: Callable[[Any, Any], float | None]) -> Comparator:
    """The comparator ``compare(x, y)`` of the two records' values ``x = value(a)``, ``y = value(b)``
    (an accessor of :class:`~daemon.scoring.side.Side` that keeps its value in :attr:`Side.memo`
    under ``key``; read from there without a call once it is), None when either value is None."""
    def both(a: Side, b: Side) -> float | None:
        x = a.memo.get(key, _UNKNOWN)
        if x is _UNKNOWN:
            x = value(a)
        y = b.memo.get(key, _UNKNOWN)
        if y is _UNKNOWN:
            y = value(b)
        return None if x is None or y is None else compare(x, y)
    return both


_COMPILED: dict[int, tuple[ScoringConfig, tuple[tuple[FieldSpec, Comparator, bool, bool], ...]]] = {}
"""``id(cfg)`` -> (cfg, its fields' comparators); the cfg is held so that its id is not reused."""


def _compiled(cfg: ScoringConfig) -> tuple[tuple[FieldSpec, Comparator, bool, bool], ...]:
    """``(spec, comparator, positive-only, negative metric)`` per field of ``cfg``, made once per config."""
    return _per_config(_COMPILED, cfg, lambda: tuple(
        (spec, _with_rarity(spec, comparator(spec, cfg.snapshot), cfg), spec.evidence == "positive",
         spec.metric in _NEGATIVE_METRICS) for spec in cfg.fields))


_T = TypeVar("_T")


def _per_config(table: dict[int, tuple[ScoringConfig, _T]], cfg: ScoringConfig, build: Callable[[], _T]) -> _T:
    """What ``build()`` makes for ``cfg``, made once per config and kept in ``table`` under
    ``id(cfg)`` with the config itself (held, so that its id is not reused); configs are few and
    long-lived, and the table is emptied past 64 all the same."""
    hit = table.get(id(cfg))
    if hit is None or hit[0] is not cfg:
        if len(table) > 64:
            table.clear()
        hit = table[id(cfg)] = (cfg, build())
    return hit[1]


_F = TypeVar("_F")


def _per_floor(table: dict[int, tuple[ScoringConfig, dict[Any, _F]]], cfg: ScoringConfig, floor: Any,
               build: Callable[[ScoringConfig, Any], _F]) -> _F:
    """What ``build(cfg, floor)`` makes, made once per config (:func:`_per_config`) and floor and
    kept; floors are few (the potential threshold), and a config's are emptied past 64 all the same."""
    per_floor = _per_config(table, cfg, dict)
    if floor not in per_floor:
        if len(per_floor) > 64:
            per_floor.clear()
        per_floor[floor] = build(cfg, floor)
    return per_floor[floor]


def _with_rarity(spec: FieldSpec, compare: Comparator, cfg: ScoringConfig) -> Comparator:
    """``compare`` itself, or for the ``title`` field when ``cfg`` scores with rarity
    (:attr:`ScoringConfig.uses_rarity`) its similarity blended with the rarity-weighted one
    (:func:`daemon.scoring.rarity.blended`, share ``cfg.rarity``)."""
    if spec.name != "title" or spec.metric not in TEXT_METRICS or not cfg.uses_rarity:
        return compare
    snapshot, share = cfg.snapshot, cfg.rarity
    assert snapshot is not None  # uses_rarity
    key = ("rarity", "title", snapshot.version)  # Side.rarity_weights's key
    overlap, blend = rarity.overlap, rarity.blend

    def finish(similarity: float | None, a: Side, b: Side) -> float | None:
        # rarity.blended of the two prepared titles (no conversion of the Weighted sides)
        if similarity is None:
            return None
        return blend(similarity, overlap(a.memo.get(key) or a.rarity_weights("title", snapshot),
                                         b.memo.get(key) or b.rarity_weights("title", snapshot)), share)

    def title(a: Side, b: Side) -> float | None:
        return finish(compare(a, b), a, b)
    title.rarity_parts = (compare, finish, share)  # type: ignore[attr-defined]  # for score_sides_at_least
    return title


def _rarity_bound(similarity: float | None, share: float) -> float | None:
    """An upper bound of :func:`daemon.scoring.rarity.blended` knowing only the title's own
    similarity: the rarity-weighted overlap taken as 1 (it is at most 1), or the similarity itself
    when it is None (then the blend is None too). Rounding is monotone, so the float result is not
    below the blend whatever the overlap."""
    return None if similarity is None else (1.0 - share) * similarity + share * 1.0


def _title_words(fields: Mapping[str, Any]) -> frozenset[str]:
    """The words (without digits) of a record's title, as :func:`metrics.colours_conflict` sees them."""
    return m._title_parts(str(fields.get("title") or ""))[1]


def _title_codes_shown(spec: FieldSpec, word: str, a_fields: Mapping[str, Any], b_fields: Mapping[str, Any],
                       sides: tuple[Side, Side] | None = None) -> list[list[str]]:
    """The titles' codes behind a ``title_first`` field's phrase, for a moderator: ``[["kdl40v4100"]]``
    (at most two shared codes, quantities left out when the field ignores them) after "same",
    ``[["dvpns57ps"], ["dvpns57pb"]]`` (at most two codes of each title the other lacks, quantities
    such as ``47inch`` only when the titles differ in nothing else) after "near-same" or
    "different"; ``[]`` when the titles do not both have codes or the phrase rests
    on model numbers named elsewhere in a record. Joined, lower-case forms (:func:`_detail` shows them
    upper-case): the codes the score used (:meth:`Side.title_codes`, kept by each side) when
    ``sides`` are given, else the titles' own (:func:`metrics.record_title_models`, the same for a
    document signed with them)."""
    if sides is not None:
        ca, cb = sides[0].title_codes(), sides[1].title_codes()
    else:
        ca, cb = m.record_title_models(a_fields), m.record_title_models(b_fields)
    if not (ca and cb):
        return []
    iq = spec.params.get("ignore_quantities")
    if word == "same":
        shared = sorted(c for c in ca & cb if not (iq and m.is_quantity(c)))
        return [shared[:2]] if shared else []
    only_a, only_b = sorted(ca - cb), sorted(cb - ca)
    if iq:  # quantities only when the codes differ in nothing else (47INCH / 55INCH)
        qa, qb = [c for c in only_a if not m.is_quantity(c)], [c for c in only_b if not m.is_quantity(c)]
        if qa and qb:
            only_a, only_b = qa, qb
    if not (only_a and only_b):
        return []
    return [only_a[:2], only_b[:2]]


def _detail(spec: FieldSpec, sim: float, a_fields: Mapping[str, Any], b_fields: Mapping[str, Any],
            sides: tuple[Side, Side] | None = None) -> str:
    """The short human phrase of one field's similarity ``sim`` (:attr:`PairScore.details`), from the
    two records' fields (and, for a ``title_first`` field, the titles' codes: ``sides`` when given,
    :func:`_title_codes_shown`)."""
    label = _LABELS.get(spec.name, spec.name)
    if spec.metric == "numbers":
        ta, tb = (m._title_parts(str(f["title"]), m.price_value(f.get("price"))) for f in (a_fields, b_fields))
        (na, nb), ma, mb = m.compared_numbers(ta, tb), ta[2], tb[2]
        if not m.mileages_agree(ma, mb):
            return f"different mileage ({min(ma):,} / {min(mb):,} km)"
        return f"different numbers ({' '.join(sorted(na - nb)[:2])} / {' '.join(sorted(nb - na)[:2])})"
    if spec.metric == "colours":
        found = m.variant_difference(_title_words(a_fields), _title_words(b_fields))
        if found is None:  # not reached: the metric is 0 only on a difference
            return f"different {label}"
        kind, only_a, only_b = found
        show = lambda xs: " ".join(x.removeprefix("size:") for x in sorted(xs)[:2])  # noqa: E731
        return f"different {kind} ({show(only_a)} / {show(only_b)})"
    if spec.metric == "variants":
        (ca, _, sa), (cb, _, sb) = m._variant_parts(str(a_fields["title"])), m._variant_parts(str(b_fields["title"]))
        tiers = m.series_conflict(sa, sb)
        if tiers is not None:
            return f"different model ({tiers[0].upper()} / {tiers[1].upper()})"
        return f"different code ({' '.join(sorted(ca - cb)[:2]).upper()} / {' '.join(sorted(cb - ca)[:2]).upper()})"
    if spec.metric == "price_gap":
        a, b = float(a_fields["price"]), float(b_fields["price"])
        return f"price gap {max(a, b) / min(a, b):.1f}x" if min(a, b) > 0 else "price gap"
    if spec.metric == "exact":
        word = "same" if sim >= 1.0 else "near-same" if sim > 0.0 else "different"
        shown = _title_codes_shown(spec, word, a_fields, b_fields, sides) if spec.params.get("title_first") else []
        if shown and all(m.is_quantity(c) for group in shown for c in group):  # a dimension or a unit quantity
            label = "size"  # (120X60 / 140X70: a table's, not a model's)
        codes = f" ({' / '.join(' '.join(group).upper() for group in shown)})" if shown else ""
        return f"{word} {label}{codes}"
    if spec.metric == "price":
        a, b = m.price_value(a_fields.get(spec.name)), m.price_value(b_fields.get(spec.name))
        if a == b:
            return "same price"
        pct = m.price_change_pct(a, b) or 0  # a similarity was computed, so both prices are usable
        return f"price {'+' if pct >= 0 else '−'}{abs(pct)}%"
    if spec.metric == "geo":
        d = m.haversine_m(
            float(a_fields[spec.params["lat_key"]]), float(a_fields[spec.params["lon_key"]]),
            float(b_fields[spec.params["lat_key"]]), float(b_fields[spec.params["lon_key"]]),
        )
        if d < 50:
            return "same place"
        return f"{d / 1000:.1f} km apart" if d >= 1000 else f"{d:.0f} m apart"
    if spec.metric in ("numeric", "date"):
        return num.typed_detail(spec.metric, label, a_fields.get(spec.name), b_fields.get(spec.name))
    if sim >= 0.98:
        return f"same {label}"
    if sim <= 0.3:
        return f"different {label}"
    return f"{label} {sim:.0%} similar"


def score_pair(
    a_fields: Mapping[str, Any], a_sig: Mapping[str, Any],
    b_fields: Mapping[str, Any], b_sig: Mapping[str, Any],
    cfg: ScoringConfig,
) -> PairScore:
    """Score a pair of records 0-100 as the weighted mean of the configured field similarities.

    Args:
        a_fields, b_fields: role -> value (``title``, ``body``, ``price``, ``lat``, ``lon``...).
        a_sig, b_sig: serialised signatures (``Signature.to_document()``): ``simhash``,
            ``minhash``, ``bottomk``, ``models``, ``phones``, ``emails``... (see
            :func:`field_similarity` for which field reads what).
        cfg: the scoring configuration.
    Returns:
        A :class:`PairScore`; ``score = 100 * Σ w_i s_i / Σ w_i`` over the fields present on both
        sides (0.0 when none is; a field with ``evidence = "positive"`` is counted only when it
        raises the score, and its reason then lacks ``"counted": false``), capped at ``duplicate_threshold - 0.1`` when
        ``cfg.strong_negative_cap`` and an ``exact`` field is disjoint. Symmetric in (a, b)
        except for the sign in the price detail.
    """
    return score_sides(Side(a_fields, a_sig), Side(b_fields, b_sig), cfg)


def score_sides(a: Side, b: Side, cfg: ScoringConfig) -> PairScore:
    """:func:`score_pair` of two prepared records (:class:`~daemon.scoring.side.Side`): the dedup
    worker keeps one per document, so a record's derived values are computed once for all its
    pairs. Same arguments' meaning and result as :func:`score_pair`."""
    return pair_scorer(cfg)(a, b)  # type: ignore[return-value]  # never None without a floor


AGAINST_ONLY_METRICS = frozenset({"numbers", "colours", "variants", "price_gap"})
"""Metrics whose only values are 0.0 (evidence against: a size, colour, code or price conflict) and
None (no evidence): such a field can lower a pair's score, never raise it (see each metric in
:mod:`daemon.scoring.metrics`), which is what lets :func:`score_sides_at_least` leave it out of a
pair that scores below its floor without it."""

_SKETCH_METRICS = frozenset({"jaccard", "simhash"})
"""Metrics :func:`score_sides_at_least` compares last among the fields that can raise a score: a
sketch comparison (a vector of 128 hashes or more) costs more than a text ratio or a set look-up,
and a pair already below the floor with its sketch taken as similarity 1 needs none."""

_FLOOR_MARGIN = 0.05 + 1e-9
"""How far below the floor (score points, 0-100) a bound must be for :func:`score_sides_at_least`
to stop: half the score's rounding step (scores are rounded to 0.1, so a bound below
``floor - 0.05`` rounds below the floor whatever the last digits), plus room for floating-point
rounding in the sums."""


def score_sides_at_least(a: Side, b: Side, cfg: ScoringConfig, floor: float) -> PairScore | None:
    """:func:`score_sides`, or None when the pair is shown to score below ``floor`` without
    comparing every field (pure; for callers that need no score below ``floor``, as the dedup
    worker's links need none below the potential threshold).

    A pair's score only falls as a field it has not compared yet turns out lower, is missing, or is
    of an :data:`AGAINST_ONLY_METRICS` metric (0 or nothing), so the score with every field not
    compared yet taken as similarity 1 and the against-only fields left out is an upper bound of
    the real one (the weighted mean rises with each similarity; a positive-only field enters only
    when it raises the mean; the strong-negative cap only lowers). The fields that can raise the
    score are compared first, sketches (:data:`_SKETCH_METRICS`) last, with the bound checked
    before the sketches and before the against-only fields; once it is below ``floor`` by
    :data:`_FLOOR_MARGIN` the pair is dropped. Before all of them the lead field (the heaviest that
    counts both ways, :func:`_stages`) is compared and checked alone, every other field taken at 1:
    a pair whose model numbers differ is then dropped without its title or price being compared
    (a drop the later checks would make too, :data:`_LEAD_SLACK`). A title scored with token rarity is first taken at
    the bound of its blend with the rarity-weighted overlap at 1 (:func:`_rarity_bound`), and that
    overlap (about half the CPU of a pair's score) is computed only once the pair passes the first
    check, which is made again with the real title before the sketches. A pair that is not dropped
    has every field compared and the same :class:`PairScore` as :func:`score_sides`, bit for bit
    (the same similarities summed in the same order).

    Args:
        a, b: the two prepared records. cfg: the scoring configuration.
        floor: score (0-100) below which the caller needs no score.
    Returns:
        The :class:`PairScore`, or None when the pair scores below ``floor`` (then some fields were
        not compared and no score is known).
    """
    return pair_scorer(cfg, floor)(a, b)


PairScorer = Callable[[Side, Side], "PairScore | None"]
"""``(a, b) -> PairScore`` (or None below a floor) of two prepared records under one configuration."""

_SCORERS: dict[int, tuple[ScoringConfig, dict[float | None, PairScorer]]] = {}
"""``id(cfg)`` -> (cfg, floor -> its :func:`pair_scorer`); the cfg is held so that its id is not reused."""


def pair_scorer(cfg: ScoringConfig, floor: float | None = None) -> PairScorer:
    """The scorer of pairs under ``cfg``: :func:`score_sides` (``floor`` None) or
    :func:`score_sides_at_least` with ``floor`` (score 0-100), as one function with the config's
    comparators, stages and limits looked up once (made once per config and floor, and kept), so
    that a caller scoring many pairs (the dedup worker: ~50 per record) pays for none of it per pair.

    Returns:
        ``scorer(a, b)`` -> :class:`PairScore`, or None for a pair shown to score below ``floor``;
        the same result as the function it stands for, bit for bit.
    """
    return _per_floor(_SCORERS, cfg, floor, _build_scorer)


def _build_scorer(cfg: ScoringConfig, floor: float | None) -> PairScorer:
    """:func:`pair_scorer` of ``cfg`` and ``floor``, made (see :func:`score_sides_at_least` for the
    stages it compares the fields in)."""
    compiled = _compiled(cfg)
    comparators = tuple(compare for _, compare, _, _ in compiled)
    if floor is None:
        def full(a: Side, b: Side) -> PairScore:
            return _pair_score(compiled, [compare(a, b) for compare in comparators], cfg, a, b)
        return full
    cheap, sketches, against, lead = _stages(cfg)
    n, plan = len(compiled), _plan(compiled)
    limit = floor - _FLOOR_MARGIN
    first = lead[0] if lead is not None else -1
    lead_compare, decisive, lead_drops = _lead_rule(cfg, floor)
    # (index, comparator, its rarity parts or None) of the fields compared after the lead one
    rest = tuple((i, comparators[i], getattr(comparators[i], "rarity_parts", None)) for i in cheap if i != first)
    sketch_fields = tuple((i, comparators[i]) for i in sketches)
    against_fields = tuple((i, comparators[i]) for i in against)

    def at_least(a: Side, b: Side) -> PairScore | None:
        sims: list[Any] = [None] * n
        if lead_compare is not None:  # the heaviest field alone, every other one that can raise the score at 1
            sim = sims[first] = lead_compare(a, b)
            if sim is not None and (decisive.get(sim) or (sim not in decisive and lead_drops(sim))):
                return None
        deferred: list[tuple[int, Any, float | None]] = []
        for i, compare, parts in rest:
            if parts is None:
                sims[i] = compare(a, b)
            else:  # the title with token rarity: the rarity-weighted overlap only if the pair can still pass
                plain, finish, share = parts
                own = plain(a, b)
                deferred.append((i, finish, own))
                sims[i] = _rarity_bound(own, share)
        if sketch_fields or deferred:
            for i, _ in sketch_fields:
                sims[i] = 1.0
            if _bound(plan, sims) < limit:
                return None
            for i, finish, own in deferred:
                sims[i] = finish(own, a, b)
        if sketch_fields:
            if deferred and _bound(plan, sims) < limit:
                return None
            for i, compare in sketch_fields:
                sims[i] = compare(a, b)
        if against_fields:
            if _bound(plan, sims) < limit:
                return None
            for i, compare in against_fields:
                sims[i] = compare(a, b)
        return _pair_score(compiled, sims, cfg, a, b)
    return at_least


def _lead_rule(cfg: ScoringConfig, floor: float) -> tuple[Comparator | None, dict[Any, bool], Callable[[Any], bool]]:
    """The lead-field check of :func:`score_sides_at_least` under ``cfg`` and ``floor``:
    ``(comparator, decisive, drops)``: the lead field's comparator (None when the config has no
    lead field, :func:`_stages`), and ``drops(similarity)`` -> whether that similarity alone puts the
    pair below the floor, every other field that can raise the score taken at 1, with ``decisive``
    its memo (similarity -> bool; read directly on the scorer's hot path)."""
    lead = _stages(cfg)[3]
    first, weight, total = lead if lead is not None else (-1, 0.0, 1.0)
    lead_compare = _compiled(cfg)[first][1] if lead is not None else None
    lead_limit = floor - _FLOOR_MARGIN - _LEAD_SLACK
    decisive: dict[Any, bool] = {}  # lead similarity -> whether it drops the pair (a few distinct values)

    def lead_drops(sim: Any) -> bool:
        drops = decisive.get(sim)
        if drops is None:
            drops = decisive[sim] = 100.0 * (total - weight * (1.0 - min(1.0, max(0.0, float(sim))))) / total < (
                lead_limit)
            if len(decisive) > 4096:  # similarities are few (0, 1, a partial match's); a bound all the same
                decisive.clear()
        return drops
    return lead_compare, decisive, lead_drops


@dataclass(frozen=True, slots=True)
class LeadScreen:
    """What a candidate lookup needs of a candidate document to apply the first check of
    :func:`score_sides_at_least` (the lead field alone, :func:`_stages`) before reading the whole
    document: on a near-duplicate-dense catalogue most candidates share title words but not the
    model number, and that check drops them (81% of the dense product bench's candidate pairs)
    without their title, description, price or sketches being compared. A dedup worker reads such
    a candidate's few inputs of the lead field, not its ~2-3 kB document (its MinHash and
    bottom-k TOASTed in PostgreSQL), and does not decode or prepare the rest.

    Attributes:
        fields: the document fields the lead comparator may read (``fields[name]``, and the
            ``title`` for a ``title_first`` field whose signature has no ``title_codes``).
        signature: the signature keys it may read (``name``'s identifier list, ``title_codes``).
        drops: ``drops(a, b)`` -> True when the pair (two :class:`Side`, in the canonical order the
            scorer is given them) is below the floor on the lead field alone: exactly the pairs for
            which :func:`pair_scorer` with that floor returns None before comparing another field.
            A :class:`Side` of a document holding only ``fields`` and ``signature`` above gives the
            same answer as one of the whole document.
    """

    fields: tuple[str, ...]
    signature: tuple[str, ...]
    drops: Callable[[Side, Side], bool]


_SCREENS: dict[int, tuple[ScoringConfig, dict[float, LeadScreen | None]]] = {}
"""``id(cfg)`` -> (cfg, floor -> its :func:`lead_screen`)."""


def lead_screen(cfg: ScoringConfig, floor: float) -> LeadScreen | None:
    """The :class:`LeadScreen` of ``cfg`` at ``floor`` (score 0-100, the dedup worker's potential
    threshold), or None when the config's lead field (:func:`_stages`) is not an ``exact``
    identifier field (``models``, ``phones``, ...): the only metric whose inputs are a few short
    values; a text or sketch lead field would need most of the document anyway. Made once per
    config and floor. Pure."""
    return _per_floor(_SCREENS, cfg, floor, _build_screen)


def _build_screen(cfg: ScoringConfig, floor: float) -> LeadScreen | None:
    """:func:`lead_screen`, made."""
    lead = _stages(cfg)[3]
    if lead is None:
        return None
    spec = cfg.fields[lead[0]]
    if spec.metric != "exact":
        return None
    compare, _, lead_drops = _lead_rule(cfg, floor)
    assert compare is not None
    fields: tuple[str, ...] = (spec.name,)
    signature: tuple[str, ...] = (spec.name,)
    if spec.params.get("title_first"):  # Side.title_codes: the stored codes, else the title's own
        fields, signature = (spec.name, "title"), (spec.name, "title_codes")

    def drops(a: Side, b: Side) -> bool:
        sim = compare(a, b)
        return sim is not None and lead_drops(sim)  # its own memo: at_least inlines that look-up, this need not
    return LeadScreen(fields, signature, drops)


_Stages = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], "tuple[int, float, float] | None"]

_STAGES: dict[int, tuple[ScoringConfig, _Stages]] = {}
"""``id(cfg)`` -> (cfg, its :func:`_stages`); the cfg is held so that its id is not reused."""

_LEAD_SLACK = 1e-6
"""Score points (0-100) by which the lead field's bound (:func:`_stages`) must be below the limit of
:func:`score_sides_at_least` for it to drop a pair. The bound is summed in another order than
:func:`_weighted` sums, so their last bits may differ (by ~1e-13); with this slack a pair the lead
field drops is one the later checks would drop too, and every pair's result stays what it was."""


def _stages(cfg: ScoringConfig) -> _Stages:
    """Field indexes of ``cfg`` in the order :func:`score_sides_at_least` compares them: the fields
    that can raise a score except sketches, the sketch fields, the against-only fields; and the lead
    field compared first, as ``(index, weight, total)``, or None when there is none.

    The lead field is the heaviest of the first group that counts both ways (not positive-only) and
    is not a title scored with token rarity (whose blend is deferred): with every other field that
    can raise the score at similarity 1 (positive-only ones all counted, as each raises a mean below
    1), the pair's score is at most ``100 * (total - weight * (1 - s))`` / ``total``, ``s`` the lead
    field's similarity and ``total`` the weight of the first two groups. A heavy field at 0 (two
    model numbers that differ, 81% of the candidate pairs of the dense product bench) then settles a
    pair without the title or any other comparison, on any catalogue whose weights make a conflict
    of the heaviest field alone decisive; where it is not decisive the check costs one product.
    """
    return _per_config(_STAGES, cfg, lambda: _build_stages(cfg))


def _build_stages(cfg: ScoringConfig) -> _Stages:
    """:func:`_stages` of ``cfg``, computed."""
    metrics = [spec.metric for spec in cfg.fields]
    cheap = tuple(i for i, x in enumerate(metrics) if x not in AGAINST_ONLY_METRICS | _SKETCH_METRICS)
    sketches = tuple(i for i, x in enumerate(metrics) if x in _SKETCH_METRICS)
    compiled = _compiled(cfg)
    leads = [i for i in cheap if not compiled[i][2] and not hasattr(compiled[i][1], "rarity_parts")]
    lead = None
    if leads:
        first = max(leads, key=lambda i: (cfg.fields[i].weight, -i))
        lead = (first, cfg.fields[first].weight, sum(cfg.fields[i].weight for i in cheap + sketches))
    return cheap, sketches, tuple(i for i, x in enumerate(metrics) if x in AGAINST_ONLY_METRICS), lead


def _weighted(compiled: tuple[tuple[FieldSpec, Comparator, bool, bool], ...],
              sims: list[Any]) -> tuple[float, list[tuple[FieldSpec, float, bool]], bool]:
    """The weighted mean of a pair's field similarities (``sims``: one per field of ``compiled``,
    None for a field without evidence), as :func:`score_pair` defines it: ``(score 0-100, not
    rounded nor capped; entries (spec, similarity, counted) in field order; whether a negative
    metric compared at 0)``. :func:`_bound` computes the score alone, the same float."""
    entries: list[tuple[FieldSpec, float, bool]] = []
    total_w = acc = 0.0
    negative = False
    positive_only: list[tuple[float, float, int]] = []
    for (spec, _, positive, negative_metric), sim in zip(compiled, sims):
        if sim is None:
            continue
        sim = min(1.0, max(0.0, float(sim)))
        if positive:
            positive_only.append((sim, spec.weight, len(entries)))
            entries.append((spec, sim, True))
            continue
        entries.append((spec, sim, True))
        total_w += spec.weight
        acc += spec.weight * sim
        if sim == 0.0 and negative_metric:
            negative = True
    # Positive-only fields, most similar first, enter while each raises the mean (so the score is
    # monotone in every similarity and never lowered by such a field); the others are listed as
    # compared but not counted.
    if positive_only:
        positive_only.sort(key=_minus_first)
        for sim, weight, i in positive_only:
            if total_w and sim * total_w <= acc:
                entries[i] = (entries[i][0], sim, False)
                continue
            total_w += weight
            acc += weight * sim
    return (100.0 * acc / total_w if total_w else 0.0), entries, negative


def _minus_first(t: tuple[float, ...]) -> float:
    """Sort key of :func:`_weighted`'s and :func:`_bound`'s positive-only fields: the most similar first."""
    return -t[0]


def _plan(compiled: tuple[tuple[FieldSpec, Comparator, bool, bool], ...]) -> tuple[tuple[float, bool], ...]:
    """``(weight, positive-only)`` per field of ``compiled``: what :func:`_bound` reads of each."""
    return tuple((spec.weight, positive) for spec, _, positive, _ in compiled)


def _bound(plan: tuple[tuple[float, bool], ...], sims: list[Any]) -> float:
    """The score alone (0-100, not rounded nor capped) of :func:`_weighted` for the fields of
    ``plan`` (:func:`_plan`), the same float (the same products summed in the same order), without
    the entries: for the bounds of :func:`score_sides_at_least`, checked two or three times a pair."""
    total_w = acc = 0.0
    positive_only: list[tuple[float, float]] | None = None
    for (weight, positive), sim in zip(plan, sims):
        if sim is None:
            continue
        sim = min(1.0, max(0.0, float(sim)))
        if positive:
            if positive_only is None:
                positive_only = []
            positive_only.append((sim, weight))
            continue
        total_w += weight
        acc += weight * sim
    if positive_only:
        positive_only.sort(key=_minus_first)  # stable: ties keep field order, as in _weighted
        for sim, weight in positive_only:
            if total_w and sim * total_w <= acc:
                continue
            total_w += weight
            acc += weight * sim
    return 100.0 * acc / total_w if total_w else 0.0


def _pair_score(compiled: tuple[tuple[FieldSpec, Comparator, bool, bool], ...], sims: list[Any],
                cfg: ScoringConfig, a: Side, b: Side) -> PairScore:
    """The :class:`PairScore` of a pair whose every field was compared (``sims`` as :func:`_weighted`
    takes them): the weighted mean rounded to 0.1, capped just below the duplicate threshold on a
    strong negative signal (``cfg.strong_negative_cap``) or when one text field alone was counted
    and its texts differ (``cfg.single_field_cap``)."""
    score, entries, negative = _weighted(compiled, sims)
    capped = False
    # the rounded score is the one decided on: 89.97 rounds to 90.0, a duplicate at the default threshold
    if round(score, 1) >= cfg.duplicate_threshold and (
            (cfg.strong_negative_cap and negative) or (cfg.single_field_cap and _one_text_field_differs(entries, a, b))):
        score = max(0.0, cfg.duplicate_threshold - 0.1)
        capped = True
    return PairScore(round(score, 1), capped=capped, entries=entries, sides=(a, b))


def _one_text_field_differs(entries: list[tuple[FieldSpec, float, bool]], a: Side, b: Side) -> bool:
    """Whether the only field counted in ``entries`` (:func:`_weighted`'s) is one of the
    :data:`TEXT_METRICS` and its two normalised texts differ: ``ScoringConfig.single_field_cap``'s
    condition (read only for a pair at or above the duplicate threshold)."""
    counted = [spec for spec, _, on in entries if on]
    if len(counted) != 1 or counted[0].metric not in TEXT_METRICS:
        return False
    name = counted[0].name
    return a.text(name) != b.text(name)


def score_matrix(
    records: Mapping[Hashable, tuple[Mapping[str, Any], Mapping[str, Any]]],
    pairs: Iterable[tuple[Hashable, Hashable]],
    cfg: ScoringConfig,
) -> dict[tuple[Hashable, Hashable], PairScore]:
    """Score candidate pairs of in-memory records (the batch form of :func:`score_pair`).

    Args:
        records: id -> ``(fields, sig)``.
        pairs: candidate ``(a_id, b_id)`` pairs; a pair with ``a_id == b_id`` is skipped and a
            repeated pair (in either order) is scored once, under its first orientation.
        cfg: the scoring configuration.
    Returns:
        ``{(a_id, b_id): PairScore}``.
    Raises:
        KeyError: when a pair names an id absent from ``records``.
    """
    out: dict[tuple[Hashable, Hashable], PairScore] = {}
    for a, b in pairs:
        if a == b or (a, b) in out or (b, a) in out:
            continue
        fa, sa = records[a]
        fb, sb = records[b]
        out[(a, b)] = score_pair(fa, sa, fb, sb, cfg)
    return out


def evidence_against(a: Side, b: Side, cfg: ScoringConfig) -> bool:
    """Whether a pair has evidence against a match: a field of a negative metric (``exact`` model
    numbers, phones or e-mails that are disjoint; ``numbers``, ``colours``, ``variants``,
    ``price_gap`` conflicts) compared at similarity 0, counted both ways (a positive-only field's 0
    is no evidence). Only those fields are compared, so this costs less than :func:`score_sides`.

    Args:
        a, b: the two prepared records. cfg: the scoring configuration.
    Returns:
        True when such a field is 0 for the pair; symmetric in (a, b).
    """
    for spec, compare, positive, negative_metric in _compiled(cfg):
        if negative_metric and not positive and compare(a, b) == 0.0:
            return True
    return False
