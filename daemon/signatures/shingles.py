"""Shingles: word n-grams and sentence shingles hashed to 64 bits (seedable, identical on every machine).

Two ways to a word n-gram hash:

* :func:`word_ngrams` + :func:`shingle_hashes`: XXH3-64 of the n-gram string (tokens joined by a space);
* :func:`ngram_hashes` (what :func:`~daemon.signatures.compute_signature` uses): each token is hashed
  once with XXH3-64 (the same hashes feed the simhash) and the ``n`` token hashes of a gram are combined
  as ``fmix64(h_0·K^n + h_1·K^(n-1) + … + h_(n-1)·K)`` mod 2**64 (``K`` odd; ``fmix64``: MurmurHash3's
  64-bit finaliser, a bijection with full avalanche), vectorised over all grams with numpy.
  Order-sensitive; distinct grams of random 64-bit token hashes collide with probability ~2**-64.

A sentence shingle is the tokens of one sentence joined by a space, hashed with XXH3-64.
"""

from __future__ import annotations

import numpy as np

from ._hashing import fmix64, hash_tokens
from ._ragged import offsets_of, segment_ids, segment_unique


def word_ngrams(toks: list[str], n: int = 3) -> list[str]:
    """Word n-grams of a token list (w-shingling, Broder 1997).

    Args:
        toks: tokens in text order.
        n: shingle width in words (≥ 1).
    Returns:
        ``len(toks) - n + 1`` strings; a non-empty text shorter than ``n`` words gives one shingle
        (all its tokens), an empty token list gives ``[]``.
    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not toks:
        return []
    if n == 1:
        return list(toks)
    if len(toks) <= n:
        return [" ".join(toks)]
    return [" ".join(toks[i : i + n]) for i in range(len(toks) - n + 1)]


_K = np.uint64(0x9E3779B97F4A7C15)


def ngram_hashes(token_hashes: np.ndarray, n: int = 3) -> np.ndarray:
    """Distinct 64-bit hashes of the word n-grams of a token sequence, from its token hashes.

    Args:
        token_hashes: uint64 array ``(m,)``: XXH3-64 of each token in text order (``hash_tokens``).
        n: gram width (≥ 1). A sequence shorter than ``n`` (but not empty) gives one gram of all tokens.
    Returns:
        Sorted distinct uint64 array; empty for ``m == 0``; for ``n == 1`` the distinct token hashes.
    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    m = int(token_hashes.shape[0])
    if m == 0:
        return np.empty(0, dtype=np.uint64)
    h = token_hashes.astype(np.uint64, copy=False)
    width = min(n, m)
    count = m - width + 1
    if width == 1:
        return np.unique(h)
    acc = h[:count] * _K  # Horner: ((h0*K + h1)*K + h2)..., then one finaliser
    for j in range(1, width):
        acc += h[j : j + count]
        if j < width - 1:
            acc *= _K
    return np.unique(fmix64(acc))


def shingle_hashes(shingles: list[str], seed: int = 0) -> np.ndarray:
    """Distinct 64-bit hashes of shingles.

    Returns:
        ``np.ndarray`` uint64 of the distinct XXH3-64 hashes, sorted ascending (shape ``(m,)``, m ≤ len).
    """
    if not shingles:
        return np.empty(0, dtype=np.uint64)
    return np.unique(hash_tokens(shingles, seed))


def sentence_shingles(sentence_tokens: list[list[str]]) -> list[str]:
    """One shingle per sentence: its tokens joined by a space (empty sentences dropped, duplicates kept).

    Args:
        sentence_tokens: the tokens of each sentence (see :func:`daemon.signatures.text.sentences`).
    Returns:
        ``list[str]``, one per non-empty sentence.
    """
    return [" ".join(t) for t in sentence_tokens if t]


def ngram_hashes_many(token_hashes: np.ndarray, offsets: np.ndarray, n: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ngram_hashes` of every record of a batch at once, bit for bit the same.

    The Horner combination runs once over the concatenated token hashes; grams that would span two
    records are dropped, a record shorter than ``n`` (but not empty) gets its one gram of all its
    tokens, and each record's grams are then sorted and deduplicated (:func:`segment_unique`).

    Args:
        token_hashes: uint64 array ``(T,)``: the token hashes of all records, record after record.
        offsets: int64 ``(N + 1,)``: record ``r`` owns ``token_hashes[offsets[r]:offsets[r + 1]]``.
        n: gram width (≥ 1).
    Returns:
        ``(grams, gram_offsets)``: a ragged uint64 array (see :mod:`daemon.signatures._ragged`) whose
        record ``r`` is ``ngram_hashes(token_hashes[offsets[r]:offsets[r + 1]], n)``.
    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    h = token_hashes.astype(np.uint64, copy=False)
    total = int(h.shape[0])
    lengths = np.diff(offsets)
    parts: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    if n == 1:
        parts.append(h)
        owners.append(segment_ids(offsets))
    else:
        count = total - n + 1
        if count > 0:  # every window of n tokens, then keep those inside one record
            acc = h[:count] * _K
            for j in range(1, n):
                acc += h[j : j + count]
                if j < n - 1:
                    acc *= _K
            seg = segment_ids(offsets)[:count]
            inside = np.arange(count, dtype=np.int64) - offsets[seg] <= lengths[seg] - n
            parts.append(fmix64(acc[inside]))
            owners.append(seg[inside])
        for width in range(1, n):  # records shorter than n: one gram of all their tokens
            short = np.flatnonzero(lengths == width)
            if short.size == 0:
                continue
            start = offsets[short]
            if width == 1:
                parts.append(h[start])
            else:
                acc = h[start] * _K
                for j in range(1, width):
                    acc += h[start + j]
                    if j < width - 1:
                        acc *= _K
                parts.append(fmix64(acc))
            owners.append(short)
    if not parts:
        return np.empty(0, dtype=np.uint64), np.zeros_like(offsets)
    seg_all = np.concatenate(owners)
    order = np.argsort(seg_all, kind="stable")
    values = np.concatenate(parts)[order]
    counts = np.bincount(seg_all, minlength=len(offsets) - 1)
    return segment_unique(values, offsets_of(counts))
