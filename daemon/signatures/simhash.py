"""64-bit simhash (Charikar, STOC 2002) and the permuted-block keys of Manku, Jain & Das Sarma (WWW 2007).

Each feature is hashed to 64 bits; a 64-vector V adds the feature weight where the feature's bit i
is 1 and subtracts it where it is 0; bit i of the fingerprint is ``V[i] > 0``. Near-duplicate texts
differ in few bits. Computed with numpy: the feature hashes are unpacked to an ``(n, 64)`` bit matrix
and multiplied by the weight vector.

Features chosen by nearsync: the normalised unigrams of title + body with term-frequency weights
(optionally × an IDF table). Measured on ~100-word Abt-Buy descriptions, a one-word edit moves the
fingerprint by ~2 bits on average, whereas word 3-grams move it by ~5 (each edit changes 3 features).
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from itertools import combinations
from typing import Mapping

import numpy as np

from ._hashing import UINT64_MASK, hash_tokens

SIMHASH_BITS = 64


def simhash_from_hashes(hashes: np.ndarray, weights: np.ndarray | None = None) -> int:
    """Simhash of pre-hashed features.

    Args:
        hashes: uint64 array of shape ``(n,)``, one 64-bit hash per feature (a repeated hash counts once
            per occurrence, so passing every token occurrence with no weights is term-frequency weighting).
        weights: float array ``(n,)`` of feature weights (default 1.0 each).
    Returns:
        Unsigned 64-bit fingerprint (``[0, 2**64)``); ``0`` when ``n == 0``.
    Raises:
        ValueError: shapes differ.
    """
    n = int(hashes.shape[0])
    if n == 0:
        return 0
    if weights is not None and weights.shape != hashes.shape:
        raise ValueError(f"weights shape {weights.shape} != hashes shape {hashes.shape}")
    bits = np.unpackbits(hashes.astype("<u8", copy=False).view(np.uint8).reshape(n, 8), axis=1, bitorder="little")
    if weights is None:  # V[i] = ones - zeros = 2 * ones - n: integer bit counts, no float product
        positive = 2 * bits.sum(axis=0, dtype=np.int64) > n
    else:  # V = sum_i w_i * (2*bit - 1) = 2 * (w @ bits) - sum(w)
        positive = 2.0 * (weights @ bits) - weights.sum() > 0
    packed = np.packbits(positive, bitorder="little")
    return int(packed.view("<u8")[0])


SIMHASH_BATCH_ROWS = 65_536
"""Feature hashes unpacked at once by :func:`simhash_many` (a block of bits is 64 bytes per feature)."""


def simhash_many(hashes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """:func:`simhash_from_hashes` (no weights) of every record of a batch, bit for bit the same.

    Every feature occurrence adds 1 where its bit is set and subtracts 1 where it is clear
    (Charikar 2002, term-frequency weights): per record, bit ``i`` is set when more than half of its
    features have bit ``i`` set. The bits of consecutive records are unpacked as one block and
    counted per record with ``np.add.reduceat``.

    Args:
        hashes: uint64 array ``(T,)`` of feature hashes, record after record.
        offsets: int64 ``(N + 1,)``: record ``r`` owns ``hashes[offsets[r]:offsets[r + 1]]``.
    Returns:
        uint64 array ``(N,)`` of fingerprints (``0`` for an empty record).
    """
    records = len(offsets) - 1
    out = np.zeros(records, dtype=np.uint64)
    h = hashes.astype("<u8", copy=False)
    bounds = offsets.tolist()
    first = 0
    while first < records:
        last = first + 1
        while last < records and bounds[last + 1] - bounds[first] <= SIMHASH_BATCH_ROWS:
            last += 1
        lo, hi = bounds[first], bounds[last]
        if hi > lo:
            sizes = np.diff(offsets[first : last + 1])
            rows = np.flatnonzero(sizes)
            bits = np.unpackbits(h[lo:hi].view(np.uint8).reshape(hi - lo, 8), axis=1, bitorder="little")
            ones = np.add.reduceat(bits, offsets[rows + first] - lo, axis=0, dtype=np.int64)
            positive = 2 * ones > sizes[rows, None]
            out[rows + first] = np.packbits(positive, axis=1, bitorder="little").view("<u8")[:, 0]
        first = last
    return out


def simhash(features: list[str], seed: int = 0, idf: Mapping[str, float] | None = None) -> int:
    """Simhash of a list of string features, term-frequency weighted (Charikar 2002; Manku et al. 2007).

    Args:
        features: tokens (duplicates count as term frequency).
        seed: XXH3-64 seed for hashing features.
        idf: optional token → IDF weight table; the weight becomes ``tf * idf.get(token, 1.0)``.
    Returns:
        Unsigned 64-bit fingerprint; ``0`` for no features.
    """
    if not features:
        return 0
    counts = Counter(features)
    names = list(counts)
    tf = np.fromiter(counts.values(), dtype=np.float64, count=len(names))
    if idf is not None:
        tf = tf * np.fromiter((float(idf.get(t, 1.0)) for t in names), dtype=np.float64, count=len(names))
    return simhash_from_hashes(hash_tokens(names, seed), tf)


def hamming(a: int, b: int) -> int:
    """Hamming distance in bits between two 64-bit fingerprints (signed or unsigned int64 accepted).

    Returns:
        int in ``[0, 64]``.
    """
    return ((a ^ b) & UINT64_MASK).bit_count()


@lru_cache(maxsize=64)
def _block_layout(blocks: int, max_distance: int) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, ...], ...]]:
    if not 1 <= blocks <= SIMHASH_BITS:
        raise ValueError(f"blocks must be in 1..64, got {blocks}")
    if not 0 <= max_distance < blocks:
        raise ValueError(f"max_distance must be in 0..blocks-1, got {max_distance}")
    base, extra = divmod(SIMHASH_BITS, blocks)
    spans: list[tuple[int, int]] = []
    start = 0
    for i in range(blocks):
        width = base + (1 if i < extra else 0)
        spans.append((start, width))
        start += width
    tables = tuple(combinations(range(blocks), blocks - max_distance))
    return tuple(spans), tables


def block_count(blocks: int, max_distance: int) -> int:
    """Number of keys (tables) :func:`block_keys` returns: ``C(blocks, blocks - max_distance)``."""
    return len(_block_layout(blocks, max_distance)[1])


def block_keys(fingerprint: int, blocks: int = 4, max_distance: int = 3) -> list[str]:
    """Candidate keys for the permuted-table lookup of Manku, Jain & Das Sarma (WWW 2007, §3).

    The 64 bits are cut into ``blocks`` contiguous blocks (widths differ by at most one bit). Two
    fingerprints within Hamming distance ``k = max_distance`` differ in at most ``k`` blocks, so they
    agree on at least ``blocks - k`` whole blocks (pigeonhole); one key is emitted for every choice of
    ``blocks - k`` blocks, hence every pair within distance ``k`` shares at least one key (recall 1 at
    distance ≤ k, none guaranteed beyond).

    Trade-off: ``blocks=4, k=3`` gives 4 keys of 16 bits: cheap to store, but a random fingerprint
    collides with probability ~4/2**16 per record, so an index of N records yields ~N/16384 spurious
    candidates per lookup. ``blocks=6, k=3`` gives C(6,3)=20 keys of ~32 bits: 5× the keys but
    ~20/2**32 spurious collisions per record (Manku et al.'s preferred regime for billions of pages).

    Args:
        fingerprint: 64-bit simhash (signed or unsigned).
        blocks: number of blocks (1–64).
        max_distance: Hamming distance ``k`` that must always yield a shared key (0 ≤ k < blocks).
    Returns:
        ``C(blocks, blocks - k)`` strings ``"s{table}:{hex}"``, ``hex`` the concatenated bits of the
        chosen blocks.
    Raises:
        ValueError: invalid layout.
    """
    spans, tables = _block_layout(blocks, max_distance)
    fp = fingerprint & UINT64_MASK
    values = [(fp >> start) & ((1 << width) - 1) for start, width in spans]
    out: list[str] = []
    for t, chosen in enumerate(tables):
        key = 0
        nbits = 0
        for i in chosen:
            key = (key << spans[i][1]) | values[i]
            nbits += spans[i][1]
        out.append(f"s{t}:{key:0{(nbits + 3) // 4}x}")
    return out


def block_keys_many(fingerprints: np.ndarray, blocks: int = 4, max_distance: int = 3) -> list[list[str]]:
    """:func:`block_keys` of many fingerprints, the block values cut with numpy (same keys, same order).

    Args:
        fingerprints: uint64 array ``(N,)`` (unsigned simhashes).
        blocks, max_distance: as :func:`block_keys`.
    Returns:
        One list of ``C(blocks, blocks - k)`` keys per fingerprint.
    Raises:
        ValueError: invalid layout.
    """
    spans, tables = _block_layout(blocks, max_distance)
    fp = fingerprints.astype(np.uint64, copy=False)
    values = [(fp >> np.uint64(start)) & np.uint64((1 << width) - 1) for start, width in spans]
    columns: list[list[str]] = []
    for t, chosen in enumerate(tables):
        key = np.zeros_like(fp)
        nbits = 0
        for i in chosen:
            key = (key << np.uint64(spans[i][1])) | values[i]
            nbits += spans[i][1]
        prefix, digits = f"s{t}:", (nbits + 3) // 4
        columns.append([f"{prefix}{k:0{digits}x}" for k in key.tolist()])
    return [list(keys) for keys in zip(*columns)] if columns else [[] for _ in range(len(fp))]
