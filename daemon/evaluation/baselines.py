"""Baseline near-duplicate detectors to compare the scorer against (in memory, no I/O).

Each takes ``records: list[(id, title, body)]`` (title/body str or None) and returns a set of
predicted unordered pairs (``frozenset({id_a, id_b})``):

1. :func:`minhash_lsh_pairs`: ``datasketch.MinHashLSH`` over word 3-shingles of title+body
   (Broder 1997; Indyk & Motwani 1998 for LSH), with :func:`tune_minhash_lsh` to pick the best
   threshold *on the same labelled data* (an optimistic figure, for the baseline only);
2. :func:`simhash_pairs`: the ``simhash`` package's 64-bit fingerprints of title+body words,
   pairs within Hamming distance 3 (Charikar 2002; Manku, Jain & Das Sarma 2007), brute force;
3. :func:`levenshtein_title_pairs`: rapidfuzz ``fuzz.ratio`` on titles >= threshold, like the
   marketplace stored procedure of seed 003, all pairs via ``rapidfuzz.process.cdist``.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Sequence

import numpy as np
from datasketch import MinHash, MinHashLSH
from rapidfuzz import fuzz, process
from rapidfuzz.utils import default_process
from simhash import Simhash

from daemon.evaluation.measures import PRF, pair_prf

Record = tuple[Hashable, str | None, str | None]
_WORD = re.compile(r"\w+", re.UNICODE)


def _words(title: str | None, body: str | None) -> list[str]:
    return _WORD.findall(" ".join(x for x in (title, body) if x).casefold())


def word_shingles(title: str | None, body: str | None, k: int = 3) -> set[str]:
    """Word k-shingles (space-joined) of case-folded title+body; a shorter text is one shingle."""
    words = _words(title, body)
    if not words:
        return set()
    if len(words) < k:
        return {" ".join(words)}
    return {" ".join(words[i : i + k]) for i in range(len(words) - k + 1)}


def minhash_lsh_pairs(
    records: Sequence[Record], threshold: float = 0.5, num_perm: int = 128, seed: int = 1
) -> set[frozenset]:
    """Pairs whose MinHash LSH buckets collide (datasketch ``MinHashLSH``, estimated Jaccard of
    word 3-shingles around ``threshold``; LSH gives candidates, they are not verified).

    Args:
        records: ``(id, title, body)``; records without words are skipped.
        threshold: Jaccard threshold (0-1, exclusive) the LSH bands are tuned for.
        num_perm: MinHash permutations.
        seed: MinHash seed (deterministic output).
    Returns:
        Set of ``frozenset({id_a, id_b})``.
    """
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    sketches = []
    for rid, title, body in records:
        sh = word_shingles(title, body)
        if not sh:
            continue
        mh = MinHash(num_perm=num_perm, seed=seed)
        mh.update_batch([s.encode("utf-8") for s in sh])
        lsh.insert(rid, mh)
        sketches.append((rid, mh))
    pairs = set()
    for rid, mh in sketches:
        for other in lsh.query(mh):
            if other != rid:
                pairs.add(frozenset((rid, other)))
    return pairs


def tune_minhash_lsh(
    records: Sequence[Record], true_pairs: Iterable[Iterable[Hashable]],
    thresholds: Iterable[float] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    keep: object = None,
) -> tuple[float, PRF, dict[float, PRF]]:
    """Try MinHash LSH thresholds and report the best pair F1 against ``true_pairs``.

    Tuned on the data it is scored on, so the figure is an upper bound for this baseline.

    Args:
        records: ``(id, title, body)``.
        true_pairs: true duplicate pairs.
        thresholds: LSH thresholds to try (each in (0, 1)).
        keep: optional predicate ``keep(pair) -> bool`` applied to predicted pairs before scoring
            (e.g. only cross-source pairs for a record-linkage data set).
    Returns:
        ``(best_threshold, best PRF, {threshold: PRF})``.
    """
    gold = list(true_pairs)
    results: dict[float, PRF] = {}
    for th in thresholds:
        pred = minhash_lsh_pairs(records, threshold=th)
        if callable(keep):
            pred = {p for p in pred if keep(p)}
        results[th] = pair_prf(pred, gold)
    best = max(results, key=lambda t: (results[t].f1, -t))
    return best, results[best], results


def _unsigned_popcount(x: np.ndarray) -> np.ndarray:
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x)
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))  # pragma: no cover - old numpy
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


def simhash_pairs(records: Sequence[Record], max_distance: int = 3) -> set[frozenset]:
    """Pairs whose 64-bit simhashes (``simhash.Simhash`` over case-folded title+body words)
    differ in at most ``max_distance`` bits; brute force over all pairs (vectorised, fine for a
    few thousand records).

    Returns:
        Set of ``frozenset({id_a, id_b})``; records without words are skipped.
    """
    ids, values = [], []
    for rid, title, body in records:
        words = _words(title, body)
        if words:
            ids.append(rid)
            values.append(Simhash(words).value)
    arr = np.array(values, dtype=np.uint64)
    pairs = set()
    for i in range(len(arr) - 1):
        d = _unsigned_popcount(arr[i + 1 :] ^ arr[i])
        for j in np.nonzero(d <= max_distance)[0]:
            pairs.add(frozenset((ids[i], ids[i + 1 + int(j)])))
    return pairs


def levenshtein_title_pairs(records: Sequence[Record], threshold: float = 0.8) -> set[frozenset]:
    """Pairs whose titles have rapidfuzz ``fuzz.ratio`` (normalised Indel similarity, 0-100, on
    rapidfuzz-processed titles) >= ``threshold * 100``; all pairs with ``process.cdist``.

    Args:
        records: ``(id, title, body)``; records without a title are skipped.
        threshold: similarity fraction in [0, 1] (0.8 = ratio 80).
    Returns:
        Set of ``frozenset({id_a, id_b})``.
    """
    kept = [(rid, t) for rid, t, _ in records if t and default_process(t)]
    if len(kept) < 2:
        return set()
    titles = [default_process(t) for _, t in kept]
    m = process.cdist(titles, titles, scorer=fuzz.ratio, score_cutoff=threshold * 100, dtype=np.uint8)
    ii, jj = np.nonzero(np.triu(m, k=1) >= threshold * 100)
    return {frozenset((kept[i][0], kept[j][0])) for i, j in zip(ii.tolist(), jj.tolist())}
