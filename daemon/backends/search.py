"""The search backend shared by Elasticsearch and OpenSearch, parametrised by a thin client adapter.

:class:`SearchBackend` implements :class:`~daemon.backends.base.IndexBackend` with request bodies
from :mod:`daemon.backends.search_bodies`; the adapters (:mod:`daemon.backends.elasticsearch`,
:mod:`daemon.backends.opensearch`) only send requests and translate their client's errors:

connection errors, timeouts, HTTP 429 and 5xx become :class:`~daemon.backends.base.TransientIndexError`,
any other HTTP error a :class:`~daemon.backends.search_client.SearchHTTPError`
(:mod:`daemon.backends.search_client`).

Writes go to the alias (``options.index``) with external versions, plus to any *extra write targets*
(dual write during a rebuild, see :meth:`SearchBackend.set_extra_write_targets` and
:func:`daemon.backends.search_admin.begin_rebuild`). Every :meth:`SearchBackend.write` first re-reads the
aliases of the version indices (one ``GET /<alias>_v*/_alias``), so a rebuild started by another
process is dual-written from the very next batch (no pickup delay: a change claimed after
``begin_rebuild`` returned always reaches the new version), and an alias that vanished (the index
was wiped, e.g. a server replaced) is recreated (``ensure_index``) instead of letting the server
auto-create a concrete index named like the alias.

Versioning on the server: a delete with an external version leaves a tombstone holding that version,
so an older upsert arriving after the delete is rejected (409 -> ``STALE``) as long as the server
keeps the tombstone (Elasticsearch/OpenSearch: ``index.gc_deletes``, 60 s by default; osmem keeps it
for the life of the index). ``clear`` (delete_by_query) also leaves tombstones at version + 1 of
each removed document: rebuild into a new index version (``search_admin``) rather than clearing
and rewriting the same versions.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from daemon.backends import search_bodies as B
from daemon.backends.base import (
    Candidate,
    CandidateQuery,
    CandidateScreen,
    DeleteOp,
    SCOPE_KEY,
    IndexDocument,
    Outcome,
    TransientIndexError,
    WriteResult,
    in_small_scope_lookup,
    lookup_keys,
)
from daemon.backends import search_admin
from daemon.backends.search_client import SearchClient, error_fields, http_error, is_transient_status
from daemon.backends.search_options import SearchOptions
from daemon.logs import get_logger

_PAGE = 1000


class SearchBackend:
    """:class:`~daemon.backends.base.IndexBackend` on Elasticsearch or OpenSearch.

    Args:
        name: ``"elasticsearch"`` or ``"opensearch"``.
        client: the adapter (:class:`SearchClient`).
        options: validated :class:`~daemon.backends.search_options.SearchOptions`.

    Attributes:
        client: the adapter, for :mod:`daemon.backends.search_admin` functions.
        alias: the alias read and written (``options.index``).
    """

    document_encoder = None  # documents go to the bulk helper whole (see IndexBackend)

    @property
    def write_rows(self) -> int:
        """Documents per :meth:`write` the indexer should send (see ``IndexBackend``): the bulk
        request size ``options.bulk_docs``, so a batch's part is one bulk request and the server
        builds one segment for it. On osmem-server, 10,000 signed Abt-Buy documents in requests of
        250 cost the server 3.3 ms of CPU each and in requests of 2,000 1.6 ms (merges of small
        segments; docs/benchmarks.md, Index backends); Elasticsearch suggests bulk requests of a
        few MB (a signed document is 3-5 kB)."""
        return self.options.bulk_docs

    def __init__(self, name: str, client: SearchClient, options: SearchOptions) -> None:
        self.name = name
        self.client = client
        self.options = options
        self.alias = options.index
        self._extra: tuple[str, ...] = ()
        self._extra_explicit = False
        self._log = get_logger(f"nearsync.index.{name}")

    def __repr__(self) -> str:
        return f"SearchBackend(name={self.name!r}, options={self.options!r}, extra_write_targets={list(self._extra)})"

    # -- lifecycle --------------------------------------------------------------------------------

    async def open(self) -> None:
        """Ensure the index template, the first index version and the alias; read dual-write targets.

        Raises:
            TransientIndexError: server unreachable. PermanentIndexError: e.g. bad credentials, or
                a concrete index named like the alias.
        """
        live = await search_admin.ensure_index(self.client, self.alias)
        await self.refresh_write_targets()
        self._log.info("index_opened", alias=self.alias, index=live, extra_write_targets=list(self._extra))

    async def close(self) -> None:
        """Close the client. Safe to call twice."""
        await self.client.close()

    # -- dual write -------------------------------------------------------------------------------

    @property
    def extra_write_targets(self) -> tuple[str, ...]:
        """Concrete indices every write also goes to (besides the alias)."""
        return self._extra

    def set_extra_write_targets(self, indices: Sequence[str]) -> None:
        """Also write every upsert/delete to ``indices`` (concrete names), e.g. the index being rebuilt.

        An explicit setting turns off discovery through the ``{alias}_next`` alias; pass ``[]`` to
        stop dual writing. Outcomes stay those of the alias; on an extra target a 409 is ignored, a
        429/5xx raises TransientIndexError (the batch is retried) and a permanent error is logged.
        """
        self._extra = tuple(dict.fromkeys(indices))
        self._extra_explicit = True

    async def refresh_write_targets(self) -> tuple[str, ...]:
        """Re-read the aliases of the version indices (one request) and set the dual-write targets.

        The indices of the rebuild alias ``{alias}_next`` (set by
        :func:`daemon.backends.search_admin.begin_rebuild`), minus those the main alias points to, become the
        extra write targets (unless :meth:`set_extra_write_targets` was called). If no version index
        carries the main alias any more (the index was wiped), it is recreated with
        :func:`daemon.backends.search_admin.ensure_index` and a warning ``index_alias_recreated`` is logged.

        Returns:
            The extra write targets.

        Raises:
            TransientIndexError: server unreachable. PermanentIndexError: the alias cannot be recreated.
        """
        versions = await search_admin.list_versions(self.client, self.alias)
        if not any(v.live for v in versions):
            live = await search_admin.ensure_index(self.client, self.alias)
            self._log.warning("index_alias_recreated", alias=self.alias, index=live)
            versions = await search_admin.list_versions(self.client, self.alias)
        if not self._extra_explicit:
            nxt = search_admin.next_alias(self.alias)
            self._extra = tuple(v.name for v in versions if nxt in v.aliases and not v.live)
        return self._extra

    # -- writes -----------------------------------------------------------------------------------

    async def write(self, upserts: Sequence[IndexDocument], deletes: Sequence[DeleteOp]) -> WriteResult:
        """Bulk upserts and deletes with ``version_type=external``; one outcome per record.

        409 -> ``STALE``; 404 on delete -> ``APPLIED`` (the tombstone is written anyway); a document
        that cannot be serialised or that the mapping rejects (400) -> ``FAILED`` with the error
        text, the rest of the batch goes on. Unless :meth:`set_extra_write_targets` was called, the
        dual-write targets are re-read first (:meth:`refresh_write_targets`, one small request).

        Raises:
            TransientIndexError: unreachable, timeout, or any item rejected with 429/5xx (after the
                whole batch was sent; the caller retries it, already-applied items then come back
                ``STALE``).
            PermanentIndexError: the whole request was refused (e.g. 401/403).
        """
        if not self._extra_explicit:
            await self.refresh_write_targets()
        targets = (self.alias, *self._extra)
        outcomes: dict[tuple[str, str], Outcome] = {}
        errors: dict[tuple[str, str], str] = {}
        by_id: dict[str, tuple[str, str]] = {}
        actions: list[dict[str, Any]] = []
        for d in upserts:
            k = (d.table, d.record_id)
            try:
                src = B.document_source(d)
                json.dumps(src, allow_nan=False)
            except (TypeError, ValueError) as e:
                outcomes[k], errors[k] = Outcome.FAILED, f"document not serialisable: {e}"
                continue
            outcomes[k] = Outcome.APPLIED
            by_id[B.doc_id(*k)] = k
            actions += [B.upsert_action(d, t, src) for t in targets]
        for op in deletes:
            k = (op.table, op.record_id)
            outcomes[k] = Outcome.APPLIED
            by_id[B.doc_id(*k)] = k
            actions += [B.delete_action(op, t) for t in targets]
        if not actions:
            return WriteResult(outcomes, errors)
        failed = await self.client.bulk(actions, chunk_docs=self.options.bulk_docs, chunk_bytes=self.options.bulk_bytes)
        transient: list[str] = []
        for item in failed:
            (op_type, info), = item.items()
            k = by_id.get(str(info.get("_id")))
            if k is None:
                continue
            status = int(info.get("status") or 500)
            etype, reason = error_fields(info)
            extra = info.get("_index") in self._extra
            if status == 409:
                if not extra and outcomes[k] is Outcome.APPLIED:
                    outcomes[k] = Outcome.STALE
            elif status == 404 and op_type == "delete":
                pass
            elif is_transient_status(status):
                transient.append(f"{B.doc_id(*k)}: {status} {etype}: {reason}")
            elif extra:
                self._log.warning("extra_target_write_failed", index=info.get("_index"), id=B.doc_id(*k),
                                  status=status, error=f"{etype}: {reason}")
            else:
                outcomes[k], errors[k] = Outcome.FAILED, f"{status} {etype}: {reason}"
        if transient:
            raise TransientIndexError(f"{len(transient)} bulk item(s) rejected transiently, e.g. {transient[0]}")
        return WriteResult(outcomes, errors)

    # -- reads ------------------------------------------------------------------------------------

    async def _mget(self, table: str, record_ids: Sequence[str],
                    params: Mapping[str, str] | None = None) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """``(record_id, doc)`` for each found document of ``record_ids`` (``_mget`` in pages of 1000,
        each id once; ``params`` narrow what each doc carries, e.g. ``_source_includes``)."""
        ids = list(dict.fromkeys(record_ids))
        for i in range(0, len(ids), _PAGE):
            page = ids[i:i + _PAGE]
            res = await self.client.request("POST", f"/{self.alias}/_mget",
                                            {"ids": [B.doc_id(table, r) for r in page]}, params=params)
            for rid, d in zip(page, res.get("docs", [])):
                if d.get("found"):
                    yield rid, d

    async def get(self, table: str, record_ids: Sequence[str]) -> dict[str, IndexDocument]:
        """Live documents of ``table`` by record id (``_mget`` in pages of 1000); missing ids are absent."""
        return {rid: B.document_from_hit(d) async for rid, d in self._mget(table, record_ids)}

    async def get_versions(self, table: str, record_ids: Sequence[str]) -> dict[str, int]:
        """``{record_id: version}`` (see protocol): ``_mget`` without ``_source``."""
        return {rid: int(d["_version"]) async for rid, d in self._mget(table, record_ids, {"_source": "false"})}

    async def get_sketches(self, table: str, record_ids: Sequence[str]) -> dict[str, tuple[int, tuple[int, ...]]]:
        """``{record_id: (version, bottom-k sketch)}`` (see protocol): ``_mget`` of ``signature.bottomk``
        only (``_source_includes``)."""
        out: dict[str, tuple[int, tuple[int, ...]]] = {}
        async for rid, d in self._mget(table, record_ids, {"_source_includes": "signature.bottomk"}):
            sk = B.unpack_int64s(((d.get("_source") or {}).get("signature") or {}).get("bottomk") or ())
            out[rid] = (int(d["_version"]), tuple(sk))
        return out

    def _effective_min(self, min_match: int) -> int:
        return max(int(min_match), self.options.min_should_match)

    def _candidate_body(self, table: str, q: CandidateQuery, min_match: int, limit: int) -> dict[str, Any]:
        return B.candidate_query(table, lookup_keys(q.keys), q.scope, min_match=min_match, limit=limit, exclude_id=q.exclude_id,
                                 mlt_index=self.alias if self.options.more_like_this else None,
                                 exclude_source=q.exclude_source)

    @staticmethod
    def _candidates_from(res: Mapping[str, Any], q: CandidateQuery, min_match: int) -> list[Candidate]:
        qkeys = set(q.keys)
        found: list[Candidate] = []
        for hit in res.get("hits", {}).get("hits", []):
            doc = B.document_from_hit(hit)
            if doc.record_id == q.exclude_id:
                continue
            matched = len(qkeys.intersection(doc.keys))
            if matched >= min_match:
                found.append(Candidate(doc.record_id, matched, doc))
        found.sort(key=lambda c: -c.matched)  # stable: server order (score, record_id) breaks ties
        return found

    async def candidates(self, table: str, keys: Sequence[str], scope: Mapping[str, str], *, min_match: int = 1,
                         limit: int = 100, exclude_id: str | None = None,
                         exclude_source: str | None = None) -> list[Candidate]:
        """Documents of ``table`` in the same ``scope`` sharing at least ``min_match`` of ``keys``
        (and not of source ``exclude_source``, when given).

        ``min_match`` is raised to the ``min_should_match`` option if lower. ``matched`` is computed
        client-side from the hit's stored keys. Best first (``matched`` descending), at most ``limit``.
        With ``more_like_this`` the server's pre-selection of the top ``limit`` also weighs text
        similarity to the ``exclude_id`` record.
        """
        q = CandidateQuery(lookup_keys(keys), dict(scope), exclude_id, exclude_source)
        if not q.keys or limit <= 0:
            return []
        mm = self._effective_min(min_match)
        res = await self.client.request("POST", f"/{self.alias}/_search", self._candidate_body(table, q, mm, limit))
        return self._candidates_from(res, q, mm)

    async def candidates_many(self, table: str, queries: Sequence[CandidateQuery], *, min_match: int = 1,
                              limit: int = 100, screen: CandidateScreen | None = None) -> list[list[Candidate]]:
        """:meth:`candidates` for several records in ``_msearch`` round trips of at most
        ``msearch_size`` searches each (so one request stays well inside ``timeout_s``). ``screen``
        is ignored: the search server returns each hit's whole document with it.

        Returns one list per query, in order. Raises TransientIndexError if any search was rejected
        with 429/5xx or timed out, SearchHTTPError for another per-search error.
        """
        mm = self._effective_min(min_match)
        todo = [(i, q) for i, q in enumerate(queries) if lookup_keys(q.keys) and limit > 0]
        out: list[list[Candidate]] = [[] for _ in queries]
        step = self.options.msearch_size
        for start in range(0, len(todo), step):
            part = todo[start : start + step]
            lines = B.msearch_lines(self.alias, (self._candidate_body(table, q, mm, limit) for _, q in part))
            res = await self.client.request("POST", "/_msearch", lines, ndjson=True)
            for (i, q), r in zip(part, res.get("responses", []), strict=True):
                if "error" in r:
                    raise http_error(int(r.get("status") or 500), r)
                out[i] = self._candidates_from(r, q, mm)
        return out

    async def scope_members(self, table: str, queries: Sequence[CandidateQuery], *,
                            limit: int, min_match: int = 1) -> list[list[Candidate] | None]:
        """Every document of each query's scope when it holds at most ``limit`` (see protocol): one
        search per query for :data:`SCOPE_KEY` in its scope with ``size`` ``limit + 1`` (a fuller
        page means a larger scope), in ``_msearch`` round trips of at most ``msearch_size``; members
        in ``record_id`` order. Raises TransientIndexError / SearchHTTPError as :meth:`candidates_many`."""
        out: list[list[Candidate] | None] = [None for _ in queries]
        step = self.options.msearch_size
        for start in range(0, len(queries), step):
            part = list(enumerate(queries))[start : start + step]
            # the scope's size is counted with the excluded record and source included, as the protocol says
            bodies = (B.candidate_query(table, [SCOPE_KEY], q.scope, min_match=1, limit=limit + 1) for _, q in part)
            res = await self.client.request("POST", "/_msearch", B.msearch_lines(self.alias, bodies), ndjson=True)
            for (i, q), r in zip(part, res.get("responses", []), strict=True):
                if "error" in r:
                    raise http_error(int(r.get("status") or 500), r)
                hits = r.get("hits", {}).get("hits", [])
                if len(hits) > limit:
                    continue
                docs = [B.document_from_hit(h) for h in hits]
                out[i] = sorted((Candidate(d.record_id, 1, d) for d in docs
                                 if d.record_id != q.exclude_id
                                 and in_small_scope_lookup(q.tokens, q.keys, d, min_match)
                                 and (q.exclude_source is None or str(d.fields.get("source")) != q.exclude_source
                                      or d.fields.get("source") is None)),
                                key=lambda c: c.record_id)
        return out

    async def count(self, table: str) -> int:
        """Number of live documents of ``table`` (as of the last refresh on a real cluster)."""
        res = await self.client.request("POST", f"/{self.alias}/_count", {"query": B.table_query(table)})
        return int(res["count"])

    async def keyed_count(self, table: str) -> int:
        """Number of live documents of ``table`` that hold candidate keys (``KeyedSearchIndex``)."""
        res = await self.client.request("POST", f"/{self.alias}/_count", {"query": B.keyed_query(table)})
        return int(res["count"])

    async def iter_versions(self, table: str) -> AsyncIterator[tuple[str, int]]:
        """Every live ``(record_id, version)`` of ``table``: pages of 1000 by ``search_after`` on ``record_id``."""
        after: str | None = None
        while True:
            res = await self.client.request("POST", f"/{self.alias}/_search", B.versions_page(table, _PAGE, after))
            hits = res.get("hits", {}).get("hits", [])
            for h in hits:
                yield str(h["sort"][0]), int(h["_version"])
            if len(hits) < _PAGE:
                return
            after = str(hits[-1]["sort"][0])

    async def clear(self, table: str) -> None:
        """Delete every document of ``table`` (delete_by_query, refreshed) from the alias and extra targets.

        Tombstones remain (see the module docstring): rewriting the same versions afterwards is STALE.
        """
        for target in (self.alias, *self._extra):
            await self.client.request("POST", f"/{target}/_delete_by_query", {"query": B.table_query(table)},
                                      params={"refresh": "true", "conflicts": "proceed"})

    async def refresh(self) -> None:
        """Make recent writes visible to search (``_refresh`` on the alias and extra targets)."""
        for target in (self.alias, *self._extra):
            await self.client.request("POST", f"/{target}/_refresh")

    # -- versioned rebuild (daemon.backends.base.VersionedIndex) -----------------------------------

    async def begin_version(self, *, resume: bool) -> tuple[str, bool]:
        """The version index to build into, and whether it is resumed.

        With ``resume``, a single index behind ``<alias>_next`` that is not live is reused; otherwise
        any unfinished rebuild is abandoned and ``<alias>_v{N+1}`` is created behind ``<alias>_next``
        (see :func:`daemon.backends.search_admin.begin_rebuild`).

        Returns:
            ``(index name, resumed)``.

        Raises:
            TransientIndexError, PermanentIndexError.
        """
        if resume:
            live = set(await search_admin.alias_indices(self.client, self.alias))
            building = [i for i in await search_admin.alias_indices(self.client, search_admin.next_alias(self.alias))
                        if i not in live]
            if len(building) == 1:
                return building[0], True
        await search_admin.abandon_rebuild(self.client, self.alias)
        return await search_admin.begin_rebuild(self.client, self.alias), False

    async def finish_version(self, new: str) -> list[str]:
        """Swap the alias atomically to ``new``; returns the versions it pointed to before.

        Raises:
            TransientIndexError, PermanentIndexError.
        """
        return await search_admin.finish_rebuild(self.client, self.alias, new)

    async def prune_versions(self) -> list[str]:
        """Delete versions beyond ``options.keep_versions``; returns the deleted index names.

        Raises:
            TransientIndexError, PermanentIndexError.
        """
        return await search_admin.prune_versions(self.client, self.alias, self.options.keep_versions)

    async def rollback_version(self) -> tuple[str, list[str]]:
        """Point the alias back at the previous kept version (one atomic ``_aliases`` request).

        Returns:
            ``(the version now live, the versions the alias pointed to before)``.

        Raises:
            PermanentIndexError: no older version kept. TransientIndexError.
        """
        target = await search_admin.rollback_target(self.client, self.alias)
        return target.name, await search_admin.swap_alias(self.client, self.alias, target.name)
