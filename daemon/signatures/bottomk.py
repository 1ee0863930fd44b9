"""Bottom-k sketches (Broder 1997; Cohen & Kaplan, PODC 2007) with a merge-based early-exit comparison.

A sketch is the ``k`` smallest distinct element hashes of a set, sorted ascending. Hashes are the
64-bit XXH3 shingle hashes shifted right by one bit (63 bits), so every value fits a signed int64.
The Jaccard estimate takes the ``k`` smallest values of the union of the two sketches and counts the
fraction found in both (Broder's estimator). This is the "sorted signature, merge-compare with early
exit" of the realtime news filter in the seeds (there with CRC32 sentence shingles).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Iterator, Sequence

import numpy as np

from ._ragged import head, segment_unique, split_lists

DEFAULT_K = 64


def bottomk_sketch(hashes: np.ndarray, k: int = DEFAULT_K) -> list[int]:
    """The ``k`` smallest distinct values of ``hashes >> 1``, ascending.

    Args:
        hashes: uint64 array ``(n,)`` of element hashes.
        k: sketch size (≥ 1).
    Returns:
        ``list[int]`` of ``min(k, distinct)`` values in ``[0, 2**63)``; ``[]`` for no elements.
    Raises:
        ValueError: ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if hashes.size == 0:
        return []
    vals = np.unique(hashes.astype(np.uint64, copy=False) >> np.uint64(1))
    return vals[:k].astype(np.int64).tolist()


def bottomk_many(hashes: np.ndarray, offsets: np.ndarray, k: int = DEFAULT_K) -> list[list[int]]:
    """:func:`bottomk_sketch` of every record of a batch (same values), with a few numpy calls per batch.

    Args:
        hashes: uint64 array ``(T,)`` of element hashes, record after record.
        offsets: int64 ``(N + 1,)``: record ``r`` owns ``hashes[offsets[r]:offsets[r + 1]]``.
        k: sketch size (≥ 1).
    Returns:
        One sorted ``list[int]`` of ``min(k, distinct)`` values in ``[0, 2**63)`` per record.
    Raises:
        ValueError: ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    shifted, shifted_offsets = segment_unique(hashes.astype(np.uint64, copy=False) >> np.uint64(1), offsets)
    values, value_offsets = head(shifted, shifted_offsets, k)
    return split_lists(values.astype(np.int64), value_offsets)


def _sample_bound(a: Sequence[int], b: Sequence[int], k: int) -> float:
    """Largest value the union sample may contain: below the last value of any truncated (full) sketch."""
    bound = float("inf")
    if len(a) >= k:
        bound = min(bound, a[k - 1])
    if len(b) >= k:
        bound = min(bound, b[k - 1])
    return bound


def _union_sample(a: Sequence[int], b: Sequence[int], k: int) -> Iterator[bool]:
    """Merge two sorted sketches; yield, for each value of the union sample in ascending order, whether
    it is in both. Stops after ``k`` values or past the bound of :func:`_sample_bound`."""
    bound = _sample_bound(a, b, k)
    i = j = taken = 0
    la, lb = len(a), len(b)
    while taken < k:
        if i < la and (j >= lb or a[i] <= b[j]):
            v = a[i]
            shared = j < lb and v == b[j]
            i += 1
            j += shared
        elif j < lb:
            v = b[j]
            shared = False
            j += 1
        else:
            return
        if v > bound:
            return
        taken += 1
        yield shared


def bottomk_jaccard(a: Sequence[int], b: Sequence[int], k: int = DEFAULT_K) -> float:
    """Broder's bottom-k Jaccard estimate from two sorted sketches.

    A sketch shorter than ``k`` holds its whole set. The sample is the ``k`` smallest values of the
    union that lie at or below the ``k``-th value of every full sketch (beyond it a full sketch cannot
    tell membership); the estimate is the fraction of the sample present in both sketches. When both
    sets have fewer than ``k`` elements this is the exact Jaccard.

    Args:
        a, b: sorted ascending distinct ints (as from :func:`bottomk_sketch`), same ``k``.
        k: the sketch size they were built with.
    Returns:
        float in ``[0, 1]``; ``0.0`` when either sketch is empty.
    """
    if not a or not b:
        return 0.0
    taken = both = 0
    for shared in _union_sample(a, b, k):
        taken += 1
        both += shared
    return both / taken if taken else 0.0


def bottomk_similar(a: Sequence[int], b: Sequence[int], threshold: float, k: int = DEFAULT_K) -> bool:
    """Whether ``bottomk_jaccard(a, b, k) >= threshold``, merging the sorted sketches with early exit.

    Let ``m_max = min(k, #a≤bound + #b≤bound)`` bound the sample size. After ``p`` sampled values with
    ``c`` in both, the answer is already **yes** when ``c / m_max ≥ threshold`` (later values can only add
    matches, and a smaller sample only raises the ratio) and already **no** when
    ``(m_max - (p - c)) / m_max < threshold`` (the mismatches so far cannot be outweighed). Both tests
    compare correctly rounded quotients of integers, so the answer agrees exactly with
    :func:`bottomk_jaccard` (seeds: realtime news filter with early-exit merge; Broder 1997 estimator).

    Args:
        a, b: sorted sketches; threshold: Jaccard threshold in ``[0, 1]``; k: sketch size.
    Returns:
        bool; ``False`` when either sketch is empty.
    Raises:
        ValueError: threshold outside ``[0, 1]``.
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    if not a or not b:
        return False
    bound = _sample_bound(a, b, k)
    if bound != float("inf"):
        m_max = min(k, bisect_right(a, bound) + bisect_right(b, bound))
    else:
        m_max = min(k, len(a) + len(b))
    taken = both = 0
    for shared in _union_sample(a, b, k):
        taken += 1
        both += shared
        if both / m_max >= threshold:
            return True
        if (m_max - (taken - both)) / m_max < threshold:
            return False
    return (both / taken if taken else 0.0) >= threshold
