"""Ragged arrays for the batch path: one flat numpy array holding a list per record, cut by offsets.

A batch of ``N`` per-record arrays is stored as ``(values, offsets)``: ``values`` is the
concatenation, and record ``r`` owns ``values[offsets[r] : offsets[r + 1]]``; ``offsets`` is an int64
array of shape ``(N + 1,)``, non-decreasing, ``offsets[0] == 0`` and ``offsets[N] == len(values)``
(the CSR layout of sparse matrices). Working on the flat array costs one numpy call per batch instead
of one per record, which is where the per-record path spends its time on short texts.
"""

from __future__ import annotations

import numpy as np


def offsets_of(lengths: np.ndarray | list[int]) -> np.ndarray:
    """Offsets (int64, shape ``(N + 1,)``) of records of the given lengths."""
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def segment_ids(offsets: np.ndarray) -> np.ndarray:
    """The record index of every value (int64, shape ``(offsets[-1],)``), non-decreasing."""
    return np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))


def segment_unique(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per record, the sorted distinct values: what ``np.unique`` gives record by record.

    Args:
        values: 1-D array of the batch (any orderable dtype). offsets: as in the module docstring.
    Returns:
        ``(values, offsets)`` of the same batch with each record's values sorted ascending and distinct.

    Values already sorted within each record (checked in one vectorised pass) skip the sort: only
    the repeats are dropped.
    """
    if values.size == 0:
        return values.copy(), np.zeros_like(offsets)
    starts = offsets[1:-1][offsets[1:-1] < values.shape[0]]  # where a record's values begin
    rising = values[1:] >= values[:-1]
    rising[starts[starts > 0] - 1] = True  # a record's first value need not follow the last one's
    if rising.all():  # already sorted within each record (e.g. sorted distinct grams, shifted): no sort
        v = values
    else:
        v = values[np.lexsort((values, segment_ids(offsets)))]  # by record, then by value
    keep = np.empty(v.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(v[1:], v[:-1], out=keep[1:])
    keep[offsets[1:-1][offsets[1:-1] < v.shape[0]]] = True  # a record's first value is always kept
    kept = np.flatnonzero(keep)
    return v[kept], np.searchsorted(kept, offsets).astype(np.int64)


def head(values: np.ndarray, offsets: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` values of each record (all of a shorter one)."""
    lengths = np.minimum(np.diff(offsets), k)
    new = offsets_of(lengths)
    pos = np.arange(new[-1], dtype=np.int64) - np.repeat(new[:-1], lengths) + np.repeat(offsets[:-1], lengths)
    return values[pos], new


def split_lists(values: np.ndarray, offsets: np.ndarray) -> list[list[int]]:
    """The ragged array as one Python list of ints per record (one ``tolist`` for the batch)."""
    flat = values.tolist()
    bounds = offsets.tolist()
    return [flat[bounds[r] : bounds[r + 1]] for r in range(len(bounds) - 1)]
