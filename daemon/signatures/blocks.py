"""Blocks of candidate keys: their identity, their sizes, and block purging (pure, no I/O).

A candidate key (an LSH band key, a simhash block key, a super token, see
:func:`~daemon.signatures.candidate_keys`) names a *block*: the documents of one table and one scope
that hold it. A candidate lookup reads every document of every block its keys name, so the cost
of a lookup is the sum of those blocks' sizes.

* **Identity.** A block is identified by the signed 64-bit xxh64 of ``table \\x1f scope \\x1f key``
  (:func:`key_hash`). The PostgreSQL backend stores exactly these hashes per document
  (``nearsync.document_lookup.key_hashes``, migration 0020), so a block there is one GIN posting list.
* **Sizes.** :class:`BlockCounter` counts, from every live document's super tokens (below), how
  many documents each of their blocks holds, exactly.
* **Purging.** Most blocks are small; those that grow with the catalogue are the title word pairs
  of common words ("digital camera", "usb cable"): they rank a listing's true siblings and
  unrelated products alike and make a lookup read thousands of entries. *Block purging*
  (Papadakis, Ioannou, Niederée, Palpanas & Nejdl, "A Blocking Framework for Entity Resolution in
  Highly Heterogeneous Information Spaces", IEEE TKDE 25(12), 2013) leaves such blocks out of
  every lookup: :class:`LargeBlocks` is the set of blocks larger than ``max_block`` documents, and
  :meth:`LargeBlocks.keep` drops their keys from a record's lookup keys. On the generated product
  corpus (``bench/bench_blocking.py --max-block``) a bound of 500 cut the entries a lookup reads by
  30% at 100,000 listings and 79% at 1,000,000 while the true duplicates among the 50 best
  candidates rose (0.764 → 0.776 and 0.638 → 0.686): the purged keys were the ones pushing true
  duplicates out of the candidate cap.

Only **super tokens** (keys ``"t:…"``: pairs of sampled title words, and the configured rules'
sampled words and cells, :mod:`~daemon.signatures.supertokens`) are ever purged
(:func:`purgeable`). Their blocks grow with how common the *words* are, whatever the records'
duplication. The other keys are evidence of near-identity: an LSH band key (``b…``) is shared only
by texts whose MinHash agrees on a whole band, a simhash block key (``s…``) by near-equal simhashes,
an identity key (``k:…``) by equal titles or model numbers; their blocks grow large only when many
records are copies of one another (one ad posted 600 times, a wire story syndicated to 500 sites),
which are exactly the records that must find each other. So a group of copies, however large,
still finds itself through them.

Which blocks are large is a *snapshot* (stored with the token-rarity snapshot, ``nearsync rarity
refresh``), not a count kept live, so that which records are candidates of which stays a function of
the data and of the snapshot, never of the order records were processed in.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

import numpy as np
import xxhash

_TWO_63, _TWO_64 = 1 << 63, 1 << 64


def key_prefix(table: str, scope: Mapping[str, str]) -> bytes:
    """``table \\x1f canonical-scope-json \\x1f`` as bytes: what :func:`key_hash` folds in before the key.

    The JSON is the standard library's (sorted keys, ASCII escapes): stored hashes depend on it.
    """
    return _prefix(table, tuple(sorted(scope.items())))


@lru_cache(maxsize=4096)
def _prefix(table: str, scope_items: tuple[tuple[str, str], ...]) -> bytes:
    canon = json.dumps(dict(scope_items), sort_keys=True, separators=(",", ":"))
    return f"{table}\x1f{canon}\x1f".encode()


def key_hash(prefix: bytes, key: str) -> int:
    """Signed 64-bit xxh64 (seed 0) of ``prefix`` (from :func:`key_prefix`) followed by ``key``:
    the identity of the key's block."""
    h = xxhash.xxh64_intdigest(prefix + key.encode())
    return h - _TWO_64 if h >= _TWO_63 else h


def key_hashes(table: str, scope: Mapping[str, str], keys: Iterable[str]) -> set[int]:
    """The distinct hashed keys (:func:`key_hash`) of ``keys`` for a document of ``table`` in ``scope``:
    what ``nearsync.document_lookup.key_hashes`` stores for it and what a candidate lookup asks for.

    :func:`key_hash` written out in the loop (one call less per key; ~30 keys per signed
    document), filling the set in the order of ``keys``, so it iterates in the same order."""
    prefix = key_prefix(table, scope)
    digest = xxhash.xxh64_intdigest
    out: set[int] = set()
    for k in keys:
        h = digest(prefix + k.encode())
        out.add(h - _TWO_64 if h >= _TWO_63 else h)
    return out


