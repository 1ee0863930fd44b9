"""The pair scorer as it was before records were prepared once (:class:`daemon.scoring.Side`): one call
per pair and per field on the raw values. Kept here, for tests only, as the reference the prepared
scorer must equal bit for bit (``tests/test_scoring_sides.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from daemon.scoring import metrics as m
from daemon.scoring.combine import _NEGATIVE_METRICS, PairScore, _detail
from daemon.scoring.config import FieldSpec, ScoringConfig

_TEXT_METRICS = ("jaro_winkler", "levenshtein", "token_set")


def matches_walk(x: str, ys: Any, min_len: int) -> bool:
    """``x`` equals one of ``ys`` or one is a prefix of the other (both >= ``min_len`` characters),
    by a walk over ``ys``: the model-number prefix rule as it was before the set look-ups of
    ``metrics._matches_set``."""
    return any(x == y or (min(len(x), len(y)) >= min_len and (x.startswith(y) or y.startswith(x))) for y in ys)


def codes_conflict(a_title_codes: frozenset[str], b_title_codes: frozenset[str], a_all: Any, b_all: Any,
                   min_len: int = 4) -> bool:
    """``metrics.codes_conflict`` as it was, on :func:`matches_walk`."""
    a_set, b_set = m.normalised_identifiers(a_all), m.normalised_identifiers(b_all)
    only_a = [x for x in a_title_codes if not matches_walk(x, b_title_codes, min_len)]
    only_b = [y for y in b_title_codes if not matches_walk(y, a_title_codes, min_len)]
    if not only_a or not only_b:
        return False
    return not (any(matches_walk(x, b_set, min_len) for x in only_a) or any(matches_walk(y, a_set, min_len) for y in only_b))


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
                ma, mb = m.record_title_models(a_fields), m.record_title_models(b_fields)
                if ma and mb:
                    if codes_conflict(ma, mb, a, b, p["partial_min_len"]):
                        return None if m.separate_schemes(ma, mb, p["partial_min_len"]) else 0.0 if p["negative"] else None
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
    if spec.metric == "variants":
        return m.variants_conflict(a_fields.get("title"), b_fields.get("title"))
    if spec.metric == "price_gap":
        return m.price_conflict(a_fields.get("price"), b_fields.get("price"), p["gap"])
    raise ValueError(f"unknown metric {spec.metric!r}")


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
    if cfg.strong_negative_cap and negative and round(score, 1) >= cfg.duplicate_threshold:
        score = max(0.0, cfg.duplicate_threshold - 0.1)
        capped = True
    # single_field_cap: one text field counted alone, and not the same normalised text
    counted = [name for name, r in reasons.items() if r.get("counted", True)]
    if (cfg.single_field_cap and round(score, 1) >= cfg.duplicate_threshold and len(counted) == 1
            and reasons[counted[0]]["metric"] in ("token_set", "levenshtein", "jaro_winkler")
            and m._text(a_fields.get(counted[0])) != m._text(b_fields.get(counted[0]))):
        score = max(0.0, cfg.duplicate_threshold - 0.1)
        capped = True
    return PairScore(score=round(score, 1), reasons=reasons, details=details, capped=capped)
