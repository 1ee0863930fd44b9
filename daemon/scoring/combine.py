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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Hashable

from daemon.scoring import metrics as m
from daemon.scoring.config import FieldSpec, ScoringConfig

_TEXT_METRICS = ("jaro_winkler", "levenshtein", "token_set")
_NEGATIVE_METRICS = ("exact", "numbers", "colours", "price_gap")
"""Metrics whose 0 is evidence against a match: with ``strong_negative_cap`` it forbids auto-rejection."""
_LABELS = {"models": "model number", "phones": "phone", "emails": "e-mail", "body": "text"}


@dataclass(frozen=True, slots=True)
class PairScore:
    """The score of one pair of records.

    Attributes:
        score: weighted similarity, 0-100, rounded to 0.1.
        reasons: field -> ``{"metric": str, "similarity": float (0-1, 4 decimals), "weight": float}``
            for every field compared (missing ones are absent); JSON-serialisable.
        details: field -> short human phrase (``"same model number"``, ``"price −3%"``).
        capped: True when a strong negative signal capped the score below the duplicate threshold.
    """

    score: float
    reasons: dict[str, dict[str, Any]] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)
    capped: bool = False

    def summary(self, limit: int = 4) -> str:
        """Short human text, heaviest fields first, e.g. ``"same title, same model number, price −3%"``.

        Args:
            limit: maximum number of fields mentioned.
        Returns:
            Comma-separated phrases; ``"no comparable fields"`` when nothing was compared.
        """
        order = sorted(self.details, key=lambda f: -self.reasons[f]["weight"])
        parts = [self.details[f] for f in order[:limit]]
        return ", ".join(parts) if parts else "no comparable fields"


def _blank(fields: Mapping[str, Any], name: str) -> bool:
    if name not in fields:
        return False
    v = fields[name]
    return v is None or (isinstance(v, str) and not v.strip())


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
    name, p = spec.name, spec.params
    if spec.metric in _TEXT_METRICS:
        a, b = a_fields.get(name), b_fields.get(name)
        if spec.metric == "token_set":
            return m.token_set_similarity(a, b)
        if spec.metric == "levenshtein":
            return m.levenshtein_similarity(a, b)
        return m.jaro_winkler_similarity(a, b, prefix_weight=p["prefix_weight"])
    if spec.metric in ("jaccard", "simhash"):
        if _blank(a_fields, name) or _blank(b_fields, name):
            return None
        if spec.metric == "simhash":
            return m.simhash_similarity(a_sig.get("simhash"), b_sig.get("simhash"), p["max_distance"])
        if p["estimator"] == "bottomk":
            return m.bottomk_similarity(a_sig.get("bottomk"), b_sig.get("bottomk"))
        return m.minhash_similarity(a_sig.get("minhash"), b_sig.get("minhash"))
    if spec.metric == "exact":
        a = a_sig[name] if isinstance(a_sig.get(name), list) else a_fields.get(name)
        b = b_sig[name] if isinstance(b_sig.get(name), list) else b_fields.get(name)
        kw = {"partial": p["partial"], "partial_min_len": p["partial_min_len"], "negative": p["negative"],
              "ignore_quantities": p["ignore_quantities"], "common_prefix": p["common_prefix"]}
        if p["title_first"]:
            ta, tb = a_fields.get("title"), b_fields.get("title")
            if ta and tb:
                ma, mb = m.title_models(str(ta)), m.title_models(str(tb))
                if ma and mb:
                    if m.codes_conflict(ma, mb, a, b, p["partial_min_len"]):
                        return 0.0 if p["negative"] else None
                    sim = m.exact_similarity(ma, mb, **kw)
                    if sim == 0.0:  # one title's model is named elsewhere in the other record
                        cross = [m.exact_similarity(ma, b, **kw), m.exact_similarity(a, mb, **kw)]
                        sim = max([sim, *(x for x in cross if x is not None)])
                    return sim
        return m.exact_similarity(a, b, **kw)
    if spec.metric == "price":
        return m.price_similarity(a_fields.get(name), b_fields.get(name), p["tolerance"])
    if spec.metric == "geo":
        return m.geo_similarity(a_fields, b_fields, p["radius_m"], p["lat_key"], p["lon_key"])
    if spec.metric == "numbers":
        return m.numbers_conflict(a_fields.get("title"), b_fields.get("title"))
    if spec.metric == "colours":
        return m.colours_conflict(a_fields.get("title"), b_fields.get("title"))
    if spec.metric == "price_gap":
        return m.price_conflict(a_fields.get("price"), b_fields.get("price"), p["gap"])
    raise ValueError(f"unknown metric {spec.metric!r}")


def _title_words(fields: Mapping[str, Any]) -> frozenset[str]:
    """The words (without digits) of a record's title, as :func:`metrics.colours_conflict` sees them."""
    return m._title_parts(str(fields.get("title") or ""))[1]


def _detail(spec: FieldSpec, sim: float, a_fields: Mapping[str, Any], b_fields: Mapping[str, Any]) -> str:
    label = _LABELS.get(spec.name, spec.name)
    if spec.metric == "numbers":
        na, nb = m.title_numbers(str(a_fields["title"])), m.title_numbers(str(b_fields["title"]))
        return f"different numbers ({' '.join(sorted(na - nb)[:2])} / {' '.join(sorted(nb - na)[:2])})"
    if spec.metric == "colours":
        ca = m.COLOURS & _title_words(a_fields)
        cb = m.COLOURS & _title_words(b_fields)
        return f"different colour ({' '.join(sorted(ca - cb)[:2])} / {' '.join(sorted(cb - ca)[:2])})"
    if spec.metric == "price_gap":
        a, b = float(a_fields["price"]), float(b_fields["price"])
        return f"price gap {max(a, b) / min(a, b):.1f}x" if min(a, b) > 0 else "price gap"
    if spec.metric == "exact":
        if sim >= 1.0:
            return f"same {label}"
        return f"near-same {label}" if sim > 0.0 else f"different {label}"
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
    reasons: dict[str, dict[str, Any]] = {}
    details: dict[str, str] = {}
    total_w = acc = 0.0
    negative = False
    positive_only: list[tuple[float, FieldSpec]] = []
    for spec in cfg.fields:
        sim = field_similarity(spec, a_fields, a_sig, b_fields, b_sig)
        if sim is None:
            continue
        sim = min(1.0, max(0.0, float(sim)))
        reasons[spec.name] = {"metric": spec.metric, "similarity": round(sim, 4), "weight": spec.weight}
        details[spec.name] = _detail(spec, sim, a_fields, b_fields)
        if spec.evidence == "positive":
            positive_only.append((sim, spec))
            continue
        total_w += spec.weight
        acc += spec.weight * sim
        if spec.metric in _NEGATIVE_METRICS and sim == 0.0:
            negative = True
    # Positive-only fields, most similar first, enter while each raises the mean (so the score is
    # monotone in every similarity and never lowered by such a field); the others are listed as
    # compared but not counted.
    for sim, spec in sorted(positive_only, key=lambda t: -t[0]):
        if total_w and sim * total_w <= acc:
            reasons[spec.name]["counted"] = False
            continue
        total_w += spec.weight
        acc += spec.weight * sim
    score = 100.0 * acc / total_w if total_w else 0.0
    capped = False
    if cfg.strong_negative_cap and negative and score >= cfg.duplicate_threshold:
        score = max(0.0, cfg.duplicate_threshold - 0.1)
        capped = True
    return PairScore(score=round(score, 1), reasons=reasons, details=details, capped=capped)


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
