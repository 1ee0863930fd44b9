"""LSH banding of MinHash signatures (Leskovec, Rajaraman & Ullman, *Mining of Massive Datasets*, ch. 3.4).

A signature of ``num_perm`` values is cut into ``b`` bands of ``r`` rows (``b * r ≤ num_perm``); two
records are candidates when all ``r`` rows of at least one band agree. For Jaccard similarity ``s``
the candidate probability is the S-curve ``P(s) = 1 - (1 - s**r)**b``. :func:`lsh_params` picks
``(b, r)`` for a target threshold like datasketch's ``MinHashLSH._optimal_param``: it minimises the
weighted area of false positives (``∫_0^t P(s) ds``) plus false negatives (``∫_t^1 1 - P(s) ds``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np
import xxhash

from ._hashing import hex16

_GRID = np.linspace(0.0, 1.0, 2001)


def s_curve(s: float | np.ndarray, bands: int, rows: int) -> float | np.ndarray:
    """Candidate probability ``1 - (1 - s**rows)**bands`` for Jaccard similarity ``s`` (scalar or array)."""
    return 1.0 - (1.0 - np.power(s, rows)) ** bands


@lru_cache(maxsize=256)
def lsh_params(
    threshold: float = 0.5,
    num_perm: int = 128,
    false_positive_weight: float = 0.5,
    false_negative_weight: float = 0.5,
) -> tuple[int, int]:
    """Bands and rows minimising the weighted false-positive + false-negative area (datasketch's rule).

    Args:
        threshold: target Jaccard similarity in ``(0, 1)``.
        num_perm: MinHash signature length; the result satisfies ``b * r ≤ num_perm``.
        false_positive_weight, false_negative_weight: non-negative weights (datasketch default 0.5/0.5).
    Returns:
        ``(b, r)``: number of bands, rows per band. Integration is by the trapezoid rule on 2,001 points.
    Raises:
        ValueError: threshold outside ``(0, 1)``, ``num_perm < 1`` or negative weights.
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    if num_perm < 1:
        raise ValueError(f"num_perm must be >= 1, got {num_perm}")
    if false_positive_weight < 0 or false_negative_weight < 0:
        raise ValueError("weights must be non-negative")
    below = _GRID[_GRID <= threshold]
    above = _GRID[_GRID >= threshold]
    best = (float("inf"), (1, 1))
    for b in range(1, num_perm + 1):
        rows = np.arange(1, num_perm // b + 1, dtype=np.float64)[:, None]  # all r for this b at once
        fp = np.trapezoid(1.0 - (1.0 - below**rows) ** b, below, axis=1)
        fn = np.trapezoid((1.0 - above**rows) ** b, above, axis=1)
        err = fp * false_positive_weight + fn * false_negative_weight
        i = int(np.argmin(err))  # first minimum, as datasketch's strict "<" scan keeps
        if err[i] < best[0]:  # type: ignore[index]  # numpy's stubs: trapezoid may return a scalar
            best = (float(err[i]), (b, i + 1))  # type: ignore[index]
    return best[1]


def s_curve_table(bands: int, rows: int, similarities: Sequence[float] = (0.5, 0.7, 0.8, 0.9)) -> str:
    """A printable table of the S-curve at the given similarities (for ``--help`` output).

    Returns:
        Multi-line ``str``, e.g.::

            LSH 21 bands x 6 rows: P(candidate) = 1 - (1 - s^6)^21
              jaccard  P(candidate)
                 0.50        0.2852
    """
    lines = [f"LSH {bands} bands x {rows} rows: P(candidate) = 1 - (1 - s^{rows})^{bands}", "  jaccard  P(candidate)"]
    for s in similarities:
        lines.append(f"  {s:7.2f}  {float(s_curve(s, bands, rows)):12.4f}")
    return "\n".join(lines)


def band_keys(signature: np.ndarray, bands: int, rows: int, seed: int = 0) -> list[str]:
    """LSH band keys of a MinHash signature.

    Args:
        signature: int64 array ``(num_perm,)`` with ``num_perm ≥ bands * rows``.
        bands, rows: banding layout (see :func:`lsh_params`).
        seed: XXH3-64 seed.
    Returns:
        ``bands`` strings ``"b{band}:{16 hex}"``, the hex being XXH3-64 of the band's ``rows`` values as
        little-endian int64 bytes (8 × rows bytes).
    Raises:
        ValueError: the signature is shorter than ``bands * rows``.
    """
    if signature.shape[0] < bands * rows:
        raise ValueError(f"signature of {signature.shape[0]} values cannot hold {bands} bands x {rows} rows")
    data = signature[: bands * rows].astype("<i8", copy=False).tobytes()
    step = 8 * rows
    return [f"b{i}:{hex16(data[i * step : (i + 1) * step], seed)}" for i in range(bands)]


def band_keys_many(signatures: np.ndarray, bands: int, rows: int, seed: int = 0) -> list[list[str]]:
    """:func:`band_keys` of every row of a ``(N, num_perm)`` MinHash matrix (same keys, same order).

    The band bytes of the whole batch are made with one ``tobytes``; each key is still one XXH3-64
    of the band's ``8 × rows`` bytes (there is no batch XXH3 in the ``xxhash`` package).

    Args:
        signatures: int64 array ``(N, num_perm)`` with ``num_perm ≥ bands * rows``.
        bands, rows, seed: as :func:`band_keys`.
    Returns:
        One list of ``bands`` keys per row.
    Raises:
        ValueError: the signatures are shorter than ``bands * rows``.
    """
    if signatures.shape[1] < bands * rows:
        raise ValueError(f"signature of {signatures.shape[1]} values cannot hold {bands} bands x {rows} rows")
    data = memoryview(np.ascontiguousarray(signatures[:, : bands * rows], dtype="<i8").tobytes())
    step = 8 * rows
    prefixes = [f"b{i}:" for i in range(bands)]
    hexdigest = xxhash.xxh3_64_hexdigest
    starts = [i * step for i in range(bands)]  # of each band within a record's bytes
    width = step * bands
    return [[prefix + hexdigest(data[base + start : base + start + step], seed) for prefix, start in zip(prefixes, starts)]
            for base in range(0, width * signatures.shape[0], width)]
