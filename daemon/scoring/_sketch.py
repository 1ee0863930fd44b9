"""Sketch comparisons (fallback copies until ``daemon.signatures`` provides them).

Pure functions over the serialised signature's ``simhash``, ``minhash`` and ``bottomk`` values.
"""

from __future__ import annotations

from collections.abc import Sequence

_MASK64 = (1 << 64) - 1


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit simhashes (signed or unsigned ints), 0-64."""
    return ((a ^ b) & _MASK64).bit_count()


def jaccard_from_minhash(a: Sequence[int], b: Sequence[int]) -> float:
    """Jaccard estimate from two MinHash vectors: the fraction of equal positions (Broder 1997).

    Raises:
        ValueError: when the vectors are empty or of different lengths.
    """
    if not a or len(a) != len(b):
        raise ValueError(f"minhash vectors must be non-empty and equally long ({len(a)} vs {len(b)})")
    return sum(1 for x, y in zip(a, b) if x == y) / len(a)


def bottomk_jaccard(a: Sequence[int], b: Sequence[int]) -> float:
    """Jaccard estimate from two bottom-k sketches (sorted ascending, distinct values).

    Broder's estimator: with ``k = min(len(a), len(b))`` and ``U`` the k smallest values of
    ``a ∪ b``, the estimate is ``|U ∩ a ∩ b| / |U|``. Exact when both sketches hold every shingle.
    Returns 0.0 when either sketch is empty.
    """
    k = min(len(a), len(b))
    if k == 0:
        return 0.0
    sa, sb = set(a), set(b)
    union_k = sorted(sa | sb)[:k]
    return sum(1 for h in union_k if h in sa and h in sb) / len(union_k)
