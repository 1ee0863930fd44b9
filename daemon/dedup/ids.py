"""Record-id ordering: the one sort key every part of nearsync orders record ids by.

Record ids arrive as text (the tracked table's key: integer, text or uuid). Integer ids sort by
value ("9" before "10"), every other id after them by its text. Stored pairs are kept in this
order (``a`` before ``b``), a cluster's original is its earliest member by creation time and then
by this order, and API answers list ties in this order, so all of them agree.
"""

from __future__ import annotations

import re
from functools import lru_cache

_INTEGER = re.compile(r"-?[0-9]+")


@lru_cache(maxsize=1 << 16)
def record_id_key(record_id: str) -> tuple[int, int, str]:
    """Sort key of one record id (memoised: the dedup worker orders each of its ~50 pairs per record
    by it, over and over for the same ids; 2**16 entries take ~20 MB at most).

    Args:
        record_id: the id as text.

    Returns:
        ``(0, value, id)`` for an integer id (digits with an optional leading ``-``), else
        ``(1, 0, id)``: integers by value first, then other ids by their text.
    """
    if _INTEGER.fullmatch(record_id):
        return (0, int(record_id), record_id)
    return (1, 0, record_id)


def canonical(a: str, b: str) -> tuple[str, str]:
    """The pair ``(a, b)`` in the stored order (see :func:`record_id_key`).

    Returns:
        ``(first, second)`` with ``record_id_key(first) <= record_id_key(second)``.
    """
    return (a, b) if record_id_key(a) <= record_id_key(b) else (b, a)
