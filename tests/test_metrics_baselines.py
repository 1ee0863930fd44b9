"""Tests of daemon.evaluation.baselines on tiny hand-made data."""

from __future__ import annotations

from daemon.evaluation.baselines import (
    levenshtein_title_pairs, minhash_lsh_pairs, simhash_pairs, tune_minhash_lsh, word_shingles,
)

BODY = (
    "Selling my mountain bike in very good condition, 21 gears, new tyres and brakes, "
    "aluminium frame, size M, pick up only in the north of the city, cash preferred"
)
RECORDS = [
    (1, "Mountain bike 21 gears size M", BODY),
    (2, "Mountain bike 21 gears size M", BODY),  # exact repost
    (3, "Mountain bike 21 gear size M!", BODY + " please"),  # near repost
    (4, "Sofa three seats grey fabric", "Comfortable grey sofa, three seats, no stains, must go this week."),
    (5, "Kitchen table with four chairs", "Solid oak table and four matching chairs, minor scratches."),
    (6, None, None),
]
DUPS = {frozenset((1, 2)), frozenset((1, 3)), frozenset((2, 3))}


def test_word_shingles() -> None:
    assert word_shingles("A b", "c d") == {"a b c", "b c d"}
    assert word_shingles("short", None) == {"short"}
    assert word_shingles(None, None) == set()


def test_minhash_lsh_finds_reposts_only() -> None:
    pairs = minhash_lsh_pairs(RECORDS, threshold=0.5)
    assert frozenset((1, 2)) in pairs and frozenset((1, 3)) in pairs
    assert all(p <= {1, 2, 3} for p in pairs)
    best, prf, table = tune_minhash_lsh(RECORDS, DUPS, thresholds=(0.3, 0.5, 0.9))
    assert best in table and prf.f1 == max(r.f1 for r in table.values()) and prf.f1 >= 0.8


def test_simhash_pairs() -> None:
    pairs = simhash_pairs(RECORDS, max_distance=3)
    assert frozenset((1, 2)) in pairs
    assert all(p <= {1, 2, 3} for p in pairs)


def test_levenshtein_title_pairs() -> None:
    pairs = levenshtein_title_pairs(RECORDS, threshold=0.8)
    assert pairs == DUPS
    assert levenshtein_title_pairs(RECORDS[:1]) == set()
