"""A bounded memo for per-piece text work (tokens, model numbers): fill what is missing, then look up."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def fill_memo(cache: dict[K, V], keys: Sequence[K], compute: Callable[[K], V], max_size: int) -> None:
    """Make every key of ``keys`` present in ``cache``, computing the missing ones with ``compute``.

    Memory is bounded: when the missing keys would take ``cache`` past ``max_size`` entries, it is
    emptied first and refilled with all of ``keys`` (so the caller's lookups of ``keys`` that follow
    always succeed).

    Args:
        cache: the memo, modified in place. keys: the keys about to be looked up (repeats allowed).
        compute: key → value. max_size: entries kept (≥ 1; a single call may exceed it).
    """
    missing = [k for k in keys if k not in cache]
    if not missing:
        return
    if len(cache) + len(missing) > max_size:
        cache.clear()
        missing = list(keys)
    for k in missing:
        cache[k] = compute(k)
