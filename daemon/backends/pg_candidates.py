"""A search backend whose candidate keys and signatures live in PostgreSQL (``index.candidate_store``).

With ``index.candidate_store = "postgres"`` (Elasticsearch or OpenSearch; the default since
2026-11-27), every record is written
twice, by the same :meth:`PgCandidatesBackend.write`:

* to the **search index** as the user's document only: table, record id, external version, fields
  and scope (no candidate keys, no signature) — the shape of plain sync, which is what the search
  server is for: the users' own queries;
* to the **PostgreSQL index tables** (``nearsync.documents`` and its lookup table
  ``nearsync.document_lookup``, the embedded backend's) as the whole signed document: fields,
  signature, MinHash and bottom-k arrays, and the hashed candidate keys under their GIN index.

Candidate retrieval, documents for scoring, sketches and versions (:meth:`get`, :meth:`get_versions`,
:meth:`get_sketches`, :meth:`candidates`, :meth:`candidates_many`, :meth:`scope_members`) are read
from PostgreSQL; the versioned rebuild and alias swap (:class:`~daemon.backends.base.VersionedIndex`)
are the search index's. Why: a signed document's ~30 candidate keys are ~30 unique keyword terms,
which cost an OpenSearch-API server more than the rest of the document (docs/benchmarks.md, "Against
PGSync"), and no user query reads them; PostgreSQL holds them for a fraction of that (the same GIN
lookups as the embedded backend, in the database nearsync already uses for its queues).

Order and failures. The two stores are written at the same time (the write's wall time is the
slower store's, not the sum), with the same external versions (idempotent upserts: a batch retried
after a transient error of either store comes back ``STALE`` where it was already applied). A
record's outcome is ``FAILED`` if either store refused it (the search server's error first), else
``APPLIED`` if either store applied it, else ``STALE``. A transient error of either store raises
:class:`~daemon.backends.base.TransientIndexError` once both writes have ended, and the indexer
retries the batch. A record only the search server refuses (its mapping; nothing the document
encoder lets through is refused by PostgreSQL's) is dead-lettered like any failed record, and its
signed copy stays in PostgreSQL, where it can be a candidate of other records until its row
changes; it is in the table, so a flag pointing at it points at a live record.

Switching an existing index between ``candidate_store`` values needs ``nearsync reindex``: the
search documents written with ``"postgres"`` carry no keys, and PostgreSQL holds no documents of an
index written with ``"search"`` (the dedup worker and the check API refuse to start on a store
that lacks most of the search index's documents: :func:`daemon.service.require_candidate_store`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace

from daemon.backends.base import (
    Candidate,
    CandidateQuery,
    CandidateScreen,
    CorpusRow,
    DeleteOp,
    IndexDocument,
    Outcome,
    WriteResult,
)
from daemon.backends.pg_encoding import encode
from daemon.backends.postgres import PostgresBackend
from daemon.backends.search import SearchBackend
from daemon.backends.search_client import SearchClient
from daemon.backends.search_options import SearchOptions


def encode_for_pg_candidates(doc: IndexDocument) -> IndexDocument:
    """``doc`` as :class:`PgCandidatesBackend` writes it: the PostgreSQL wire form of the whole signed
    document in ``encoded`` (:func:`daemon.backends.pg_encoding.encode`), and of the content only the
    ``fields`` and ``scope`` the search index stores (keys and signature dropped). A picklable
    module-level function, run in the indexer's signature workers.

    Raises:
        ValueError, TypeError: as :func:`~daemon.backends.pg_encoding.encode` (a non-finite float, a
            value JSON cannot represent).
    """
    return replace(search_document(doc), encoded=encode(doc))


def search_document(doc: IndexDocument) -> IndexDocument:
    """``doc`` as the search index stores it: without candidate keys and signature (``doc`` itself when
    it has neither, as :func:`encode_for_pg_candidates` leaves it)."""
    if not doc.keys and not doc.signature:
        return doc
    return replace(doc, keys=[], signature={})


def merge_outcomes(search: WriteResult, pg: WriteResult) -> WriteResult:
    """One outcome per record from the two stores' results (see the module docstring).

    Args:
        search: the search index's result. pg: PostgreSQL's (the same records).

    Returns:
        ``FAILED`` (with the search server's error, else PostgreSQL's) if either refused the record,
        else ``APPLIED`` if either applied it, else ``STALE``.
    """
    outcomes: dict[tuple[str, str], Outcome] = {}
    errors: dict[tuple[str, str], str] = {}
    for k in search.outcomes.keys() | pg.outcomes.keys():
        both = (search.outcomes.get(k), pg.outcomes.get(k))
        if Outcome.FAILED in both:
            outcomes[k] = Outcome.FAILED
            errors[k] = search.errors.get(k) or pg.errors.get(k) or "refused by the index"
        elif Outcome.APPLIED in both:
            outcomes[k] = Outcome.APPLIED
        else:
            outcomes[k] = Outcome.STALE
    return WriteResult(outcomes, errors)


class PgCandidatesBackend:
    """:class:`~daemon.backends.base.IndexBackend` (and ``VersionedIndex``, ``PlannerStatistics``,
    ``TwoStoreIndex``, ``CorpusReader``):
    a search index for the documents, PostgreSQL for candidate retrieval (module docstring).

    Args:
        search: the Elasticsearch / OpenSearch backend (not opened).
        pg: the PostgreSQL backend on the nearsync database (not opened).

    Attributes:
        name: the search backend's name (``"elasticsearch"`` / ``"opensearch"``).
        search, pg: the two backends.
    """

    document_encoder = staticmethod(encode_for_pg_candidates)

    def __init__(self, search: SearchBackend, pg: PostgresBackend) -> None:
        self.search = search
        self.pg = pg
        self.name = search.name

    def __repr__(self) -> str:
        return f"PgCandidatesBackend(search={self.search!r})"

    @property
    def write_rows(self) -> int:
        """The search backend's bulk request size (see ``IndexBackend.write_rows``)."""
        return self.search.write_rows

    @property
    def alias(self) -> str:
        """The search index's alias (``index.index``)."""
        return self.search.alias

    @property
    def client(self) -> SearchClient:
        """The search server's client adapter (for :mod:`daemon.backends.search_admin` functions)."""
        return self.search.client

    @property
    def options(self) -> SearchOptions:
        """The search backend's validated options."""
        return self.search.options

    async def open(self) -> None:
        """Open both backends (PostgreSQL's pool; the search index, template and alias).

        Raises:
            TransientIndexError, PermanentIndexError: from the search server.
        """
        await self.pg.open()
        try:
            await self.search.open()
        except BaseException:
            await self.pg.close()  # no pool left open behind a failed start
            raise

    async def close(self) -> None:
        """Close both. Safe to call twice."""
        await self.search.close()
        await self.pg.close()

    async def write(self, upserts: Sequence[IndexDocument], deletes: Sequence[DeleteOp]) -> WriteResult:
        """Write the search index and PostgreSQL at the same time (module docstring); one outcome
        per record. Both writes run to their end before an error of either is raised.

        Raises:
            TransientIndexError: either store unreachable (the batch is retried whole).
            PermanentIndexError: the search server refused the whole request.
        """
        results = await asyncio.gather(self.search.write([search_document(d) for d in upserts], deletes),
                                       self.pg.write(upserts, deletes), return_exceptions=True)
        for r in results:  # both writes have ended: a retry never races a write of this one
            if isinstance(r, BaseException):
                raise r
        searched, keyed = results
        assert isinstance(searched, WriteResult) and isinstance(keyed, WriteResult)
        return merge_outcomes(searched, keyed)

    # -- reads: PostgreSQL ------------------------------------------------------------------------

    async def get(self, table: str, record_ids: Sequence[str]) -> dict[str, IndexDocument]:
        """The signed documents, from PostgreSQL (see ``IndexBackend.get``)."""
        return await self.pg.get(table, record_ids)

    async def get_versions(self, table: str, record_ids: Sequence[str]) -> dict[str, int]:
        """From PostgreSQL (see ``IndexBackend.get_versions``)."""
        return await self.pg.get_versions(table, record_ids)

    async def get_sketches(self, table: str, record_ids: Sequence[str]) -> dict[str, tuple[int, tuple[int, ...]]]:
        """From PostgreSQL (see ``IndexBackend.get_sketches``)."""
        return await self.pg.get_sketches(table, record_ids)

    async def candidates(self, table: str, keys: Sequence[str], scope: Mapping[str, str], *, min_match: int = 1,
                         limit: int = 100, exclude_id: str | None = None,
                         exclude_source: str | None = None) -> list[Candidate]:
        """From PostgreSQL (see ``IndexBackend.candidates``)."""
        return await self.pg.candidates(table, keys, scope, min_match=min_match, limit=limit, exclude_id=exclude_id,
                                        exclude_source=exclude_source)

    async def candidates_many(self, table: str, queries: Sequence[CandidateQuery], *, min_match: int = 1,
                              limit: int = 100, screen: CandidateScreen | None = None) -> list[list[Candidate]]:
        """From PostgreSQL (see ``IndexBackend.candidates_many``; the screen applies there)."""
        return await self.pg.candidates_many(table, queries, min_match=min_match, limit=limit, screen=screen)

    async def scope_members(self, table: str, queries: Sequence[CandidateQuery], *, limit: int,
                            min_match: int = 1) -> list[list[Candidate] | None]:
        """From PostgreSQL (see ``IndexBackend.scope_members``)."""
        return await self.pg.scope_members(table, queries, limit=limit, min_match=min_match)

    async def corpus_size(self, table: str) -> int:
        """Live documents of ``table`` in PostgreSQL (``CorpusReader``)."""
        return await self.pg.corpus_size(table)

    def iter_corpus(self, table: str) -> AsyncIterator[list[CorpusRow]]:
        """The signed documents' titles, scopes and super tokens, from PostgreSQL (``CorpusReader``)."""
        return self.pg.iter_corpus(table)

    async def search_documents(self, table: str, record_ids: Sequence[str]) -> dict[str, IndexDocument]:
        """The search index's copies (``TwoStoreIndex``: what ``verify`` compares besides PostgreSQL's)."""
        return await self.search.get(table, record_ids)

    async def held_by_both(self, table: str, record_ids: Sequence[str]) -> set[str]:
        """Those of ``record_ids`` live in both stores (``TwoStoreIndex``: what ``verify`` reads)."""
        in_pg, in_search = await asyncio.gather(self.pg.get_versions(table, record_ids),
                                                self.search.get_versions(table, record_ids))
        return set(in_pg) & set(in_search)

    async def store_counts(self, table: str) -> tuple[int, int]:
        """Live documents of ``table`` in ``(the search index, PostgreSQL)`` (``TwoStoreIndex``)."""
        searched, keyed = await asyncio.gather(self.search.count(table), self.pg.count(table))
        return searched, keyed

    async def refresh_statistics(self) -> None:
        """PostgreSQL's index table statistics (``PlannerStatistics``)."""
        await self.pg.refresh_statistics()

    # -- the search index: what users see ---------------------------------------------------------

    async def count(self, table: str) -> int:
        """Live documents of ``table`` in the search index."""
        return await self.search.count(table)

    async def iter_versions(self, table: str) -> AsyncIterator[tuple[str, int]]:
        """Every live ``(record_id, version)`` of either store, each record once (the search
        index's version where both hold it), so ``verify`` and ``reindex`` find orphans in both."""
        seen: set[str] = set()
        async for rid, version in self.search.iter_versions(table):
            seen.add(rid)
            yield rid, version
        async for rid, version in self.pg.iter_versions(table):
            if rid not in seen:
                yield rid, version

    async def clear(self, table: str) -> None:
        """Drop every document of ``table`` from both stores."""
        await self.search.clear(table)
        await self.pg.clear(table)

    async def refresh(self) -> None:
        """Make the search index's writes visible (``VersionedIndex``)."""
        await self.search.refresh()

    async def refresh_write_targets(self) -> tuple[str, ...]:
        """See ``VersionedIndex``: the search index's dual-write targets."""
        return await self.search.refresh_write_targets()

    async def begin_version(self, *, resume: bool) -> tuple[str, bool]:
        """See ``VersionedIndex``. PostgreSQL is rewritten in place by the same pages."""
        return await self.search.begin_version(resume=resume)

    async def finish_version(self, new: str) -> list[str]:
        """See ``VersionedIndex``."""
        return await self.search.finish_version(new)

    async def prune_versions(self) -> list[str]:
        """See ``VersionedIndex``."""
        return await self.search.prune_versions()

    async def rollback_version(self) -> tuple[str, list[str]]:
        """See ``VersionedIndex``."""
        return await self.search.rollback_version()
