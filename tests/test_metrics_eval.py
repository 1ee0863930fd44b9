"""Tests of daemon.evaluation.measures on small hand-computed examples."""

from __future__ import annotations

import pytest

from daemon.evaluation.measures import (
    PRF, adjusted_rand_index, bcubed, clusters_from_pairs, normalise_pairs, pair_prf,
    transitive_closure,
)


def test_pair_prf_unordered() -> None:
    pred = [(1, 2), (3, 4), (5, 6), (2, 1)]
    true = [(2, 1), (4, 3), (7, 8), (9, 10)]
    r = pair_prf(pred, true)  # tp = 2 of 3 predicted, of 4 true
    assert r.precision == pytest.approx(2 / 3)
    assert r.recall == pytest.approx(0.5)
    assert r.f1 == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert pair_prf([], []) == PRF(1.0, 1.0, 1.0)
    assert pair_prf([], [(1, 2)]).f1 == 0.0
    assert normalise_pairs([(1, 1), (1, 2)]) == {frozenset((1, 2))}


def test_transitive_closure_and_components() -> None:
    closure = transitive_closure([("a", "b"), ("b", "c"), ("x", "y")])
    assert closure == {frozenset(p) for p in [("a", "b"), ("b", "c"), ("a", "c"), ("x", "y")]}
    labels = clusters_from_pairs([("a", "b"), ("b", "c"), ("x", "y")])
    assert labels["a"] == labels["b"] == labels["c"] != labels["x"] == labels["y"]


def test_bcubed_hand_computed() -> None:
    # true: {1,2,3} {4,5}; pred: {1,2} {3,4,5}
    true = {1: "A", 2: "A", 3: "A", 4: "B", 5: "B"}
    pred = {1: "x", 2: "x", 3: "y", 4: "y", 5: "y"}
    # precision per item: 1:1, 2:1, 3:1/3, 4:2/3, 5:2/3 -> 11/15
    # recall per item:    1:2/3, 2:2/3, 3:1/3, 4:1, 5:1 -> 11/15
    r = bcubed(pred, true)
    assert r.precision == pytest.approx(11 / 15) and r.recall == pytest.approx(11 / 15)
    assert bcubed(true, true) == PRF(1.0, 1.0, 1.0)
    # an item missing from pred is a singleton there: pred {1,2} only, true {1,2,3}
    r2 = bcubed({1: 0, 2: 0}, {1: 0, 2: 0, 3: 0})
    assert r2.precision == 1.0 and r2.recall == pytest.approx((2 / 3 + 2 / 3 + 1 / 3) / 3)


def test_ari_hand_computed() -> None:
    true = {1: "A", 2: "A", 3: "A", 4: "B", 5: "B"}
    pred = {1: "x", 2: "x", 3: "y", 4: "y", 5: "y"}
    # contingency: (x,A)=2 (y,A)=1 (y,B)=2 -> index = 1 + 0 + 1 = 2
    # rows: x=2, y=3 -> 1 + 3 = 4; cols: A=3, B=2 -> 3 + 1 = 4; C(5,2) = 10
    # expected = 4*4/10 = 1.6; max = 4; ARI = (2 - 1.6) / (4 - 1.6) = 1/6
    assert adjusted_rand_index(pred, true) == pytest.approx(1 / 6)
    assert adjusted_rand_index(true, true) == 1.0
    # all singletons vs all singletons: degenerate, identical
    assert adjusted_rand_index({}, {1: "a", 2: "b"}) == 1.0
    swapped = {1: "B", 2: "B", 3: "B", 4: "A", 5: "A"}
    assert adjusted_rand_index(swapped, true) == 1.0