PURGEABLE_PREFIX = "t:"
"""The prefix of the keys block purging may leave out: super tokens (see the module docstring)."""


def purgeable(key: str) -> bool:
    """Whether block purging may leave ``key`` out of a lookup: a super token (``"t:…"``)."""
    return key.startswith(PURGEABLE_PREFIX)


class LargeBlocks:
    """The blocks of a snapshot that hold more than ``max_block`` documents (immutable).

    Args:
        hashes: their identities (:func:`key_hash`), any order, any integer dtype that fits int64.
        max_block: the bound they exceed (>= 1), as configured when the snapshot was built.

    Membership is a Python ``frozenset`` lookup per key (~30 per record): the set holds only the
    large blocks, a few thousand to a few hundred thousand, 60-70 bytes each.
    """

    __slots__ = ("_hashes", "max_block")

    def __init__(self, hashes: Iterable[int] | np.ndarray, max_block: int) -> None:
        self._hashes = frozenset(int(h) for h in hashes)
        self.max_block = int(max_block)

    def __len__(self) -> int:
        return len(self._hashes)

    def __contains__(self, block: object) -> bool:
        return block in self._hashes

    def keep(self, table: str, scope: Mapping[str, str], keys: Sequence[str]) -> list[str]:
        """``keys`` without the :func:`purgeable` ones naming a large block of ``table`` and
        ``scope``, in their order.

        Returns:
            The kept keys (a new list; ``keys`` as given when no block is large).
        """
        if not self._hashes:
            return list(keys)
        prefix = key_prefix(table, scope)
        return [k for k in keys if not (purgeable(k) and key_hash(prefix, k) in self._hashes)]


class BlockCounter:
    """Exact block sizes over a stream of documents' keys (:meth:`add`), then the large ones
    (:meth:`larger_than`).

    Memory: the block identities are buffered as 64-bit integers (8 bytes per key occurrence, up to
    ``buffer`` of them, default 4,000,000 = 32 MB) and folded into a sorted table of distinct
    blocks with their counts (12 bytes per distinct block, about three times that while a fold
    runs): ~120 MB for 10 million distinct super tokens.

    Args:
        buffer: key occurrences buffered before a fold (>= 1).
    """

    def __init__(self, buffer: int = 4_000_000) -> None:
        if buffer < 1:
            raise ValueError(f"buffer must be >= 1, got {buffer}")
        self._buffer = buffer
        self._pending = array("Q")
        self._blocks = np.empty(0, dtype=np.int64)
        self._counts = np.empty(0, dtype=np.int32)
        self.documents = 0

    def add(self, table: str, scope: Mapping[str, str], keys: Iterable[str]) -> None:
        """Count one document of ``table`` in ``scope`` holding ``keys`` (repeats count once); only
        the :func:`purgeable` keys are counted (no other is ever purged).

        The identities are buffered as xxh64's unsigned digests (one C-level ``array`` extend per
        document) and read as int64 when folded: the same 64 bits as :func:`key_hash`'s signed value,
        without a Python sign fix per key (~20% less CPU per document with ~23 super tokens)."""
        self.documents += 1
        prefix = key_prefix(table, scope)
        digest = xxhash.xxh64_intdigest
        hashes = {digest(prefix + k.encode()) for k in keys if k.startswith(PURGEABLE_PREFIX)}
        if hashes:
            self._pending.extend(hashes)
            if len(self._pending) >= self._buffer:
                self._fold()

    def _fold(self) -> None:
        if not self._pending:
            return
        new, counts = np.unique(np.frombuffer(self._pending, dtype=np.uint64).view(np.int64), return_counts=True)
        self._pending = array("Q")
        if len(self._blocks):
            both = np.concatenate((self._blocks, new))
            order = np.argsort(both, kind="stable")
            both = both[order]
            weights = np.concatenate((self._counts, counts.astype(np.int32)))[order]
            starts = np.flatnonzero(np.r_[True, both[1:] != both[:-1]])
            new, counts = both[starts], np.add.reduceat(weights, starts)
        self._blocks, self._counts = new, counts.astype(np.int32)

    def larger_than(self, max_block: int) -> np.ndarray:
        """The identities of the blocks holding more than ``max_block`` documents, ascending (int64)."""
        self._fold()
        return self._blocks[self._counts > max_block]

    def sizes(self) -> dict[int, int]:
        """Every block's size, ``{identity: documents}`` (for tests and small corpora)."""
        self._fold()
        return dict(zip(self._blocks.tolist(), self._counts.tolist(), strict=True))
