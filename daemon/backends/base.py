"""The index backend protocol: the only thing the daemon and the dedup worker know about an index.

Three implementations sit beside this module: ``postgres`` (the embedded default, tables in the
``nearsync`` schema), ``elasticsearch`` and ``opensearch``. Processes get one from
:func:`daemon.backends.factory.create_backend` and never import a concrete backend.

Versioning contract (external version): every write carries the change sequence of the tracking row
it came from. A backend must apply a write only if its version is greater than the version it
holds for that record (including the version of a delete, kept as a tombstone), so a stale write
can never overwrite a newer one. Writes are idempotent: replaying a batch changes nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, runtime_checkable

import orjson
import xxhash


SCOPE_KEY = "s:scope"
"""The candidate key every signed document carries (added by
:func:`daemon.capture.documents.document_from_fields`): it is shared by every document of a scope,
so the documents holding it are the scope's members (:meth:`IndexBackend.scope_members`, the
exhaustive comparison of a small scope). Candidate lookups by keys never send it (backends drop it
from :meth:`IndexBackend.candidates` queries): it would match the whole scope."""


def lookup_keys(keys: Sequence[str]) -> list[str]:
    """``keys`` without :data:`SCOPE_KEY`: the keys a candidate lookup sends."""
    return [k for k in keys if k != SCOPE_KEY]


def shared_keys(keys: Sequence[str], doc: IndexDocument) -> int:
    """How many of the lookup ``keys`` (:func:`lookup_keys`) ``doc`` holds (pure).

    Returns:
        The count of distinct shared keys, the scope key aside.
    """
    return len(set(lookup_keys(keys)).intersection(doc.keys))


def in_small_scope_lookup(tokens: Sequence[str], keys: Sequence[str], doc: IndexDocument, min_match: int) -> bool:
    """The rule by which a small scope's member ``doc`` is among a lookup's candidates
    (:meth:`IndexBackend.scope_members`; pure): the lookup has no title ``tokens``, or ``doc``'s title
    shares one of them, or ``doc`` holds at least ``min_match`` of the lookup's ``keys``
    (:func:`shared_keys`). The PostgreSQL backend applies the same rule in SQL (``scope_members``).
    """
    if not tokens or not set(tokens).isdisjoint(doc.signature.get("tokens") or ()):
        return True
    return shared_keys(keys, doc) >= min_match


@dataclass(slots=True)
class IndexDocument:
    """One record as stored in the index.

    Attributes:
        table: tracked table name (``schema.table`` as configured), e.g. ``"public.ads"``.
        record_id: the record's primary key rendered as text.
        version: external version, the tracking row's change sequence (positive int64).
        fields: field role -> value (``title``, ``body``, ``price`` (float), ``lat``/``lon``
            (degrees), ``user``, ``category``, ``group``, ``created_at`` (ISO 8601 str), ...).
            JSON-serialisable; ``None`` for a missing value.
        scope: scope name -> value (e.g. ``{"user": "42"}``); candidates are only looked up within
            the same scope values. Empty for a global scope.
        keys: candidate keys (LSH band keys, simhash block keys, super tokens), each a short str.
        signature: the serialised signature (``Signature.to_document()``), JSON-serialisable as
            written. As read back from the PostgreSQL backend its ``bottomk`` and ``minhash`` are
            :class:`~daemon.db.arrays.PackedInts` (an ``array('q')``: the same int64 values
            in order, equal to the list of them, ~5x less memory); ``list()`` gives the list.
        encoded: ``None``, or the form a backend writes, made ahead by that backend's
            ``document_encoder`` (see :class:`IndexBackend`) in the indexer's signature worker
            processes. When it is set, ``fields``, ``keys`` and ``signature`` may be empty: the
            encoder drops them so the document crosses the process boundary as one compact object.
        side: see below (not part of the document's content; excluded from equality).
    """

    table: str
    record_id: str
    version: int
    fields: dict[str, Any]
    scope: dict[str, str] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)
    signature: dict[str, Any] = field(default_factory=dict)
    encoded: Any = None
    side: Any = field(default=None, repr=False, compare=False)
    """The scorer's prepared view of this document (:class:`daemon.scoring.side.Side`), made on
    first use by :func:`daemon.dedup.worker.side_of` and kept with the document, so a document
    scored against many records is prepared once. Never serialised."""
    partial: bool = False
    """True for a candidate document of which a lookup read only what a :class:`CandidateScreen`
    names (``fields`` and ``signature`` hold those keys alone; ``scope`` and ``keys`` are empty):
    enough for the screen's check, not for scoring the pair or for any other use. Never put in a
    backend's document cache (the PostgreSQL backend keeps partial ones in a cache of their own)."""

    def content_fingerprint(self) -> int:
        """A signed 64-bit xxh64 of ``fields`` as canonical JSON (sorted keys): equal while the
        record's tracked content is equal, whatever its version (a reindex changes the version,
        not the fingerprint). Moderators' decisions hold while both fingerprints are unchanged."""
        digest = xxhash.xxh64_intdigest(orjson.dumps(self.fields, option=orjson.OPT_SORT_KEYS))
        return digest - (1 << 64) if digest >= 1 << 63 else digest

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle as the class and its field values in order (the same object back, every field
        included): a slotted dataclass otherwise pickles through a Python ``__getstate__`` /
        ``__setstate__`` pair, ~3x the CPU per document on the trip back from a signature worker."""
        return (type(self), (self.table, self.record_id, self.version, self.fields, self.scope, self.keys,
                             self.signature, self.encoded, self.side, self.partial))


@dataclass(frozen=True, slots=True)
class DeleteOp:
    """Remove ``record_id`` of ``table`` from the index, as of change sequence ``version``."""

    table: str
    record_id: str
    version: int


class Outcome(str, Enum):
    """What became of one write.

    ``APPLIED``: written. ``STALE``: the index already holds a newer version (harmless, not
    retried). ``FAILED``: a permanent per-record error (e.g. a mapping error); the record goes the
    dead-letter way while the rest of the batch goes on.
    """

    APPLIED = "applied"
    STALE = "stale"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class WriteResult:
    """Per-record outcome of :meth:`IndexBackend.write`, keyed by ``(table, record_id)``.

    ``errors`` holds the error text for each ``FAILED`` record.
    """

    outcomes: dict[tuple[str, str], Outcome]
    errors: dict[tuple[str, str], str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A record returned by a candidate lookup.

    Attributes:
        record_id: the candidate's id (text).
        matched: how many of the query keys it shares (``>= min_match``).
        document: the stored document, for scoring without another round trip.
    """

    record_id: str
    matched: int
    document: IndexDocument


@dataclass(frozen=True, slots=True)
class CandidateQuery:
    """One lookup of :meth:`IndexBackend.candidates_many` (same meaning as the arguments of
    :meth:`IndexBackend.candidates`): the record's candidate ``keys``, its ``scope``, its own id
    (``exclude_id``, left out of the result; ``None`` for a document not in the database) and
    ``exclude_source`` (candidates whose ``source`` field equals it, as text, are left out before
    the limit applies; ``None``: no such filter); ``tokens``: the record's title tokens, read by
    :meth:`IndexBackend.scope_members` only (empty: no filter)."""

    keys: Sequence[str]
    scope: Mapping[str, str]
    exclude_id: str | None = None
    exclude_source: str | None = None
    tokens: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class CandidateScreen:
    """A check a candidate lookup applies to each candidate before reading its whole document
    (:meth:`IndexBackend.candidates_many`'s ``screen``): the dedup worker's lead-field check
    (:func:`daemon.scoring.lead_screen`), which drops most candidates of a near-duplicate-dense
    catalogue on a few short values (their model numbers) alone.

    Attributes:
        fields: the document fields ``keep`` reads, each only in place of a signature key below that
            the document lacks. signature: the signature keys it reads.
        keep: ``keep(query_index, document)`` -> whether query ``query_index``'s caller needs the
            whole document of that candidate; ``document`` is :attr:`IndexDocument.partial`, with
            only the ``fields`` and ``signature`` keys above (those the document has; a backend may
            leave the fields out of a document that has every one of the signature keys). Pure;
            called once per (query, candidate) whose document the backend does not already hold.
    """

    fields: tuple[str, ...]
    signature: tuple[str, ...]
    keep: Callable[[int, IndexDocument], bool]


class TransientIndexError(Exception):
    """The index could not be reached or asked us to slow down (timeouts, 429, 5xx).

    Callers retry the whole operation with backoff; nothing is acknowledged meanwhile.
    """


def preferred_write_rows(backend: object) -> int | None:
    """The backend's ``write_rows`` (see :class:`IndexBackend`), or None when it has none.

    Returns:
        A positive row count, or None.
    """
    rows = getattr(backend, "write_rows", None)
    return rows if isinstance(rows, int) and not isinstance(rows, bool) and rows > 0 else None


class PermanentIndexError(Exception):
    """A configuration-level index error that retrying cannot fix (bad credentials, bad mapping)."""


@runtime_checkable
class IndexBackend(Protocol):
    """The index protocol. All methods are coroutines; all may raise :class:`TransientIndexError`.

    Attributes:
        name: the backend's name (``"postgres"``, ``"elasticsearch"``, ``"opensearch"``).
        document_encoder: ``None``, or a picklable, pure function ``IndexDocument -> IndexDocument``
            that returns the document with ``encoded`` set (and may drop its content). The indexer
            then runs it in its signature worker processes, and :meth:`write` gets documents whose
            encoding is already done. With ``None``, :meth:`write` gets whole documents.
        write_rows: optional (read with :func:`preferred_write_rows`): the number of signed
            documents per :meth:`write` call the backend works best with; the indexer then writes
            a large batch in parts of that many rows (unless ``[daemon] index_chunk_rows`` is set)
            and keeps its realtime batches at least that large while a backlog lasts (unless
            ``[daemon] batch_floor`` is set). The search backends ask for their bulk request
            size: each bulk request becomes a segment the server later merges, and fewer, larger
            segments cost the server less per document.

    Documents returned by :meth:`get`, :meth:`candidates`, :meth:`candidates_many` and
    :meth:`scope_members` may be shared: by the lookups of one call that found the same record, and
    across calls (the PostgreSQL backend caches decoded documents by record and version). Callers
    must treat them as read-only (never mutate ``fields``, ``signature``, ``scope`` or ``keys``).
    """

    name: str
    document_encoder: Callable[[IndexDocument], IndexDocument] | None

    async def open(self) -> None:
        """Connect and make sure the index (tables, or index + template + alias) exists."""

    async def close(self) -> None:
        """Release connections. Safe to call twice."""

    async def write(
        self, upserts: Sequence[IndexDocument], deletes: Sequence[DeleteOp]
    ) -> WriteResult:
        """Apply upserts and deletes with external versions; returns one outcome per record."""

    async def get(self, table: str, record_ids: Sequence[str]) -> dict[str, IndexDocument]:
        """Fetch live (not deleted) documents by id; missing ids are absent from the result."""

    async def get_versions(self, table: str, record_ids: Sequence[str]) -> dict[str, int]:
        """``{record_id: version}`` of live documents (no content): lets a caller that holds
        documents read earlier check they are still current. Missing ids are absent."""

    async def get_sketches(self, table: str, record_ids: Sequence[str]) -> dict[str, tuple[int, tuple[int, ...]]]:
        """``{record_id: (version, bottom-k sketch)}`` of live documents, the sketch only.

        The cheap read behind result-set dedup: no fields, keys or other signature parts are
        transferred or decoded. Missing ids are absent; a document without a sketch maps to ``()``.
        """

    async def candidates(
        self,
        table: str,
        keys: Sequence[str],
        scope: Mapping[str, str],
        *,
        min_match: int = 1,
        limit: int = 100,
        exclude_id: str | None = None,
        exclude_source: str | None = None,
    ) -> list[Candidate]:
        """Documents of ``table`` in the same ``scope`` that share at least ``min_match`` of ``keys``.

        Ordered by ``matched`` descending, at most ``limit`` of them; ``exclude_id`` is left out, and
        so are documents whose ``source`` field equals ``exclude_source`` (as text) when it is given
        (clean-clean matching: ``dedup.cross_source_only``), before the limit applies.
        """

    async def candidates_many(
        self, table: str, queries: Sequence[CandidateQuery], *, min_match: int = 1, limit: int = 100,
        screen: CandidateScreen | None = None,
    ) -> list[list[Candidate]]:
        """:meth:`candidates` for several records in a number of round trips that does not grow
        with the number of queries (the dedup worker's batch).

        ``screen`` (optional, a hint): a candidate of query ``i`` whose document the backend would
        have to read may come with a :attr:`IndexDocument.partial` document instead, holding only
        the screen's keys, when ``screen.keep(i, that partial document)`` is False for every query
        it is a candidate of. The candidates and their order are the same either way; a backend
        may ignore the screen and return whole documents.

        Returns one list per query, in order, each as :meth:`candidates` would return it.
        """

    async def scope_members(
        self, table: str, queries: Sequence[CandidateQuery], *, limit: int, min_match: int = 1,
    ) -> list[list[Candidate] | None]:
        """Every document of each query's scope, for scopes of at most ``limit`` documents.

        The documents holding :data:`SCOPE_KEY` in the query's ``scope``, less ``exclude_id``, those
        of source ``exclude_source`` and, when the query has ``tokens``, those whose title tokens
        (``signature["tokens"]``) share none of them and that share fewer than ``min_match`` of the
        query's candidate ``keys`` (a record whose title has no word in common with another and
        whose text shares no candidate key with it is no duplicate of it; one whose every title word
        was retyped still shares its copied text's keys), in ``record_id`` order, each with
        ``matched`` 1; ``None`` for a query whose scope holds more than ``limit`` documents (its own
        included), found by counting at most ``limit + 1`` of them, so a large scope costs little.

        Returns:
            One entry per query, in order.
        """

    async def count(self, table: str) -> int:
        """Number of live documents of ``table``."""

    def iter_versions(self, table: str) -> AsyncIterator[tuple[str, int]]:
        """Every live ``(record_id, version)`` of ``table``, in no particular order (for verify)."""

    async def clear(self, table: str) -> None:
        """Drop every document of ``table`` (tests and ``reindex --from-scratch``)."""


@runtime_checkable
class PlannerStatistics(Protocol):
    """What a backend on PostgreSQL tables adds to :class:`IndexBackend`: bring the database's view
    of the index table up to date after a bulk load (planner statistics, index housekeeping), so
    that the candidate lookups that follow are planned and run as on a settled table. ``nearsync
    reindex`` and ``nearsync evaluate`` call it once their load is indexed (``isinstance(backend,
    PlannerStatistics)``); a backend may also do it by itself as it writes."""

    async def refresh_statistics(self) -> None:
        """Refresh the statistics now. Never raises for a lack of privilege (it is logged)."""


DEFAULT_CANDIDATE_STORE = "postgres"
"""``index.candidate_store`` when unset (search backends: where the candidate keys and signatures
live, :mod:`daemon.backends.pg_candidates`). PostgreSQL: on an OpenSearch-API server a signed document's
~30 unique keyword terms cost the server more than the rest of it, and the candidate lookups through
``_msearch`` more still (docs/benchmarks.md, "Against PGSync": 1.8-2.6x the signed rows/s, and
Abt-Buy's dedup 2.3-3.0 s against 46-64 s, with the same flags); the price is ~5 kB of PostgreSQL
storage and ~0.14 ms of its CPU per written record, in the database nearsync already needs."""


CorpusRow = tuple[Any, dict[str, str], list[str]]
"""One live document as a corpus snapshot counts it (:class:`CorpusReader`): ``(title, scope,
super_keys)``, where ``title`` is ``fields["title"]`` as :meth:`IndexBackend.get` would give it
(``None`` when missing), ``scope`` the document's scope and ``super_keys`` those of its candidate keys
that are super tokens (``"t:…"``, :func:`daemon.signatures.blocks.purgeable`; the others are never
counted), in no particular order."""


@runtime_checkable
class CorpusReader(Protocol):
    """What a backend that holds the signed documents in PostgreSQL tables adds to
    :class:`IndexBackend`: a read of every live document's title, scope and super tokens, and no
    more, for the corpus snapshot (``nearsync rarity refresh``, :func:`daemon.ops.rarity.refresh_rarity`,
    which checks ``isinstance(backend, CorpusReader)`` and otherwise reads whole documents through
    :meth:`IndexBackend.get`). The rows are those :meth:`IndexBackend.get` of every id of
    :meth:`IndexBackend.iter_versions` would give, reduced to :data:`CorpusRow`, read in one
    consistent snapshot of the database. Both methods may raise :class:`TransientIndexError`."""

    async def corpus_size(self, table: str) -> int:
        """The number of live documents :meth:`iter_corpus` reads (for a progress bar)."""

    def iter_corpus(self, table: str) -> AsyncIterator[list[CorpusRow]]:
        """Every live document of ``table`` as a :data:`CorpusRow`, in lists of up to a few
        thousand rows, in no particular order."""


@runtime_checkable
class TwoStoreIndex(Protocol):
    """What a backend that writes every record to two stores (a search index for the documents,
    PostgreSQL for the candidate keys: ``index.candidate_store = "postgres"``) adds to
    :class:`IndexBackend`: which records both stores hold, and the search index's copies. ``nearsync
    reindex --verify`` checks ``isinstance(backend, TwoStoreIndex)``, counts a record that either
    store lacks as missing and a sampled record whose fields differ from the row in either store as
    drifted (:meth:`IndexBackend.get` reads one store only); the dedup worker and the check API refuse to
    start on a candidate store that lacks most of the search index's documents
    (:func:`daemon.service.require_candidate_store`)."""

    async def held_by_both(self, table: str, record_ids: Sequence[str]) -> set[str]:
        """Those of ``record_ids`` live in both stores. Raises TransientIndexError."""

    async def search_documents(self, table: str, record_ids: Sequence[str]) -> dict[str, IndexDocument]:
        """The search index's own copies of ``record_ids``' documents (fields and scope, as the
        users' queries see them), where :meth:`IndexBackend.get` reads PostgreSQL's; ids not live
        there are absent. ``nearsync reindex --verify`` compares both copies' fields with the row.
        Raises TransientIndexError."""

    async def store_counts(self, table: str) -> tuple[int, int]:
        """Live documents of ``table`` in ``(the search index, PostgreSQL)``. Raises TransientIndexError."""


@runtime_checkable
class KeyedSearchIndex(Protocol):
    """What a search backend that keeps the candidate keys in its own documents
    (``index.candidate_store = "search"``) adds to :class:`IndexBackend`: how many of its documents
    carry them. A search index written with the PostgreSQL store (``"postgres"``) holds documents
    without keys; switched back to ``"search"`` before a reindex, the dedup worker would find no
    candidate for them and flag nothing, without an error. The dedup worker and the check API refuse
    to start on such an index (:func:`daemon.service.require_candidate_store`)."""

    async def keyed_count(self, table: str) -> int:
        """Live documents of ``table`` that hold candidate keys. Raises TransientIndexError."""


@runtime_checkable
class VersionedIndex(Protocol):
    """What a backend with versioned indices behind an alias (Elasticsearch, OpenSearch) adds to
    :class:`IndexBackend`: a zero-downtime rebuild into a new version followed by an atomic alias
    swap, and a rollback to the previous version.

    ``nearsync reindex`` checks ``isinstance(backend, VersionedIndex)`` and never imports a concrete
    backend. Every method may raise :class:`TransientIndexError` (server unreachable, 429/5xx) or
    :class:`PermanentIndexError`.
    """

    async def refresh(self) -> None:
        """Make every write so far visible to searches."""

    async def refresh_write_targets(self) -> tuple[str, ...]:
        """Re-read which concrete indices every write also goes to (a rebuild's new version);
        recreate the alias if the index was wiped. Returns those extra targets."""

    async def begin_version(self, *, resume: bool) -> tuple[str, bool]:
        """Start (or, with ``resume``, continue) building the next version; running daemons write
        every change to it too from their next batch. Returns ``(index name, resumed)``."""

    async def finish_version(self, new: str) -> list[str]:
        """Swap the alias atomically to the built version ``new``; returns the versions it pointed to."""

    async def prune_versions(self) -> list[str]:
        """Delete versions beyond the configured number kept; returns the deleted names."""

    async def rollback_version(self) -> tuple[str, list[str]]:
        """Point the alias back at the previous kept version.

        Returns:
            ``(the version now live, the versions the alias pointed to before)``.

        Raises:
            PermanentIndexError: no older version is kept.
        """
