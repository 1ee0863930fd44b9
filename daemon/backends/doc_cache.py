"""A bounded LRU cache of decoded index documents, and the raw ``jsonb`` loader it pairs with.

The PostgreSQL backend reads the same documents over and over in the dedup worker: on a
near-duplicate-dense corpus a 200-record candidate lookup returns ~6,000 distinct documents, and
after a few batches ~85% of them were decoded by an earlier one. Decoding a document is four JSON
parses and two ``bigint[]`` copies; a cache hit is a dictionary look-up.

Keys are ``(table, record_id, version)``. The version is the external version (the change sequence
the write carried, see :mod:`daemon.backends.base`): a document's content never changes under one
version (a newer write brings a newer version, hence a new key), so an entry can never be served
stale. The one way a version's content could be rewritten is :meth:`IndexBackend.clear` followed by
the same writes again; the backend drops the table's entries on ``clear``.

Documents handed out are shared: the same :class:`~daemon.backends.base.IndexDocument` object goes
to every caller that asks for that version, so callers must not mutate it (``fields``,
``signature``, ``scope``, ``keys``). None does (``grep`` of the dedup worker, scoring, the HTTP API
and the ops tools).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from psycopg.adapt import Loader
from psycopg.errors import DataError
from psycopg.pq import Format

from daemon.backends.base import IndexDocument

DocKey = tuple[str, str, int]
"""``(table, record_id, version)``."""

DEFAULT_CACHED_DOCUMENTS = 30_000
"""Default bound of :class:`DocumentCache` (documents). A decoded product listing of the Abt-Buy bench
corpus takes ~6.4 kB of Python objects, and the scorer's values prepared on it (the
:class:`~daemon.scoring.side.Side` the dedup worker keeps on a document) ~1.5 kB more after its
first pair (``tracemalloc`` over 3,000 of them, 2026-11-27; more once scored against many records).
So 30,000 hold ~240-430 MB of documents with their scoring values (by this measure and an earlier,
wider one of ~10 + 4 kB): about what the previous default of 20,000 took before 2026-11-27, when
``bottomk`` and the 128-value ``minhash`` were lists of Python ints (~10.9 + 2.0 kB measured the
same way, ~14.5 + 4.6 kB by the wider measure); they are now
:class:`~daemon.db.arrays.PackedInts` (:class:`~daemon.db.arrays.PackedInt8ArrayLoader`) and the
Side's view shares the MinHash. A worker of ~200 MB before its cache stays within ~650 MB, which a
small machine (1-2 GB, the database elsewhere) can give a worker; classified ads, shorter than
product listings, take less. On a dense catalogue a 200-record lookup touches ~6,000 distinct
candidates and product lines are found again by later batches: on the 20,000-listing dense bench
(2026-11-26, busy) 10,000 documents missed ~28% of the candidates and 20,000 cut the worker's CPU
from 3.1-3.2 to 2.5-2.7 ms per record, with the same resident memory at the end of the drain (483
against 484 MB: the memory of the documents a smaller cache drops is kept by the allocator for the
next ones); on the 100,000-listing one (2026-11-27, busy) 30,000 instead of 20,000 read 24.5-24.9
instead of 29.8-30.3 documents per record and took 3.6-3.9 instead of 4.3 ms of worker CPU per
record, with 694-711 MB resident after the drain against 878-881 MB for the code before at 20,000
(docs/benchmarks.md). Lower it (``[index] cached_documents``) on a machine short of memory, raise it
on one with memory to spare; 50,000 would be ~400-700 MB."""


class DocumentCache:
    """A least-recently-used map ``(table, record_id, version) -> IndexDocument``.

    Args:
        max_documents: most documents kept (``0``: caching off, :meth:`get` always misses). When a
            :meth:`put` goes beyond it, the least recently used entries are dropped.

    Raises:
        ValueError: ``max_documents`` is negative.

    Not thread-safe; one event loop's use only (every method is synchronous, so no coroutine sees
    it half-updated).
    """

    __slots__ = ("_docs", "_newest", "hits", "max_documents", "misses")

    def __init__(self, max_documents: int = DEFAULT_CACHED_DOCUMENTS) -> None:
        if max_documents < 0:
            raise ValueError(f"max_documents must be >= 0, got {max_documents}")
        self.max_documents = max_documents
        self._docs: OrderedDict[DocKey, IndexDocument] = OrderedDict()
        self._newest: dict[tuple[str, str], int] = {}  # (table, record_id) -> newest version held
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._docs)

    def get(self, key: DocKey) -> IndexDocument | None:
        """The cached document of ``key`` (now the most recently used), or None (counted as a miss)."""
        doc = self._docs.get(key)
        if doc is None:
            self.misses += 1
            return None
        self._docs.move_to_end(key)
        self.hits += 1
        return doc

    def put(self, key: DocKey, doc: IndexDocument) -> None:
        """Keep ``doc`` under ``key`` (most recently used), dropping the least recently used beyond the bound."""
        if self.max_documents == 0:
            return
        self._docs[key] = doc
        self._docs.move_to_end(key)
        record = key[:2]
        if self._newest.get(record, -1) < key[2]:
            self._newest[record] = key[2]
        while len(self._docs) > self.max_documents:
            gone, _ = self._docs.popitem(last=False)
            if self._newest.get(gone[:2]) == gone[2]:
                del self._newest[gone[:2]]

    def newest(self, table: str, record_id: str) -> IndexDocument | None:
        """The cached document of ``record_id`` with the highest version this cache has held for it
        (now the most recently used), or None (not counted as a hit or a miss: the caller still has
        to learn whether that version is the current one). None too when that version was dropped
        while an older one of the same record is still held (a rare case: the caller then reads the
        document again)."""
        version = self._newest.get((table, record_id))
        if version is None:
            return None
        key = (table, record_id, version)
        doc = self._docs.get(key)
        if doc is not None:
            self._docs.move_to_end(key)
        return doc

    def drop_table(self, table: str) -> None:
        """Forget every document of ``table`` (after the table's documents were cleared)."""
        for key in [k for k in self._docs if k[0] == table]:
            del self._docs[key]
        for record in [r for r in self._newest if r[0] == table]:
            del self._newest[record]


class RawJsonbLoader(Loader):
    """Binary ``jsonb`` loader that does not parse: returns the JSON text as ``bytes``.

    Registered on the cursors whose documents may already be cached, so that only the documents
    the cache misses are parsed (by :func:`daemon.db.jsoncodec.loads`). The binary ``jsonb`` format
    is a version byte (1) followed by the JSON text (PostgreSQL's ``jsonb_send``).
    """

    format = Format.BINARY

    def load(self, data: Any) -> bytes:
        """The JSON text of one binary ``jsonb`` value.

        Raises:
            psycopg.errors.DataError: an unknown ``jsonb`` binary format version.
        """
        if data[:1] != b"\x01":
            raise DataError(f"unknown jsonb binary format: {bytes(data[:1])!r}")
        return bytes(data[1:])
