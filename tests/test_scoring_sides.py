"""The prepared scorer (:class:`daemon.scoring.Side`, :func:`score_sides`) equals the per-pair reference
(:mod:`tests.scoring_reference`, the scorer as it was) bit for bit: score, cap, reasons and details.

Pairs come from product listings with realistic near-duplicate density (Abt-Buy product lines with
their hard negatives, :mod:`bench.corpus_products`; skipped without the data) and from generated
classified ads (always), each scored in both orientations under the classified and products
profiles and under a configuration that uses every metric.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from daemon.profiles import PROFILES
from daemon.evaluation.generator import generate_ads
from daemon.scoring import ScoringConfig, Side, lead_screen, score_pair, score_sides, score_sides_at_least
from daemon.scoring.rarity import FrequencyCounter, Rarity
from daemon.signatures import SignatureParams, compute_signature
from tests import scoring_reference as ref
from tests.data_paths import DATA_DIR as DATA

EVERY_METRIC = {"fields": {
    "title": {"metric": "token_set", "weight": 3.0},
    "body": {"metric": "jaccard", "weight": 1.0, "estimator": "bottomk"},
    "category": {"metric": "jaro_winkler", "weight": 1.0, "prefix_weight": 0.2},
    "user": {"metric": "levenshtein", "weight": 0.5},
    "source": {"metric": "exact", "weight": 0.5, "negative": False},
    "location": {"metric": "geo", "weight": 1.0, "radius_m": 500.0},
    "price": {"metric": "price", "weight": 1.0, "tolerance": 0.1, "evidence": "positive"},
}}


def _configs() -> dict[str, ScoringConfig]:
    every = ScoringConfig.from_mapping({k: v for k, v in EVERY_METRIC.items()})
    products = ScoringConfig.from_mapping(PROFILES["products"]["dedup"])
    counter = FrequencyCounter()  # token rarity from the test corpus's own titles
    for f, _, _ in _records():
        counter.add(f.get("title"))
    return {"classified": ScoringConfig.from_mapping(PROFILES["classified"]["dedup"]),
            "products": products,
            "products-rarity": products.with_snapshot(Rarity(1, counter.documents, *counter.arrays())),
            "every-metric": every}


def _records() -> list[tuple[dict[str, Any], dict[str, Any], Any]]:
    """``(fields, signature, group)``: listings of one group are near-duplicates or hard negatives."""
    params = SignatureParams()
    out = []
    for i, ad in enumerate(generate_ads(300, seed=11, dup_rate=0.4)):
        f = dict(ad.fields)
        out.append((f, compute_signature(f, params).to_document(), ("ad", ad.duplicate_of if ad.duplicate_of is not None else i)))
    if (DATA / "abt-buy" / "Abt.csv").exists():
        from bench.corpus_products import build_corpus

        for listing in build_corpus(600, seed=5, data_dir=DATA, shops=4):
            f = dict(listing.fields)
            out.append((f, compute_signature(f, params).to_document(), ("line", listing.family)))
    return out


def _pairs(recs: list[Any]) -> list[tuple[int, int]]:
    by_group: dict[Any, list[int]] = {}
    for i, (_, _, g) in enumerate(recs):
        by_group.setdefault(g, []).append(i)
    pairs = [(x, y) for ids in by_group.values() for x in ids for y in ids if x != y]
    rng = random.Random(3)
    pairs += [(rng.randrange(len(recs)), rng.randrange(len(recs))) for _ in range(3000)]
    return pairs


@pytest.fixture(scope="module")
def corpus() -> tuple[list[Any], list[tuple[int, int]]]:
    recs = _records()
    return recs, _pairs(recs)


@pytest.mark.parametrize("profile", ["classified", "products", "every-metric"])
def test_prepared_scores_equal_the_reference(corpus: tuple[list[Any], list[tuple[int, int]]], profile: str) -> None:
    recs, pairs = corpus
    cfg = _configs()[profile]
    sides = [Side(f, s) for f, s, _ in recs]  # shared across pairs, as the worker shares them
    flagged = differing = 0
    for x, y in pairs:
        (fa, sa, _), (fb, sb, _) = recs[x], recs[y]
        want = ref.score_pair(fa, sa, fb, sb, cfg)
        got = score_sides(sides[x], sides[y], cfg)
        assert (got.score, got.capped) == (want.score, want.capped), (profile, fa.get("title"), fb.get("title"))
        assert got.reasons == want.reasons
        assert got.details == want.details
        assert got.summary() == want.summary()
        assert score_pair(fa, sa, fb, sb, cfg) == got
        flagged += got.score >= cfg.potential_threshold
        differing += got.score != score_sides(sides[y], sides[x], cfg).score
    assert len(pairs) > 3000
    assert flagged > 50, "the pairs must include near-duplicates, not only unrelated records"
    assert differing == 0, "a pair's score must not depend on its orientation"


@pytest.mark.parametrize("profile", ["classified", "products", "products-rarity", "every-metric"])
def test_scoring_with_a_floor_drops_only_pairs_below_it(corpus: tuple[list[Any], list[tuple[int, int]]],
                                                        profile: str) -> None:
    """score_sides_at_least: the same PairScore as score_sides (reasons and details too), or None
    only for a pair that scores below the floor; at the potential threshold it drops most pairs
    below it (what the dedup worker saves)."""
    recs, pairs = corpus
    cfg = _configs()[profile]
    sides = [Side(f, s) for f, s, _ in recs]
    floor = cfg.potential_threshold
    below = dropped = 0
    for x, y in pairs:
        want = score_sides(sides[x], sides[y], cfg)
        got = score_sides_at_least(sides[x], sides[y], cfg, floor)
        below += want.score < floor
        if got is None:
            dropped += 1
            assert want.score < floor, (profile, recs[x][0].get("title"), recs[y][0].get("title"), want.score)
            continue
        assert (got.score, got.capped, got.reasons, got.details) == (want.score, want.capped, want.reasons,
                                                                     want.details)
    assert below > 1000
    assert dropped > below // 2, (dropped, below)
    for x, y in pairs[:500]:  # no floor to speak of: nothing dropped
        assert score_sides_at_least(sides[x], sides[y], cfg, 0.0) == score_sides(sides[x], sides[y], cfg)


def _part(fields: dict[str, Any], sig: dict[str, Any], screen: Any) -> Side:
    """A Side of only what a lead screen reads (as the PostgreSQL backend's get_document_parts gives it)."""
    return Side({k: fields[k] for k in screen.fields if k in fields},
                {k: sig[k] for k in screen.signature if k in sig})


@pytest.mark.parametrize("profile", ["classified", "products", "products-rarity"])
def test_the_lead_screen_drops_what_the_scorer_drops_first(corpus: tuple[list[Any], list[tuple[int, int]]],
                                                          profile: str) -> None:
    """lead_screen: on a candidate's few lead-field values (its model numbers and title codes) it
    drops a pair exactly when score_sides_at_least drops it on the lead field, whichever side is
    partial; every pair it drops is below the floor; on product listings it drops most of them."""
    recs, pairs = corpus
    cfg = _configs()[profile]
    floor = cfg.potential_threshold
    screen = lead_screen(cfg, floor)
    assert screen is not None and screen.fields == ("models", "title") and screen.signature == ("models", "title_codes")
    full = [Side(f, s) for f, s, _ in recs]
    part = [_part(f, s, screen) for f, s, _ in recs]
    dropped = 0
    for x, y in pairs:
        drops = screen.drops(full[x], full[y])
        assert screen.drops(full[x], part[y]) == drops == screen.drops(part[x], full[y]), (recs[x][0], recs[y][0])
        if drops:
            dropped += 1
            assert score_sides_at_least(full[x], full[y], cfg, floor) is None
            assert score_sides(full[x], full[y], cfg).score < floor
    assert dropped > len(pairs) // 4, (dropped, len(pairs))
    # a document written before title_codes were stored: the title stands in for them
    old = [_part(f, {k: v for k, v in s.items() if k != "title_codes"}, screen) for f, s, _ in recs[:300]]
    assert all(screen.drops(old[x], full[y]) == screen.drops(full[x], full[y])
               for x in range(0, 300, 7) for y in range(0, 300, 11))


def test_no_lead_screen_without_an_identifier_lead_field() -> None:
    """A configuration whose heaviest two-way field is a text gets no screen (its lead field needs
    most of the document); one whose model numbers weigh most gets the model-number screen."""
    text_lead = ScoringConfig.from_mapping({"fields": {"title": {"metric": "token_set", "weight": 5.0}}})
    assert lead_screen(text_lead, 70.0) is None
    every = _configs()["every-metric"]  # the default fields, models at 4.0, with a few more
    assert lead_screen(every, 70.0).signature == ("models", "title_codes")  # type: ignore[union-attr]


def test_every_metric_config_compares_every_metric() -> None:
    cfg = _configs()["every-metric"]
    assert {s.metric for s in cfg.fields} >= {"token_set", "jaccard", "jaro_winkler", "levenshtein", "exact", "geo",
                                                "price"}


def test_side_values_are_computed_once() -> None:
    f = {"title": "Sony Bravia KDL-40V4100 40' LCD TV", "body": "Full HD", "price": "499.00"}
    side = Side(f, compute_signature(f).to_document())
    first = side.identifier_set("models", True)
    assert side.identifier_set("models", True) is first
    assert "kdl40v4100" in first
    assert side.price() == 499.0
    assert side.text("title") == "sony bravia kdl 40v4100 40  lcd tv"
