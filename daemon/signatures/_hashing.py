"""64-bit hashing helpers shared by the signature modules (xxhash only, never Python's ``hash()``).

All hashes are XXH3-64 (xxhash >= 3.4) of UTF-8 bytes with an explicit 64-bit seed, so they are
identical across processes, ``PYTHONHASHSEED`` values, platforms and Python versions.
"""

from __future__ import annotations

import numpy as np
import xxhash

UINT64_MASK = (1 << 64) - 1
INT63_MASK = (1 << 63) - 1

_xxh3 = xxhash.xxh3_64_intdigest
_xxh3_hex = xxhash.xxh3_64_hexdigest


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8; lone surrogates (which UTF-8 cannot hold) with ``surrogatepass``, so
    nothing raises. (``surrogatepass`` changes nothing for a text without them: one call for both.)"""
    return text.encode("utf-8", "surrogatepass")


def hash64(text: str, seed: int = 0) -> int:
    """Hash a string to an unsigned 64-bit int with XXH3-64.

    Args:
        text: any str; lone surrogates are encoded with ``surrogatepass`` so nothing raises.
        seed: unsigned 64-bit seed.
    Returns:
        int in ``[0, 2**64)``.
    """
    return _xxh3(_utf8(text), seed)


def hash64_hex(text: str, seed: int = 0) -> str:
    """``format(hash64(text, seed), "016x")``: the same 16 lower-case hex characters, made by xxhash
    (its canonical, big-endian hex digest) without the int and the ``format`` call.

    Args:
        text: any str (lone surrogates as in :func:`hash64`). seed: unsigned 64-bit seed.
    Returns:
        16-character str.
    """
    return _xxh3_hex(_utf8(text), seed)


def token_hash(token: str, seed: int = 0) -> int:
    """:func:`hash64` of one token through the memo of :func:`hash_tokens` (a record's title tokens
    were hashed there moments before, so this is a dictionary hit); a token not in the memo is
    hashed without being added to it.

    Args:
        token: any str. seed: unsigned 64-bit seed.
    Returns:
        int in ``[0, 2**64)``, equal to ``hash64(token, seed)``.
    """
    cache = _token_cache.get(seed)
    if cache is not None:
        value = cache.get(token)
        if value is not None:
            return value
    return hash64(token, seed)


def token_memo(seed: int = 0) -> dict[str, int]:
    """The memo of :func:`hash_tokens` for ``seed``, for lookups only (callers must not change it).

    Args:
        seed: unsigned 64-bit seed.
    Returns:
        ``dict[str, int]``: token -> :func:`hash64` of it, in ``[0, 2**64)``; empty when nothing was
        hashed with that seed yet. Any token may be missing (the memo is emptied past
        :data:`TOKEN_CACHE_SIZE`): check before relying on it.
    """
    return _token_cache.get(seed) or {}


TOKEN_CACHE_SIZE = 200_000
"""Distinct tokens whose hash is memoised per seed (the cache is emptied when it grows past this)."""
_token_cache: dict[int, dict[str, int]] = {}


def hash_tokens(items: list[str], seed: int = 0) -> np.ndarray:
    """Hash each string of ``items`` with :func:`hash64` (memoised: ad vocabularies repeat a lot).

    The common case, every token in the memo, is one C-level pass (``np.fromiter`` over the memo
    lookups, about twice as fast as a list of ints made into an array); a missing token sends the
    call through the memo's fill first.

    Returns:
        ``np.ndarray`` of dtype uint64 and shape ``(len(items),)``.
    """
    cache = _token_cache.get(seed)
    if cache is None:
        cache = _token_cache.setdefault(seed, {})
    try:
        return np.fromiter(map(cache.__getitem__, items), dtype=np.uint64, count=len(items))
    except KeyError:
        pass
    for t in [t for t in items if t not in cache]:
        cache[t] = hash64(t, seed)
    values = np.fromiter(map(cache.__getitem__, items), dtype=np.uint64, count=len(items))
    if len(cache) > TOKEN_CACHE_SIZE:
        cache.clear()
    return values


def hex16(data: bytes, seed: int = 0) -> str:
    """XXH3-64 of raw bytes as 16 lower-case hex characters."""
    return _xxh3_hex(data, seed)


def to_signed64(value: int) -> int:
    """Map an unsigned 64-bit int (``[0, 2**64)``) to the signed int64 with the same bits.

    Used for values stored in Elasticsearch ``long`` fields. Raises ``ValueError`` when out of range.
    """
    if not 0 <= value <= UINT64_MASK:
        raise ValueError(f"not an unsigned 64-bit value: {value}")
    return value - (1 << 64) if value >= 1 << 63 else value


def to_unsigned64(value: int) -> int:
    """Inverse of :func:`to_signed64`: a signed int64 (``[-2**63, 2**63)``) to its unsigned bit pattern."""
    if not -(1 << 63) <= value < 1 << 63:
        raise ValueError(f"not a signed 64-bit value: {value}")
    return value & UINT64_MASK


_F1 = np.uint64(0xFF51AFD7ED558CCD)
_F2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


def fmix64(values: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser (Appleby), element-wise: a bijection of uint64 with full avalanche.

    Args:
        values: uint64 array of any shape; it is **modified in place** and returned.
    Returns:
        The same array, mixed.
    """
    values ^= values >> _S33
    values *= _F1
    values ^= values >> _S33
    values *= _F2
    values ^= values >> _S33
    return values
