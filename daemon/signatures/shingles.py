"""Shingles: word n-grams and sentence shingles hashed to 64 bits with XXH3-64 (seedable).

A word n-gram is the ``n`` consecutive tokens joined by one space; a sentence shingle is the tokens of
one sentence joined by one space. Each is hashed with :func:`daemon.signatures._hashing.hash64`, so
results are identical across processes and machines.
"""

from __future__ import annotations

import numpy as np

from ._hashing import hash_tokens


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
