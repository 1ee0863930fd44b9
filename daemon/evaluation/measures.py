"""Evaluation metrics for duplicate detection: pairwise, B-cubed and adjusted Rand index.

Pairs are unordered: ``(a, b)`` and ``(b, a)`` are the same pair (held as ``frozenset``).
Cluster assignments map item -> cluster label; an item present in only one assignment counts as
a singleton in the other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from math import comb

from daemon.dedup.clusters import UnionFind

Pair = frozenset


@dataclass(frozen=True, slots=True)
class PRF:
    """Precision, recall and F1 (harmonic mean), each in [0, 1]."""

    precision: float
    recall: float
    f1: float

    def __str__(self) -> str:
        return f"P={self.precision:.3f} R={self.recall:.3f} F1={self.f1:.3f}"


def _prf(p: float, r: float) -> PRF:
    return PRF(p, r, 0.0 if p + r == 0 else 2 * p * r / (p + r))


def normalise_pairs(pairs: Iterable[Iterable[Hashable]]) -> set[Pair]:
    """Unordered pair set: each ``(a, b)`` -> ``frozenset({a, b})``; self pairs are dropped."""
    out = set()
    for p in pairs:
        fs = frozenset(p)
        if len(fs) == 2:
            out.add(fs)
    return out


def pair_prf(predicted: Iterable[Iterable[Hashable]], true: Iterable[Iterable[Hashable]]) -> PRF:
    """Pairwise precision/recall/F1 of predicted duplicate pairs against true pairs.

    Args:
        predicted, true: iterables of 2-item pairs (tuples or frozensets), order ignored.
    Returns:
        :class:`PRF`; precision is 1.0 when nothing is predicted, recall 1.0 when nothing is true.
    """
    pred, gold = normalise_pairs(predicted), normalise_pairs(true)
    tp = len(pred & gold)
    return _prf(tp / len(pred) if pred else 1.0, tp / len(gold) if gold else 1.0)


def _components(pairs: Iterable[Iterable[Hashable]]) -> list[list[Hashable]]:
    uf = UnionFind()
    for p in normalise_pairs(pairs):
        uf.union(*tuple(p))
    return list(uf.components().values())


def transitive_closure(pairs: Iterable[Iterable[Hashable]]) -> set[Pair]:
    """All pairs implied by transitivity: every two items of a connected component of ``pairs``.

    Example: ``{a-b, b-c}`` -> ``{a-b, b-c, a-c}``.
    """
    return {frozenset((a, b)) for g in _components(pairs) for i, a in enumerate(g) for b in g[i + 1 :]}


def clusters_from_pairs(pairs: Iterable[Iterable[Hashable]]) -> dict[Hashable, int]:
    """Item -> component label (0, 1, ...) of the graph of ``pairs`` (items in no pair are absent)."""
    return {x: label for label, g in enumerate(_components(pairs)) for x in g}


def _full(pred: Mapping[Hashable, Hashable], true: Mapping[Hashable, Hashable]) -> tuple[dict, dict]:
    items = set(pred) | set(true)
    p = {x: ("c", pred[x]) if x in pred else ("s", x) for x in items}
    t = {x: ("c", true[x]) if x in true else ("s", x) for x in items}
    return p, t


def bcubed(pred: Mapping[Hashable, Hashable], true: Mapping[Hashable, Hashable]) -> PRF:
    """B-cubed precision/recall/F1 of a clustering (Bagga & Baldwin 1998, "Entity-based
    cross-document coreferencing using the vector space model", COLING-ACL).

    For each item e: precision(e) = |C(e) ∩ L(e)| / |C(e)|, recall(e) = |C(e) ∩ L(e)| / |L(e)|,
    with C(e) its predicted cluster and L(e) its true cluster (both containing e); the figures are
    the means over all items of the union of both assignments (missing items are singletons).

    Args:
        pred, true: item -> cluster label.
    Returns:
        :class:`PRF` (1.0/1.0 for two empty assignments).
    """
    p, t = _full(pred, true)
    if not p:
        return PRF(1.0, 1.0, 1.0)
    joint = Counter((p[x], t[x]) for x in p)
    size_p, size_t = Counter(p.values()), Counter(t.values())
    prec = sum(joint[(p[x], t[x])] / size_p[p[x]] for x in p) / len(p)
    rec = sum(joint[(p[x], t[x])] / size_t[t[x]] for x in p) / len(p)
    return _prf(prec, rec)


def adjusted_rand_index(pred: Mapping[Hashable, Hashable], true: Mapping[Hashable, Hashable]) -> float:
    """Adjusted Rand index of two clusterings (Hubert & Arabie 1985, "Comparing partitions",
    Journal of Classification 2:193-218), over the union of items (missing items are singletons).

    ``ARI = (Σ C(n_ij,2) - E) / (½(Σ C(a_i,2) + Σ C(b_j,2)) - E)`` with
    ``E = Σ C(a_i,2) Σ C(b_j,2) / C(n,2)``. Returns 1.0 for identical partitions (including the
    degenerate cases where the denominator is 0), about 0 for independent ones, and can be < 0.
    """
    p, t = _full(pred, true)
    n = len(p)
    if n < 2:
        return 1.0
    index = sum(comb(c, 2) for c in Counter((p[x], t[x]) for x in p).values())
    sum_a = sum(comb(c, 2) for c in Counter(p.values()).values())
    sum_b = sum(comb(c, 2) for c in Counter(t.values()).values())
    expected = sum_a * sum_b / comb(n, 2)
    max_index = (sum_a + sum_b) / 2
    if max_index == expected:
        return 1.0
    return (index - expected) / (max_index - expected)
