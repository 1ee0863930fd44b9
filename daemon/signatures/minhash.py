"""MinHash (Broder 1997) over 64-bit shingle hashes, vectorised with numpy.

Permutation ``i`` is the universal hash ``h_i(x) = (a_i * x + b_i) mod p`` with the Mersenne prime
``p = 2**61 - 1`` (the family datasketch's ``MinHash`` uses), applied to the full 64-bit XXH3 shingle
hash reduced mod ``p``. ``b_i ∈ [0, p)``; ``a_i`` is drawn from ``[1, 2**32)`` rather than ``[1, p)``:
the 93-bit product then takes two 64-bit multiplications instead of four (measured on 100 shingles ×
128 permutations: 87 µs against 245 µs; numpy has no vectorised 128-bit multiply). Since ``x`` is
itself a uniform 64-bit hash, ``a_i * x mod p`` is still uniform for every ``a_i ≠ 0``; the accuracy
is checked by the tests on real data (estimates within ±0.1 of exact Jaccard).

The product is reduced exactly with 32-bit limbs and ``2**61 ≡ 1 (mod p)``, so every value is in
``[0, p)`` and fits a signed int64 (Elasticsearch ``long``). The MinHash of a set is
``min_x h_i(x)`` for each ``i``; two sets agree at position ``i`` with probability equal to their
Jaccard similarity (Broder 1997; Leskovec, Rajaraman & Ullman, MMDS ch. 3).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

MERSENNE_61 = (1 << 61) - 1
MINHASH_EMPTY = MERSENNE_61
"""Value at every position of the MinHash of an empty set (never produced by a real element)."""

_P = np.uint64(MERSENNE_61)
_M32 = np.uint64(0xFFFFFFFF)
_M29 = np.uint64((1 << 29) - 1)
_S32 = np.uint64(32)
_S29 = np.uint64(29)
_S61 = np.uint64(61)


@lru_cache(maxsize=32)
def permutations(num_perm: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The ``(a, b)`` parameters of ``num_perm`` hash functions.

    Args:
        num_perm: number of hash functions (≥ 1).
        seed: ``[0, 2**32)``; the legacy ``numpy.random.RandomState`` stream is stable across numpy versions.
    Returns:
        ``(a, b)``: read-only uint64 column vectors of shape ``(num_perm, 1)``, ``a ∈ [1, 2**32)``,
        ``b ∈ [0, 2**61 - 1)``.
    Raises:
        ValueError: ``num_perm < 1`` or ``seed`` out of range.
    """
    if num_perm < 1:
        raise ValueError(f"num_perm must be >= 1, got {num_perm}")
    gen = np.random.RandomState(seed)
    a = gen.randint(1, 1 << 32, size=(num_perm, 1), dtype=np.uint64)
    b = gen.randint(0, MERSENNE_61, size=(num_perm, 1), dtype=np.uint64)
    a.flags.writeable = False
    b.flags.writeable = False
    return a, b


def minhash(hashes: np.ndarray, num_perm: int = 128, seed: int = 1) -> np.ndarray:
    """MinHash signature of a set of 64-bit element hashes.

    Args:
        hashes: uint64 array ``(n,)`` (duplicates allowed; any 64-bit values).
        num_perm: number of hash functions (signature length).
        seed: permutation seed (``[0, 2**32)``).
    Returns:
        int64 array ``(num_perm,)`` with values in ``[0, 2**61 - 1)``; all :data:`MINHASH_EMPTY` when ``n == 0``.
    Raises:
        ValueError: ``num_perm < 1`` or ``seed`` out of range.
    """
    if hashes.size == 0:
        return np.full(num_perm, MINHASH_EMPTY, dtype=np.int64)
    a, b = permutations(num_perm, seed)
    x = hashes.astype(np.uint64, copy=False)
    x = (x & _P) + (x >> _S61)  # x mod p, up to p + 7
    x = np.where(x >= _P, x - _P, x)
    ll = a * (x & _M32)  # < 2**64
    s = a * (x >> _S32)  # < 2**61; times 2**32 below
    tmp = s >> _S29  # s * 2**32 = (s >> 29) * 2**61 + (s & M29) * 2**32 ≡ (s >> 29) + (s & M29) << 32
    s &= _M29
    s <<= _S32
    s += tmp
    s += b
    np.right_shift(ll, _S61, out=tmp)  # ll ≡ (ll >> 61) + (ll & p)
    s += tmp
    ll &= _P
    s += ll  # < 2**63
    np.right_shift(s, _S61, out=tmp)
    s &= _P
    s += tmp  # < p + 4
    if (s >= _P).any():  # probability ~n * 2**-59: fold the last step exactly
        s = np.where(s >= _P, s - _P, s)
    return s.min(axis=1).astype(np.int64)


def jaccard_from_minhash(a: Sequence[int] | np.ndarray, b: Sequence[int] | np.ndarray) -> float:
    """Jaccard estimate: the fraction of positions where two MinHash signatures agree (Broder 1997).

    Args:
        a, b: MinHash signatures of the same length and parameters.
    Returns:
        float in ``[0, 1]``; ``0.0`` if either signature is the empty-set signature.
    Raises:
        ValueError: lengths differ or are zero.
    """
    va = np.asarray(a, dtype=np.int64)
    vb = np.asarray(b, dtype=np.int64)
    if va.shape != vb.shape or va.size == 0:
        raise ValueError(f"MinHash signatures must have the same non-zero length, got {va.size} and {vb.size}")
    if bool((va == MINHASH_EMPTY).all()) or bool((vb == MINHASH_EMPTY).all()):
        return 0.0
    return float(np.count_nonzero(va == vb)) / va.size
