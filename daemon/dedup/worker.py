"""The dedup worker: claimed records → candidates from the index → pair scores → links, clusters, flags.

For each record taken from the ``dedup`` queue (the indexing daemon puts every indexed or deleted
record there, in its acknowledging transaction):

1. its document is fetched from the index, whatever the queued op (gone: treated as a delete);
2. candidates come from the index through the backend protocol only: every record of the same
   scope when it holds fewer than ``dedup.exhaustive_below`` records, else the records sharing at
   least ``dedup.min_match`` LSH band keys, simhash block keys, super tokens or identity keys
   (title, model numbers) within the scope, capped at ``dedup.candidate_cap`` (a hit cap is logged);
3. each pair is scored by :func:`daemon.scoring.score_sides` (:func:`~daemon.scoring.score_pair` on
   prepared documents, :func:`side_of`) in canonical order (lower id first, so
   the score does not depend on which side was processed);
4. in one transaction under a per-table advisory lock, the record's links (pairs scoring at least
   ``potential_threshold``) are replaced, and the connected component(s) around it — old and new —
   are re-clustered; a component over ``max_component`` records is cut into parts by a ladder of
   link-score levels (:mod:`daemon.dedup.parts`) and its changed parts are re-clustered
   (:func:`daemon.dedup.clusters.average_link_clusters`: a record joins a group only
   when its mean score to the whole group reaches the potential threshold, and never beside a record
   it has evidence against, :func:`daemon.scoring.evidence_against`; or, with
   ``cluster.method = "leiden"``, :func:`~daemon.dedup.clusters.build_clusters`). Every non-original
   member gets a flag pointing at its cluster's original
   (earliest ``created_at``, then id); members no longer linked lose theirs.

Links depend only on the two records — a link is kept only while its pair is still a candidate
pair (:func:`is_candidate_pair`) and scores at least the potential threshold — so the final links,
clusters and flags do not depend on the order in which records are processed, nor on how many
workers run. The exceptions depend on other records: the candidate cap, and a scope growing past
``exhaustive_below``. While the table grows they make a few links differ from a pass over the
final table; a link outside a capped lookup stays only while one end is within the other's cap
(:meth:`DedupHandler._revalidate`), so a pass over the settled table gives exactly a clean pass's
links and flags (docs/architecture.md, "Dedup worker"). The idle workers' sweep
(:mod:`daemon.dedup.sweep`) makes such passes, and rests once one saw no change: a batch of real
changes (not the sweep's own, :data:`~daemon.capture.queue.REPLAY_SEQ`) marks the table changed
for it, in the batch's transaction (named query ``sweep_changed``).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, TypeVar

import psycopg

from daemon.db import jsoncodec
from daemon.db import rarity as rarity_store
from daemon.backends.base import (Candidate, CandidateQuery, CandidateScreen, IndexBackend, IndexDocument,
                                   in_small_scope_lookup, lookup_keys, shared_keys)
from daemon.dedup.ids import canonical, record_id_key
from daemon.dedup.clusters import Cluster, UnionFind, average_link_clusters, build_clusters, respect_cannot_links
from daemon.dedup.parts import Part, cut_into_parts, part_levels
from daemon.dedup.settings import DedupOptions
from daemon.logs import get_logger
from daemon.capture.loop import BatchResult
from daemon.db.queries import query
from daemon.scoring import PairScore, Side, decide, evidence_against, lead_screen, pair_scorer, score_sides
from daemon.capture.queue import REPLAY_SEQ, Claimed
from daemon.signatures.blocks import LargeBlocks

log = get_logger("nearsync.dedup")


def order_key(record_id: str, doc: IndexDocument | None) -> tuple[str, tuple[int, int, str]]:
    """Creation order of a record: ``created_at`` (ISO text), then :func:`~daemon.dedup.ids.record_id_key`."""
    created = str((doc.fields.get("created_at") if doc else None) or "")
    return (created, record_id_key(record_id))


def decision_holds(stored: Sequence[Any], da: IndexDocument | None, db: IndexDocument | None) -> bool:
    """Whether a moderator's decision on (a, b) still applies to the documents ``da`` and ``db``.

    Args:
        stored: ``(a_version, b_version, a_fingerprint, b_fingerprint)`` as decided on (the
            fingerprints are ``None`` for decisions made before migration 0006).
        da, db: the current documents (``None`` when a record is gone).
    Returns:
        True while both records' content is unchanged: their content fingerprints equal the stored
        ones (so a reindex, which only changes versions, keeps the decision), or, without stored
        fingerprints, their versions do.
    """
    if da is None or db is None:
        return False
    va, vb, fa, fb = stored
    if fa is not None and fb is not None:
        return (da.content_fingerprint(), db.content_fingerprint()) == (fa, fb)
    return (da.version, db.version) == (va, vb)


@dataclass
class Link:
    """A scored pair at or above the potential threshold (``a`` before ``b`` canonically)."""

    a: str
    b: str
    score: float
    reasons: dict[str, Any]
    summary: str
    versions: tuple[int, int] | None = field(default=None, compare=False)
    """Index document versions of ``a`` and ``b`` when scored (None for links read back from the table)."""


class StoredLink(NamedTuple):
    """A link as the component walk reads it from ``nearsync.dedup_links``: its ends (``a`` before
    ``b`` canonically) and score (0-100, as stored: ``real``). Its reasons and summary stay in the
    table: a flag that takes them is written from the row itself (query ``upsert_flags``), so a walk
    does not carry every link's reasons of a component of hundreds of records to the worker and back.

    A named tuple ``(a, b, score)``: a walk makes one per link of the component (hundreds), which
    a tuple makes in half the time of a frozen dataclass, and it is the ``(a_id, b_id, score)`` link
    :mod:`daemon.dedup.clusters` takes as it is."""

    a: str
    b: str
    score: float


@dataclass(frozen=True, slots=True)
class StoredEvidence:
    """A flag's score, reasons and summary taken from a stored link row (``link``), the summary
    after ``prefix`` (``""``, or which record links the two when the flag's pair has no link of its
    own and cannot be scored): :meth:`DedupHandler._write_clusters_and_flags` sends the pair, and
    the query copies the row's values, never through the worker."""

    link: StoredLink
    prefix: str = ""

    @property
    def score(self) -> float:
        """The stored link's score (0-100)."""
        return self.link.score


Evidence = Link | StoredEvidence
"""What a flag says about its pair: a :class:`Link` scored by the worker, or a stored row's values."""

_ScoredPair = TypeVar("_ScoredPair", Link, StoredLink)
"""A link with its ends ``a``, ``b`` and its ``score``, scored now or read back."""


@dataclass(slots=True)
class ScoredCandidate:
    """One candidate of a document, scored in canonical order (``a`` before ``b``).

    Attributes:
        candidate: the candidate from the index (its ``document`` is the stored one).
        a, b: the pair in canonical order; for a document not in the database (``record_id`` None),
            the candidate comes first, as it would for a record inserted after it.
        score: the pair's :class:`PairScore` (``score`` 0-100), or None for a pair shown to score
            below the potential threshold without being scored in full (only when
            :func:`score_found` is given a ``floor``; ``flag`` is then None).
        flag: ``decide(score)``: ``"duplicate"``, ``"potential_duplicate"`` or None.
    """

    candidate: Candidate
    a: str
    b: str
    score: PairScore | None
    flag: str | None


@dataclass
class ScoredCandidates:
    """What :func:`score_candidates` returns: scored candidates (index order), whether the cap was
    hit, and whether the lookup compared the whole (small) scope (:func:`lookup_candidates`)."""

    scored: list[ScoredCandidate]
    capped: bool
    exhaustive: bool = False
    reused: int = 0
    """How many of ``scored`` took their score from ``known`` (:func:`score_found`) instead of being scored."""


async def score_candidates(table: str, record_id: str | None, doc: IndexDocument, backend: IndexBackend,
                           options: DedupOptions) -> ScoredCandidates:
    """Look up a document's candidates through the backend and score each pair: the worker's scoring.

    Shared by the dedup worker (through :func:`score_candidates_many`) and the check API
    (``POST /v1/check``), so a check and the later flag agree; see :func:`lookup_candidates` for
    which records are candidates.

    Args:
        table: tracked table name (``schema.table``).
        record_id: the document's record id, or None for a document not in the database.
        doc: the document (fields, scope, keys, signature as built by DocumentBuilder).
        backend: an opened index backend.
        options: validated ``[dedup]`` options.
    Returns:
        :class:`ScoredCandidates`; every candidate scored, whatever its score.
    Raises:
        TransientIndexError: the index is unreachable.
    """
    (found, cap, exhaustive), = await lookup_candidates(table, [(record_id, doc)], backend, options)
    return score_found(record_id, doc, found, options, cap=cap, exhaustive=exhaustive)


def excluded_source(doc: IndexDocument, options: DedupOptions) -> str | None:
    """With ``cross_source_only``, the document's own ``source`` (as text): the candidate lookup
    leaves that source out before the cap applies, so what a record is compared with does not
    depend on how many same-source records happen to be indexed. None otherwise."""
    own = doc.fields.get("source")
    return str(own) if options.cross_source_only and own is not None else None


def is_candidate_pair(doc: IndexDocument, other: IndexDocument, options: DedupOptions, *, exhaustive: bool) -> bool:
    """Whether ``other`` is among ``doc``'s candidates by the rules of :func:`lookup_candidates`,
    decided from the two documents alone (pure, no I/O).

    Used under the worker's lock for a link that the batch's lookup did not score (the other end
    made it, or its partner changed since): the link stays only while the pair would still be
    looked up, so a link made when the records were different does not outlive the rule that made
    it, and the final links are those a single pass over the final table makes.

    Args:
        doc, other: the two current documents.
        options: ``[dedup]`` settings (``min_match``, ``cross_source_only``).
        exhaustive: ``doc``'s lookup compared its whole scope (the scope was below
            ``exhaustive_below``).
    Returns:
        True when both share the scope, are not left apart by ``cross_source_only``, and share at
        least ``min_match`` candidate keys (the scope key and the super tokens of the snapshot's
        large blocks aside, :func:`query_keys`) or, with ``exhaustive``, a title word (or
        ``doc``'s title has none). The candidate cap is not part of it (it depends on the
        other records): :meth:`DedupHandler._revalidate` checks it with the batch's lookups and
        the partners' stored lookup boundaries (migration 0021).
    """
    if doc.scope != other.scope:
        return False
    own = excluded_source(doc, options)
    if own is not None and str(other.fields.get("source")) == own:
        return False
    if exhaustive:
        return in_small_scope_lookup(doc.signature.get("tokens") or (), query_keys(doc, options), other,
                                     options.min_match)
    large = large_blocks(options)
    if large is None:
        return shared_keys(doc.keys, other) >= options.min_match
    # only the shared keys can be purged ones that matter: hash those, not all ~30
    shared = set(lookup_keys(doc.keys)).intersection(other.keys)
    return (len(shared) >= options.min_match
            and len(large.keep(doc.table, doc.scope, sorted(shared))) >= options.min_match)


def large_blocks(options: DedupOptions) -> LargeBlocks | None:
    """The blocks the candidate lookups leave out (block purging, :mod:`daemon.signatures.blocks`):
    those of the attached corpus snapshot, or None when ``[dedup] max_block`` is 0, no snapshot is
    attached or it lists none."""
    snapshot = options.scoring.snapshot
    if options.max_block <= 0 or snapshot is None or not len(snapshot.large_blocks):
        return None
    return snapshot.large_blocks


def query_keys(doc: IndexDocument, options: DedupOptions) -> list[str]:
    """The candidate keys a lookup for ``doc`` sends: its keys less those of the snapshot's large
    blocks (:func:`large_blocks`), in their order; ``doc.keys`` itself when none is purged.

    Every rule that decides candidacy reads these (:func:`lookup_candidates`,
    :func:`is_candidate_pair`), so a pair is a candidate pair from either side or from neither
    (both records are in one scope, whose blocks are the same for both)."""
    large = large_blocks(options)
    return doc.keys if large is None else large.keep(doc.table, doc.scope, doc.keys)


def candidate_screen(items: Sequence[tuple[str | None, IndexDocument]], options: DedupOptions,
                     floor: float | None) -> CandidateScreen | None:
    """The :class:`~daemon.backends.base.CandidateScreen` of a lookup for ``items`` whose pairs are
    scored with ``floor`` (:func:`score_found`): the scorer's lead-field check
    (:func:`daemon.scoring.lead_screen`), applied by the backend to a candidate's model numbers and
    title codes before its whole document is read. A candidate it drops for a record is one
    :func:`score_found` drops too, on the same values in the same order (``a``, ``b`` canonical),
    so its :class:`ScoredCandidate` is the same (``score`` None) and its document is never needed.
    None when there is no floor (every pair scored in full: the check API) or the configuration's
    lead field is not an identifier field. Pure.

    Args:
        items: ``(record_id or None, document)`` of the lookup's queries, in the order sent.
    Returns:
        The screen (``keep(i, part)`` for query ``i`` and a partial candidate document), or None.
    """
    if floor is None:
        return None
    lead = lead_screen(options.scoring, floor)
    if lead is None:
        return None
    drops = lead.drops

    def keep(i: int, part: IndexDocument) -> bool:
        record_id, doc = items[i]
        if record_id is None:
            return True
        side = part.side
        if side is None:  # kept on the partial document: score_found's side_of reuses it
            side = part.side = Side(part.fields, part.signature)
        own = side_of(doc)
        if record_id_key(record_id) <= record_id_key(part.record_id):
            return not drops(own, side)
        return not drops(side, own)
    return CandidateScreen(lead.fields, lead.signature, keep)


async def lookup_candidates(table: str, items: Sequence[tuple[str | None, IndexDocument]], backend: IndexBackend,
                            options: DedupOptions, *,
                            floor: float | None = None) -> list[tuple[list[Candidate], int, bool]]:
    """The candidates of several documents, and how many of them to score, in at most two lookups.

    * **exhaustive**: a document whose scope holds fewer than ``options.exhaustive_below``
      documents (its own included) gets every other document of the scope whose title shares a
      word with its own or that shares at least ``options.min_match`` of its candidate keys
      (:meth:`~daemon.backends.base.IndexBackend.scope_members`; a title without any word in
      common scores about 0 on the title, so such a pair can only be flagged when its bodies or
      codes agree — a repost whose every title word was retyped — and those share candidate
      keys), all scored;
    * **blocking**: the others get the records sharing at least ``options.min_match`` candidate
      keys within the scope, best first, ``candidate_cap`` of them scored (``candidate_cap + 1``
      are asked for, so that a hit cap shows).

    With ``cross_source_only`` same-source records are left out by the lookups themselves
    (:func:`excluded_source`), before any cap.

    Args:
        items: ``(record_id or None, document)`` pairs.
        floor: the floor the pairs will be scored with (:func:`score_found`), or None: with one, a
            blocking lookup's candidates that the scorer's lead-field check drops may come as
            partial documents (:func:`candidate_screen`), their whole documents not read.
    Returns:
        One ``(candidates, cap, exhaustive)`` per item, in order (``cap``: how many of them to
        score; ``exhaustive``: the whole scope was compared).
    Raises:
        TransientIndexError: the index is unreachable.
    """
    queries = [CandidateQuery(query_keys(doc, options), doc.scope, rid, excluded_source(doc, options))
               for rid, doc in items]
    cap = options.scoring.candidate_cap
    out: list[tuple[list[Candidate], int, bool] | None] = [None] * len(items)
    if options.exhaustive_below > 1:
        members = await backend.scope_members(
            table, [replace(q, tokens=tuple(doc.signature.get("tokens") or ())) for q, (_, doc) in zip(queries, items)],
            limit=options.exhaustive_below - 1, min_match=options.min_match)
        for i, found in enumerate(members):
            if found is not None:
                out[i] = (found, len(found), True)
    rest = [i for i, x in enumerate(out) if x is None]
    if rest:
        found_many = await backend.candidates_many(table, [queries[i] for i in rest], min_match=options.min_match,
                                                   limit=cap + 1,
                                                   screen=candidate_screen([items[i] for i in rest], options, floor))
        for i, found in zip(rest, found_many, strict=True):
            out[i] = (found, cap, False)
    return [x for x in out if x is not None]


async def score_candidates_many(table: str, items: Sequence[tuple[str, IndexDocument]], backend: IndexBackend,
                                options: DedupOptions,
                                known: Callable[[tuple[str, str, int, int]], float | None] | None = None,
                                floor: float | None = None) -> list[ScoredCandidates]:
    """:func:`score_candidates` for several records of the database with one lookup of each kind
    (:func:`lookup_candidates`) per :data:`LOOKUP_CHUNK` records. The next chunk's lookup is sent
    before the current chunk is scored, so the index works on it while this process scores (the
    lookups only read; what each pair scores does not depend on when it was looked up, and the
    links are checked against the current documents under the worker's lock anyway).

    Args:
        items: ``(record_id, document)`` pairs.
        known: scores already computed, as :func:`score_found` takes them (None: score every pair).
        floor: as :func:`score_found` takes it (None: every pair gets its score).
    Returns:
        One :class:`ScoredCandidates` per item, in order.
    Raises:
        TransientIndexError: the index is unreachable.
    """
    parts = [items[start : start + LOOKUP_CHUNK] for start in range(0, len(items), LOOKUP_CHUNK)]
    out: list[ScoredCandidates] = []
    ahead: asyncio.Task[list[tuple[list[Candidate], int, bool]]] | None = None
    try:
        for i, part in enumerate(parts):
            found = await (ahead if ahead is not None else lookup_candidates(table, part, backend, options,
                                                                             floor=floor))
            ahead = (asyncio.ensure_future(lookup_candidates(table, parts[i + 1], backend, options, floor=floor))
                     if i + 1 < len(parts) else None)
            out += [score_found(rid, doc, cands, options, cap=cap, exhaustive=exhaustive, known=known, floor=floor)
                    for (rid, doc), (cands, cap, exhaustive) in zip(part, found, strict=True)]
    finally:  # scoring failed: do not leave the lookup running, nor its error unretrieved
        if ahead is not None and not ahead.cancel() and not ahead.cancelled():
            ahead.exception()
    return out


PAIR_SCORES_MAX = 500_000
"""Bound of :attr:`DedupHandler._pair_scores` (about 150 bytes an entry: ~75 MB at most)."""

CLUSTERED_MAX = 20_000
"""Bound of :attr:`DedupHandler._clustered`: components whose clusters and flags are kept (a few kB
each with their flags' scored pairs; ~100 MB at most). Enough for the components a worker
re-clusters again and again around a stream of edits; a cleared entry is only clustered again."""

LOOKUP_CHUNK = 200
"""Records per :meth:`~daemon.backends.base.IndexBackend.candidates_many` call (bounds one query or
``_msearch`` request)."""


def score_found(record_id: str | None, doc: IndexDocument, cands: Sequence[Candidate],
                options: DedupOptions, *, cap: int | None = None, exhaustive: bool = False,
                known: Callable[[tuple[str, str, int, int]], float | None] | None = None,
                floor: float | None = None) -> ScoredCandidates:
    """Score a document against the candidates a lookup returned (``cap + 1`` asked for, so that a
    hit cap shows); pure, no I/O.

    Args:
        cap: candidates scored at most (default ``candidate_cap``; an exhaustive lookup passes
            the number it found). exhaustive: the lookup compared the whole scope (kept on the result).
        known: ``known((a, b, a_version, b_version))`` -> the pair's score (0-100) already computed
            from those two document versions, or None (the dedup worker's memo,
            :attr:`DedupHandler._pair_scores`). A pair it knows below the potential threshold is not
            scored again: a score is a function of the two documents, and a pair below the threshold
            is no link, so its reasons are never read; its :class:`PairScore` then holds the score
            alone. A pair at or above the threshold is scored (its link needs the reasons).
        floor: with a score (0-100; the dedup worker passes the potential threshold, below which a
            pair is no link), a pair shown to score below it before every field is compared gets
            no score (``score`` None, :func:`~daemon.scoring.score_sides_at_least`); None: every
            pair is scored in full (the check API reports every candidate's score). A candidate
            whose document is :attr:`~daemon.backends.base.IndexDocument.partial` (screened out
            by the lookup, :func:`candidate_screen`) gets no score after the lead-field check
            that dropped it is made again on the same values.
    Raises:
        RuntimeError: a partial candidate that the lead-field check does not drop (a screen
            that disagrees with the scorer: a bug, never a data error).
    Returns:
        :class:`ScoredCandidates`: at most ``cap`` candidates scored, ``capped`` when more came,
        ``reused`` those whose score came from ``known``.
    """
    cfg = options.scoring
    cap = cfg.candidate_cap if cap is None else cap
    capped = len(cands) > cap
    out: list[ScoredCandidate] = []
    reused = 0
    own_key = record_id_key(record_id or "")  # canonical()'s look-up for the record, made once
    score = pair_scorer(cfg, floor)  # the config's comparators and stages, looked up once per record
    screen = lead_screen(cfg, floor) if floor is not None else None
    own, version, key_of, append = side_of(doc), doc.version, record_id_key, out.append
    for cand in cands[:cap]:  # same-source ones were left out by the lookup
        cid, cdoc = cand.record_id, cand.document
        side = cdoc.side  # side_of(cdoc), its check inlined (once per pair)
        if side is None or side.fields is not cdoc.fields or side.sig is not cdoc.signature:
            side = side_of(cdoc)
        if record_id is None:
            a, b, sa, sb = cid, "", side, own
        else:
            if own_key <= key_of(cid):
                a, b, sa, sb, va, vb = record_id, cid, own, side, version, cdoc.version
            else:
                a, b, sa, sb, va, vb = cid, record_id, side, own, cdoc.version, version
            if known is not None:
                value = known((a, b, va, vb))
                if value is not None and decide(value, cfg) is None:
                    append(ScoredCandidate(cand, a, b, PairScore(value), None))
                    reused += 1
                    continue
        if cdoc.partial:  # screened out by the lookup (candidate_screen): the scorer's first check, made here again
            if screen is None or not screen.drops(sa, sb):
                raise RuntimeError(f"candidate {cid!r} of {record_id!r} came screened out by its lead field, which "
                                   "does not drop the pair: the lookup's screen and the scorer disagree")
            append(ScoredCandidate(cand, a, b, None, None))
            continue
        ps = score(sa, sb)
        append(ScoredCandidate(cand, a, b, ps, None if ps is None else decide(ps.score, cfg)))
    return ScoredCandidates(out, capped, exhaustive, reused)


def side_of(doc: IndexDocument) -> Side:
    """The scorer's prepared view of ``doc`` (:class:`~daemon.scoring.side.Side`), made once and kept
    on the document (:attr:`~daemon.backends.base.IndexDocument.side`): its normalised texts, code
    sets, price and MinHash vector are derived once for all the pairs it is in."""
    side = doc.side
    if side is None or side.fields is not doc.fields or side.sig is not doc.signature:
        side = doc.side = Side(doc.fields, doc.signature)
    return side  # type: ignore[no-any-return]


def mutual_best_per_source(links: Sequence[_ScoredPair], source_of: dict[str, Any],
                           order: Any = None) -> list[_ScoredPair]:
    """Keep a link only if each side is the other's best link into its source.

    The one-to-one assumption of clean-clean entity resolution (each feed lists an item once). Ties
    are broken by the partner's creation order (``order``: record id -> sort key; earliest wins), so
    exactly one partner per source survives. Records with no ``source`` value are left alone.

    Args:
        links: the links (each pair once). source_of: record id -> its source (missing or None: no
            source). order: record id -> sort key (distinct per record; default the id itself).
    Returns:
        The kept links, in their order in ``links``. Linear in the links: one pass keeps each
        (record, partner's source)'s best partner as a plain ``(score, partner)`` pair, and the
        order key is computed only for two partners of equal score.
    """
    key = order or (lambda r: r)
    best: dict[tuple[str, Any], tuple[float, str]] = {}
    src = source_of.get
    held_of = best.get
    ends = []  # each link's (a, b, a's source, b's source), looked up once
    for link in links:
        a, b, score = link.a, link.b, link.score
        sa, sb = src(a), src(b)
        ends.append((a, b, sa, sb))
        for x, y, k in ((a, b, (a, sb)), (b, a, (b, sa))):
            held = held_of(k)
            # the higher score; on a tie the partner created first (NaN never replaces nor is replaced)
            if held is None or score > held[0] or (score == held[0] and key(y) < key(held[1])):
                best[k] = (score, y)
    return [link for link, (a, b, sa, sb) in zip(links, ends, strict=True)
            if sa is None or sb is None or (best[(a, sb)][1] == b and best[(b, sa)][1] == a)]


def link_components(links: Sequence[StoredLink]) -> list[tuple[tuple[str, ...], list[StoredLink]]]:
    """The connected components of the graph of ``links`` (union-find, Tarjan 1975).

    Returns:
        ``(nodes, links)`` per component: its record ids sorted, and its links in their order in
        ``links``; components in the order of their smallest id.
    """
    uf = UnionFind()
    for x in links:
        uf.union(x.a, x.b)
    own: dict[Any, list[StoredLink]] = defaultdict(list)
    for x in links:
        own[uf.find(x.a)].append(x)
    return sorted(((tuple(sorted(nodes)), own[root]) for root, nodes in uf.components().items()), key=lambda c: c[0])


def _stored_links(a: Sequence[str] | None, b: Sequence[str] | None, score: Sequence[float] | None) -> list[StoredLink]:
    """Links from a query's parallel arrays of ends and scores (each None when there is no link)."""
    return list(map(StoredLink._make, zip(a or (), b or (), map(float, score or ()), strict=True)))


def _bounded_put(memo: dict[Any, Any], key: Any, value: Any, max_size: int) -> None:
    """``memo[key] = value``, the memo emptied first once it holds ``max_size`` entries (a bound on
    memory, not a least-recently-used order: what is forgotten is only computed again)."""
    if len(memo) >= max_size:
        memo.clear()
    memo[key] = value


@dataclass
class Tally:
    """Work counted during one :meth:`DedupHandler.process` call: pairs scored (candidates, whether
    scored now or known from the memo, and pairs re-scored), of those candidates the ones whose
    score was known (``reused``, :func:`score_found`), records whose candidate list hit the cap,
    and partners whose capped-lookup boundary was read under the lock to decide whether a link
    outside a capped lookup stays (``partner_checks``, :meth:`DedupHandler._revalidate`)."""

    pairs: int = 0
    capped: int = 0
    reused: int = 0
    partner_checks: int = 0


class CappedLookup(NamedTuple):
    """What a batch record's lookup that hit the candidate cap scored (:meth:`DedupHandler.score_records`):
    the candidates' ids, how many candidate keys the last of them shared (``matched``) and the ids of
    those sharing exactly that many (``tied``; the backend's tie-break ordered them). A record is
    within this lookup's cap when it is one of ``scored``; stored as the record's boundary
    (``nearsync.dedup_cap_bounds``, migration 0021), ``matched`` and ``tied`` tell the same for a
    record outside the batch: it shares more keys than ``matched``, or as many and is one of ``tied``."""

    scored: frozenset[str]
    matched: int
    tied: tuple[str, ...]


@dataclass
class StoredRows:
    """The part and cluster rows a batch's transaction read under its lock (``delete_links_of``),
    so that rewriting a component leaves the rows that would not change alone: not sent, not
    upserted, not deleted when there is none.

    Attributes:
        parts: record id -> its stored ``(part_id, level)``. parts_known: the records whose part
            row is known (in ``parts``, or known to have none).
        clusters: record id -> its stored ``(cluster_id, original_id)``. clusters_known: likewise.
    """

    parts: dict[str, tuple[str, float]] = field(default_factory=dict)
    parts_known: set[str] = field(default_factory=set)
    clusters: dict[str, tuple[str, str]] = field(default_factory=dict)
    clusters_known: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, rows: Sequence[Sequence[Any]], partners: set[str]) -> StoredRows:
        """From ``delete_links_of`` rows ``(id, part_id, level, cluster_id, original_id)``: the
        given records and former partners (all NULL: their part and cluster rows, if any, come as
        rows of their own, being members of their parts and clusters), then the members of their
        clusters and of their and the new ``partners``' parts with their rows."""
        out = cls()
        seeds = set()
        for rid, part_id, level, cluster_id, original_id in rows:
            if part_id is not None:
                out.parts[rid] = (part_id, float(level))
            elif cluster_id is not None:
                out.clusters[rid] = (cluster_id, original_id)
            else:
                seeds.add(rid)
        out.parts_known = seeds | partners | out.parts.keys()
        out.clusters_known = seeds | out.clusters.keys()
        return out

    @property
    def records(self) -> set[str]:
        """Every record the rows name (the seeds of the re-clustering)."""
        return self.parts_known | self.clusters_known


_batch_tally: contextvars.ContextVar[Tally] = contextvars.ContextVar("nearsync_dedup_tally")
"""The running batch's :class:`Tally`. A context variable, so batches in flight at once (each in a
task of its own, see ``QueueLoop`` concurrency) count apart."""


def _tally() -> Tally:
    t = _batch_tally.get(None)
    if t is None:
        t = Tally()
        _batch_tally.set(t)
    return t


@dataclass
class DedupHandler:
    """:class:`daemon.capture.loop.BatchHandler` for the ``dedup`` queue.

    Args:
        table: the tracked table name (``schema.table``). backend: an opened index backend.
        options: validated ``[dedup]`` settings.
        observer: optional ``observer(record_id, scored)`` called with every record's scored
            candidates (:class:`ScoredCandidate` list, any score) as they are scored, before the
            transaction; ``nearsync evaluate`` uses it to measure candidate recall. It must not
            raise or block.
    """

    table: str
    backend: IndexBackend
    options: DedupOptions
    observer: Callable[[str, Sequence[ScoredCandidate]], None] | None = None
    _pair_scores: dict[tuple[str, str, int, int], float] = field(default_factory=dict, repr=False)
    """Scores of the pairs scored as candidates, by ``(a, b, a_version, b_version)`` (a pair's score
    is a function of its two documents, which their versions name), and of the unlinked pairs
    average linkage scored itself: average linkage reads them back for pairs without a link
    instead of scoring them again, in this batch and in later ones that re-cluster the same
    component, and a later lookup that finds the same pair at the same versions below the potential
    threshold takes its score from here too (:func:`score_found`'s ``known``: when both records of a
    pair are queued, each finds the other). A candidate pair dropped below the potential threshold
    before it was scored in full (:func:`score_found`'s ``floor``) has no score here. Cleared at
    :data:`PAIR_SCORES_MAX`."""
    _clustered: dict[Any, tuple[list[Cluster], list[Any]]] = field(default_factory=dict, repr=False)
    """The clusters and flags (before moderators' confirmations) of each component :meth:`_recluster`
    clustered, by everything they are a function of: the component's links (ends and scores), its
    records' document versions (order keys, pair scores, evidence against) and the pairs dismissed
    among them; the scoring configuration is the handler's (cleared when it changes). A batch
    re-clusters every component around its records, and after best-match-per-source filtering a
    part of hundreds of records is dozens of small components, most of them unchanged: those take
    their clusters from here instead of being clustered and scored again. Cleared at
    :data:`CLUSTERED_MAX`."""

    async def score_records(self, items: Sequence[tuple[str, IndexDocument]],
                            seen: dict[str, IndexDocument] | None = None,
                            exhaustive: set[str] | None = None,
                            capped: dict[str, CappedLookup] | None = None) -> list[Link]:
        """Candidates of several records from the index (one lookup), scored; returns the links
        ≥ the potential threshold. ``seen`` (optional) receives the candidate documents read;
        ``exhaustive`` (optional) the ids of the records whose lookup compared their whole scope;
        ``capped`` (optional) record id → its :class:`CappedLookup`, for the records whose lookup hit
        the candidate cap (:meth:`_revalidate` reads them, :meth:`process` stores their boundary)."""
        links: list[Link] = []
        found = await score_candidates_many(self.table, items, self.backend, self.options, self._pair_scores.get,
                                            floor=self.options.scoring.potential_threshold)
        for (rid, doc), res in zip(items, found, strict=True):
            links += self._links_of(rid, doc, res)
            if exhaustive is not None and res.exhaustive:
                exhaustive.add(rid)
            if capped is not None and res.capped and not res.exhaustive and res.scored:
                last = res.scored[-1].candidate.matched
                capped[rid] = CappedLookup(frozenset(sc.candidate.record_id for sc in res.scored), last,
                                           tuple(sc.candidate.record_id for sc in res.scored
                                                 if sc.candidate.matched == last))
            if seen is not None:
                for sc in res.scored:
                    if not sc.candidate.document.partial:  # a screened-out candidate's is no document to reuse
                        seen.setdefault(sc.candidate.record_id, sc.candidate.document)
        return links

    def _links_of(self, rid: str, doc: IndexDocument, res: ScoredCandidates) -> list[Link]:
        tally = _tally()
        if res.capped:
            log.debug("candidate cap hit", record_id=rid, cap=self.options.scoring.candidate_cap)
            tally.capped += 1
        tally.pairs += len(res.scored)  # pairs examined, whether scored now or known (reused counts those)
        tally.reused += res.reused
        if self.observer is not None:
            self.observer(rid, res.scored)
        links = []
        remember, version = self._remember, doc.version
        for sc in res.scored:
            ps = sc.score
            if ps is None:  # below the potential threshold, not scored in full: no score to keep
                continue
            va, vb = (version, sc.candidate.document.version) if sc.a == rid \
                else (sc.candidate.document.version, version)
            remember((sc.a, sc.b, va, vb), ps.score)
            if sc.flag is not None:
                links.append(Link(sc.a, sc.b, ps.score, ps.reasons, ps.summary(), (va, vb)))
        return links

    def _remember(self, key: tuple[str, str, int, int], score: float) -> None:
        """Keep a pair's score in :attr:`_pair_scores` under ``(a, b, a_version, b_version)``, the
        table cleared first once it holds :data:`PAIR_SCORES_MAX` (a bound on memory, not a
        least-recently-used order: a cleared score is only computed again)."""
        _bounded_put(self._pair_scores, key, score, PAIR_SCORES_MAX)

    async def process(self, conn: psycopg.AsyncConnection[Any], batch: Sequence[Claimed]) -> BatchResult:
        """Score the batch, then rewrite links, clusters and flags around it in one transaction.

        Candidate lookup and scoring run outside the per-table lock (workers score in parallel);
        under the lock every link is checked against the index as it is *now*: a link scored from
        a partner's older document is re-scored, one to a deleted record dropped, and the links
        other workers committed meanwhile are re-read and re-scored. So the final links depend on
        the records, not on the order or concurrency of processing.
        """
        result = BatchResult(counts={"scored": 0, "links": 0, "flags": 0})
        await self._follow_rarity(conn)
        tally = Tally()
        _batch_tally.set(tally)  # this task's own count, whatever other batches are in flight
        mine = result.of_table(batch, self.table)
        # The index says what each record is now, whatever the queued op (a queued upsert may have
        # been deleted since, and a stale delete's record may be live again).
        docs = await self.backend.get(self.table, [c.record_id for c in mine])
        items = [(c.record_id, docs[c.record_id]) for c in mine if c.record_id in docs]
        seen = dict(items)  # documents read before the lock; reused under it while their version holds
        exhaustive: set[str] = set()
        capped: dict[str, CappedLookup] = {}
        scored = await self.score_records(items, seen, exhaustive, capped)
        result.counts["scored"] += len(items)
        ids = sorted({c.record_id for c in mine})
        # Pipeline mode: statements whose result is not read go out with the next one that is read
        # (BEGIN and the lock with links_of, the link insert with delete_links_of, the cluster and
        # flag writes with COMMIT), so a one-record batch makes about half the round trips.
        async with conn.pipeline(), conn.transaction():
            await conn.execute(query("dedup_lock"), {"table": self.table})
            if any(c.seq != REPLAY_SEQ for c in mine):  # a change of the table, not the sweep's replay:
                await conn.execute(query("sweep_changed"), {"table": self.table})  # the sweep may not rest
            new_links, current = await self._revalidate(conn, ids, scored, seen, exhaustive, capped)
            await self._set_cap_bounds(conn, ids, capped)
            new_links = await self._drop_dismissed(conn, new_links, current)
            linked = {x.a for x in new_links} | {x.b for x in new_links}
            cur = await conn.execute(query("delete_links_of"), {"table": self.table, "ids": ids,
                                                                "partners": sorted(linked)})
            if new_links:
                await conn.execute(query("insert_links"), {
                    "table": self.table, "a": [x.a for x in new_links], "b": [x.b for x in new_links],
                    "score": [x.score for x in new_links], "reasons": [jsoncodec.dumps(x.reasons) for x in new_links],
                    "summary": [x.summary for x in new_links]})
            stored = StoredRows.of(await cur.fetchall(), linked)  # the batch, former partners, cluster and part mates
            # The batch's links were all replaced above, so a batch record without a new link has no
            # link at all: its component is itself, no need to walk the link graph from it.
            result.counts["flags"] = await self._recluster(conn, sorted(stored.records), current, set(ids) - linked,
                                                           stored)
        result.counts["links"] = len(new_links)
        result.counts["pairs"] = tally.pairs
        result.counts["capped"] = tally.capped  # records whose candidate list hit the cap
        result.counts["reused"] = tally.reused  # candidate pairs whose score the memo held
        result.counts["partner_checks"] = tally.partner_checks  # links outside a capped lookup, checked
        result.done = list(mine)
        return result

    async def _follow_rarity(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Score and look up with the table's active corpus snapshot (``nearsync rarity refresh``:
        token rarity and large blocks): one indexed lookup of its version per batch, the snapshot
        read only when the version changed (then the pair scores kept in :attr:`_pair_scores` are
        forgotten: they were scored with the old one). Nothing at all when ``[dedup] rarity`` and
        ``max_block`` are 0, so scores and candidates are those without a snapshot."""
        scoring = await rarity_store.following(conn, self.table, self.options.scoring,
                                               purging=self.options.max_block > 0)
        if scoring is self.options.scoring:
            return
        self.options = replace(self.options, scoring=scoring)
        self._pair_scores.clear()
        self._clustered.clear()
        snapshot = scoring.snapshot
        large = None if snapshot is None else snapshot.large_blocks
        log.info("corpus snapshot", table=self.table, version=None if snapshot is None else snapshot.version,
                 documents=None if snapshot is None else snapshot.documents,
                 large_blocks=None if large is None else len(large),
                 max_block=None if large is None else large.max_block)
        if large is not None and self.options.max_block > 0 and large.max_block != self.options.max_block:
            log.warning("the corpus snapshot was built with another max_block: run nearsync rarity refresh "
                        "to purge by the configured one", table=self.table, snapshot_max_block=large.max_block,
                        max_block=self.options.max_block)

    async def _revalidate(self, conn: psycopg.AsyncConnection[Any], ids: list[str], scored: list[Link],
                          seen: dict[str, IndexDocument],
                          exhaustive: set[str] | frozenset[str] = frozenset(),
                          capped: dict[str, CappedLookup] | None = None,
                          ) -> tuple[list[Link], dict[str, IndexDocument]]:
        """Under the lock: the batch's links, checked against the current index documents.

        * a freshly scored link whose two documents are unchanged is kept as is;
        * one whose partner changed since it was scored is re-scored; one to a deleted record goes;
        * an existing link of a batch record that the candidate lookup did not return — a link is a
          property of the pair, the other end may have made it — is re-scored too, but only while
          the pair is still a candidate pair (:meth:`_still_candidates`): :func:`is_candidate_pair`
          from a batch end's side (``exhaustive``: the batch records whose lookup compared their
          whole scope) and, when that end's lookup hit the candidate cap without scoring the partner
          (``capped``: record id → :class:`CappedLookup`), only while the batch end is within the
          partner's own cap, as the partner's last lookup bounded it (its row of
          ``nearsync.dedup_cap_bounds``, read here in one statement for the batch's such partners,
          usually none; no row: its lookup was not capped, and the pair rule alone decides). A pass
          over the settled table scores a pair when either end's lookup ranks the other within its
          cap, and a link stays on the same rule, so a link made while a key's block was small does
          not outlive the rule that made it: ``nearsync dedup --requeue`` gives the links of a clean
          pass (each partner's boundary is then either from this pass, or stale and about to be
          replaced when the partner's own turn re-decides the pair; ``bench/bench_history.py``
          measures it). A link made from older documents (a title that shared a word before an edit)
          goes the same way.
        Returns the links at or above the potential threshold, one per pair, in pair order, and the
        current documents of their records (record id → document), which :meth:`_recluster` reuses:
        those in ``seen`` (read before the lock) whose version the index confirms under the lock, and
        the others read under it.
        Raises:
            TransientIndexError: the index is unreachable.
        """
        fresh = {(x.a, x.b): x for x in scored}
        cur = await conn.execute(query("links_of"), {"table": self.table, "ids": ids})
        pairs = set(fresh) | {(a, b) for a, b in await cur.fetchall()}
        if not pairs:
            return [], {}
        versions = await self.backend.get_versions(self.table, sorted({x for p in pairs for x in p}))
        current = {rid: seen[rid] for rid, v in versions.items() if rid in seen and seen[rid].version == v}
        stale = sorted(rid for rid in versions if rid not in current)
        if stale:
            current |= await self.backend.get(self.table, stale)
        cfg = self.options.scoring
        batch = set(ids)
        out = []
        undecided: list[tuple[str, str, IndexDocument, IndexDocument]] = []
        for a, b in sorted(pairs):
            da, db = current.get(a), current.get(b)
            if da is None or db is None:
                continue
            link = fresh.get((a, b))
            if link is not None and link.versions == (da.version, db.version):
                out.append(link)
                continue
            verdict = self._still_candidates(a, b, da, db, batch, exhaustive, capped or {})
            if verdict is None:
                undecided.append((a, b, da, db))
                continue
            if not verdict:
                continue
            link = self._score_link(a, b, da, db)
            if decide(link.score, cfg) is not None:
                out.append(link)
        if undecided:
            bounds = await self._cap_bounds(conn, sorted({x for a, b, _, _ in undecided for x in (a, b)
                                                          if x not in batch}))
            for a, b, da, db in undecided:  # one end in the batch, whose lookup left the other out
                x, dx, y, dy = (a, da, b, db) if b not in batch else (b, db, a, da)
                if self._within_bound(y, dy, x, dx, bounds):
                    link = self._score_link(a, b, da, db)
                    if decide(link.score, cfg) is not None:
                        out.append(link)
            out.sort(key=lambda x: (x.a, x.b))
        return out, current

    def _still_candidates(self, a: str, b: str, da: IndexDocument, db: IndexDocument, batch: set[str],
                          exhaustive: set[str] | frozenset[str], capped: dict[str, CappedLookup]) -> bool | None:
        """Whether the pair (``a``, ``b``) is a candidate pair from the side of either end in the
        batch (:meth:`_revalidate`): True when :func:`is_candidate_pair` holds from an end whose
        lookup did not hit the cap or scored the other end; None when it holds only from ends whose
        capped lookup left the other end out and that other end is outside the batch (its own
        lookup decides); False otherwise. Pure, no I/O."""
        open_question = False
        for x, dx, y, dy in ((a, da, b, db), (b, db, a, da)):
            if x not in batch or not is_candidate_pair(dx, dy, self.options, exhaustive=x in exhaustive):
                continue
            top = capped.get(x)
            if top is None or y in top.scored:
                return True
            open_question = open_question or y not in batch
        return None if open_question else False

    async def _cap_bounds(self, conn: psycopg.AsyncConnection[Any], partners: list[str]) -> dict[str, tuple[int, frozenset[str]]]:
        """The stored boundaries of ``partners``' last capped lookups (named query ``cap_bounds_of``):
        record id → (``matched``, ``tied`` ids); a partner without one is absent. Counted in
        :attr:`Tally.partner_checks`."""
        _tally().partner_checks += len(partners)
        cur = await conn.execute(query("cap_bounds_of"), {"table": self.table, "ids": partners})
        return {rid: (int(matched), frozenset(tied)) for rid, matched, tied in await cur.fetchall()}

    def _within_bound(self, partner: str, dp: IndexDocument, rid: str, doc: IndexDocument,
                      bounds: dict[str, tuple[int, frozenset[str]]]) -> bool:
        """Whether ``rid`` (document ``doc``) is within the cap of ``partner``'s last lookup (pure):
        ``partner`` has a boundary in ``bounds`` and ``doc`` holds more of ``partner``'s lookup keys
        than its last scored candidate did, or as many and is one of the tied; a partner without a
        boundary (its lookup was not capped, or it was never processed) by the pair rule alone
        (:func:`is_candidate_pair`)."""
        bound = bounds.get(partner)
        if bound is None:
            return is_candidate_pair(dp, doc, self.options, exhaustive=False)
        matched = shared_keys(query_keys(dp, self.options), doc)
        return matched > bound[0] or (matched == bound[0] and rid in bound[1])

    async def _set_cap_bounds(self, conn: psycopg.AsyncConnection[Any], ids: list[str],
                              capped: dict[str, CappedLookup]) -> None:
        """Under the lock: store the boundary of each capped lookup of the batch and remove the rows
        of its other records (``set_cap_bounds``; no result is read)."""
        rows = [(rid, capped[rid]) for rid in ids if rid in capped]
        uncapped = [rid for rid in ids if rid not in capped]
        tied = [t for _, c in rows for t in c.tied]
        offs, off = [], 0
        for _, c in rows:
            offs.append(off)
            off += len(c.tied)
        await conn.execute(query("set_cap_bounds"), {
            "table": self.table, "uncapped": uncapped, "ids": [r for r, _ in rows],
            "matched": [c.matched for _, c in rows], "offs": offs, "counts": [len(c.tied) for _, c in rows],
            "tied": tied})

    def _score_link(self, a: str, b: str, da: IndexDocument, db: IndexDocument) -> Link:
        """The pair (``a`` before ``b``) scored from its two documents, with their versions."""
        return self._link(a, b, da, db, self._score(da, db))

    def _score(self, da: IndexDocument, db: IndexDocument) -> PairScore:
        """The pair of documents ``da``, ``db`` (in canonical order) scored, and counted."""
        _tally().pairs += 1
        return score_sides(side_of(da), side_of(db), self.options.scoring)

    @staticmethod
    def _link(a: str, b: str, da: IndexDocument, db: IndexDocument, ps: PairScore) -> Link:
        """The :class:`Link` of the pair (``a`` before ``b``) scored ``ps`` from ``da`` and ``db``."""
        return Link(a, b, ps.score, ps.reasons, ps.summary(), (da.version, db.version))

    async def _drop_dismissed(self, conn: psycopg.AsyncConnection[Any], links: list[Link],
                              docs: dict[str, IndexDocument]) -> list[Link]:
        """Leave out pairs a moderator dismissed (``not_duplicate`` in ``nearsync.pair_decisions``)
        while both records are unchanged (:func:`decision_holds`); an edit lifts the decision."""
        if not links:
            return links
        ends = sorted({x.a for x in links} | {x.b for x in links})
        dismissed = (await self._decisions_among(conn, ends, docs))["not_duplicate"]
        return [x for x in links if (x.a, x.b) not in dismissed]

    async def _decisions_among(self, conn: psycopg.AsyncConnection[Any], comp: list[str],
                               docs: dict[str, IndexDocument]) -> dict[str, set[tuple[str, str]]]:
        """Moderators' decisions on pairs of records of ``comp`` that still hold
        (:func:`decision_holds`), in one query: ``{"duplicate": pairs, "not_duplicate": pairs}``
        (canonical pairs)."""
        cur = await conn.execute(query("decisions_among"), {"table": self.table, "ids": comp})
        return self._holding(await cur.fetchall(), docs)

    @staticmethod
    def _holding(rows: Sequence[Sequence[Any]], docs: dict[str, IndexDocument]) -> dict[str, set[tuple[str, str]]]:
        """The decisions of ``decisions_among`` rows that still hold for ``docs`` (record id ->
        current document, :func:`decision_holds`): ``{"duplicate": pairs, "not_duplicate": pairs}``."""
        out: dict[str, set[tuple[str, str]]] = {"duplicate": set(), "not_duplicate": set()}
        for a, b, decision, *stored in rows:
            if decision in out and decision_holds(stored, docs.get(a), docs.get(b)):
                out[decision].add((a, b))
        return out

    @staticmethod
    def _without_dismissed_joins(links: list[StoredLink], dismissed: set[tuple[str, str]]) -> list[StoredLink]:
        """``links`` less those that would put a dismissed pair into one cluster through other
        records (:func:`~daemon.dedup.clusters.respect_cannot_links`)."""
        if len(links) < 2 or not dismissed:
            return links
        kept = {(a, b) for a, b, _ in respect_cannot_links([(x.a, x.b, x.score) for x in links], dismissed)}
        return [x for x in links if (x.a, x.b) in kept]

    @staticmethod
    def _keep_confirmed(flags: list[tuple[str, str, str, str, Evidence]],
                        confirmed: set[tuple[str, str]]) -> list[tuple[str, str, str, str, Evidence]]:
        """Flags ``(member, flag, original, cluster_id, link)`` with the ones a moderator confirmed
        (``duplicate`` for (member, original), still holding) kept ``duplicate``; once an ad is
        edited the score decides again."""
        if not confirmed:
            return flags
        return [(m, "duplicate" if canonical(m, o) in confirmed else flag, o, cid, link)
                for m, flag, o, cid, link in flags]

    def _direct(self, member: str, original: str, docs: dict[str, IndexDocument], via: StoredLink,
                scored: PairScore | None = None) -> Evidence:
        """The (member, original) pair scored directly, for a member linked to it only through others.

        Its flag then says what relates the two records the flag names; the summary says which
        record links them. Below the potential threshold the member is still flagged (as
        ``potential_duplicate``, for a moderator) because its cluster holds it. ``scored``: the
        pair as :meth:`_score` already scored it from the same ``docs`` (under the same lock),
        reused instead of scoring it again (``score_pair`` is a function of the two documents).
        """
        a, b = canonical(member, original)
        da, db = docs.get(a), docs.get(b)
        other = via.b if via.a == member else via.a
        if da is None or db is None:
            return StoredEvidence(via, f"linked via #{other}: ")
        link = self._link(a, b, da, db, scored) if scored is not None else self._score_link(a, b, da, db)
        link.summary = f"linked via #{other}; directly: {link.summary}"
        return link

    async def _recluster(self, conn: psycopg.AsyncConnection[Any], seeds: list[str],
                         known: dict[str, IndexDocument], unlinked: set[str] | frozenset[str] = frozenset(),
                         stored: StoredRows | None = None) -> int:
        """Recompute clusters and flags of the components around ``seeds`` (their parts, when a
        component is over ``max_component``: :meth:`_parts`); returns flags written (call in a
        transaction, best in pipeline mode: the writes are sent, not waited for).

        ``known``: documents already read under the same lock (their ids that are absent from it are
        fetched; an id in ``known`` whose record is gone is simply missing from it). ``unlinked``:
        seeds known to have no link (singleton components: their clusters and flags are cleared
        without walking the link graph from them). ``stored``: the part and cluster rows read in the
        same transaction (:class:`StoredRows`; rows equal to them are not written again)."""
        cfg = self.options.scoring
        start = [x for x in seeds if x not in unlinked]
        # Every seed known to have no link is its own part: no walk of the link graph from it.
        parts = await self._parts(conn, start) if start else []
        comp = sorted({n for p in parts for n in p.nodes} | set(seeds))
        links = [x for p in parts for x in p.links]
        # Only linked records are clustered and flagged, so only their documents are needed (most of
        # a batch's records have no link at all).
        ends = sorted({x.a for x in links} | {x.b for x in links})
        # The decisions among them are sent first and read once the documents are in (one round trip
        # less: the documents come through the backend, on a connection of its own).
        deciding = await conn.execute(query("decisions_among"), {"table": self.table, "ids": ends}) if links else None
        docs = {rid: known[rid] for rid in ends if rid in known}
        missing = [rid for rid in ends if rid not in docs]
        if missing:
            docs |= await self.backend.get(self.table, missing)
        order = {rid: order_key(rid, docs.get(rid)) for rid in ends}  # each record's key, computed once
        if self.options.best_match_per_source:
            links = mutual_best_per_source(links, {rid: d.fields.get("source") for rid, d in docs.items()},
                                           order.__getitem__)
        decided = self._holding(await deciding.fetchall(), docs) if deciding is not None and links else {}
        links = self._without_dismissed_joins(links, decided.get("not_duplicate", set()))
        scored: dict[tuple[str, str], PairScore] = {}  # pairs scored below, reused by _direct
        if cfg.cluster.method == "average":
            dismissed = decided.get("not_duplicate", set())

            def pair_score(a: str, b: str) -> float:
                """A pair without a link: its score from the documents (0 when dismissed or gone)."""
                x, y = canonical(a, b)
                if (x, y) in dismissed or x not in docs or y not in docs:
                    return 0.0
                memo_key = (x, y, docs[x].version, docs[y].version)
                known = self._pair_scores.get(memo_key)
                if known is not None:
                    return known
                ps = scored[(x, y)] = self._score(docs[x], docs[y])  # its link only if _direct needs it
                self._remember(memo_key, ps.score)
                return ps.score

            def apart(a: str, b: str) -> bool:
                """A pair below the link threshold with evidence against a match: never one cluster."""
                return a in docs and b in docs and evidence_against(side_of(docs[a]), side_of(docs[b]), cfg)

            def cluster(edges: Sequence[tuple[str, str, float]]) -> list[Cluster]:
                return average_link_clusters(edges, order, pair_score, threshold=cfg.potential_threshold,
                                             strict_threshold=cfg.duplicate_threshold, max_size=cfg.cluster.max_size,
                                             apart=apart)
        else:
            def cluster(edges: Sequence[tuple[str, str, float]]) -> list[Cluster]:
                return build_clusters(edges, order, max_size=cfg.cluster.max_size, min_density=cfg.cluster.min_density,
                                      resolution=cfg.cluster.resolution, seed=cfg.cluster.seed)
        adjacent: dict[str, list[StoredLink]] = defaultdict(list)
        for x in links:
            adjacent[x.a].append(x)
            adjacent[x.b].append(x)
        clusters: list[Cluster] = []
        flags: list[tuple[str, str, str, str, Evidence]] = []
        dismissed_pairs = decided.get("not_duplicate", set())
        for nodes, own_links in link_components(links):
            key = (tuple(sorted(own_links)),
                   tuple((rid, docs[rid].version if rid in docs else None) for rid in nodes),
                   tuple(sorted(p for p in dismissed_pairs if p[0] in nodes and p[1] in nodes)))
            done = self._clustered.get(key)
            if done is None:
                made = cluster(own_links)
                done = (made, self._flags_of(made, adjacent, order, docs, scored))
                self._remember_clustered(key, done)
            clusters += done[0]
            flags += done[1]
        clusters.sort(key=lambda c: order[c.original])
        members = [(m, cl.id, cl.original) for cl in clusters for m in cl.members]
        flags = self._keep_confirmed(flags, decided.get("duplicate", set()))
        # No result is read: in the caller's pipeline the writes go out with its COMMIT.
        await self._write_parts(conn, comp, parts, stored)
        await self._write_clusters_and_flags(conn, comp, members, flags, docs, stored)
        return len(flags)

    def _flags_of(self, clusters: list[Cluster], adjacent: dict[str, list[StoredLink]],
                  order: dict[str, Any], docs: dict[str, IndexDocument],
                  scored: dict[tuple[str, str], PairScore]) -> list[tuple[str, str, str, str, Evidence]]:
        """The flag of every non-original member of ``clusters``: ``(member, flag, original,
        cluster_id, evidence)``, the evidence its link to the original (a :class:`StoredEvidence`) or,
        linked to it only through others, the pair scored directly (:meth:`_direct`).

        Args:
            adjacent: record id -> its links (among the clustered ones). order: record id -> order key.
            docs: the records' documents. scored: pairs already scored from ``docs`` (reused).
        """
        cfg = self.options.scoring
        flags: list[tuple[str, str, str, str, Evidence]] = []
        for cl in clusters:
            inside = set(cl.members)
            for m in cl.members[1:]:  # the original comes first
                pair = canonical(m, cl.original)
                own = next((x for x in adjacent[m] if (x.a, x.b) == pair), None)
                evidence: Evidence
                if own is None:  # linked to the original through others: score the pair itself
                    # the member's strongest link in the cluster; on a tie the partner created first
                    # (not the walk's row order, which is the plan's), so the summary is a function of the data
                    via = min((x for x in adjacent[m] if x.a in inside and x.b in inside),
                              key=lambda x: (-x.score, order[x.b if x.a == m else x.a]))
                    evidence = self._direct(m, cl.original, docs, via, scored.get(pair))
                else:
                    evidence = StoredEvidence(own)
                flags.append((m, decide(evidence.score, cfg) or "potential_duplicate", cl.original, cl.id, evidence))
        return flags

    def _remember_clustered(self, key: Any, done: tuple[list[Cluster], list[Any]]) -> None:
        """Keep one component's clusters and flags in :attr:`_clustered` under ``key``, the table
        cleared first once it holds :data:`CLUSTERED_MAX` (a bound on memory: a forgotten component
        is only clustered again)."""
        _bounded_put(self._clustered, key, done, CLUSTERED_MAX)

    async def _walk(self, conn: psycopg.AsyncConnection[Any], start: list[str], min_score: float,
                    limit: int) -> tuple[list[str], list[StoredLink]]:
        """The component(s) of ``start`` over the links scored at least ``min_score`` (at most
        ``limit`` records) and those links among them, ends and scores only (query ``component_links``)."""
        cur = await conn.execute(query("component_links"), {"table": self.table, "ids": start,
                                                            "max_nodes": limit, "min_score": min_score})
        row = await cur.fetchone()
        assert row is not None  # an aggregate always returns its row
        nodes, a, b, score = row
        return list(nodes or ()), _stored_links(a, b, score)

    async def _walk_or_around(self, conn: psycopg.AsyncConnection[Any], start: list[str], min_score: float,
                              limit: int) -> tuple[list[str], list[StoredLink]]:
        """:meth:`_walk`'s answer, from the links touching ``start`` alone when none of them leads
        out of ``start`` (query ``links_around``): ``start`` is then a union of whole components over
        the links scored at least ``min_score``, so the walk from it finds ``start`` itself (fewer
        than ``limit`` records) and the links among them. Otherwise the walk (one more round trip).

        The first walk of a batch starts from records whose stored parts :meth:`process` already
        holds (``delete_links_of`` returns every member of the parts of the batch records and of
        their partners, old and new), so it is closed unless a component grew past
        ``max_component`` (its parts are cut at a higher level)."""
        if len(start) < limit:
            cur = await conn.execute(query("links_around"), {"table": self.table, "ids": start, "min_score": min_score})
            row = await cur.fetchone()
            assert row is not None  # aggregates always return their row
            closed, a, b, score = row
            if closed:
                return list(dict.fromkeys(start)), _stored_links(a, b, score)
        return await self._walk(conn, start, min_score, limit)

    async def _parts(self, conn: psycopg.AsyncConnection[Any], start: list[str]) -> list[Part]:
        """The parts of the link graph holding ``start``: their whole components when each holds
        at most ``max_component`` records, else the score ladder's parts
        (:func:`daemon.dedup.parts.cut_into_parts`), so that the clusters are a function of the
        links whatever the order records are processed in. The first walk, from all of ``start``,
        is :meth:`_walk_or_around`; the ladder's walks from single records are :meth:`_walk`."""
        cap = self.options.max_component
        walks = 0

        async def walk(ids: list[str], min_score: float, limit: int) -> tuple[list[str], list[StoredLink]]:
            nonlocal walks
            walks += 1
            if walks == 1:
                return await self._walk_or_around(conn, ids, min_score, limit)
            return await self._walk(conn, ids, min_score, limit)

        parts = await cut_into_parts(start, walk, cap=cap, levels=part_levels(self.options.scoring.potential_threshold))
        for p in parts:
            if p.truncated:
                log.warning("component truncated", size=len(p.nodes), max_component=cap, level=p.level)
        return parts

    async def _clear(self, name: str, conn: psycopg.AsyncConnection[Any], comp: list[str], keep: list[str],
                     known: set[str] | frozenset[str] = frozenset(), rows: dict[str, Any] | None = None) -> None:
        """Delete the rows of the records of ``comp`` that are not in ``keep`` with the query ``name``
        (``clear_parts_of``, ``clear_clusters_of`` or ``clear_flags_of``); no statement when there
        are none, no result read. Only the leaving records are sent: they are few, found through the
        primary key, where the whole component with the records to keep filtered a scan of the
        table (1-2 ms per table for a part of 773 records); and of them not those in ``known``
        (records whose row is known: in ``rows``, else none) that have no row."""
        kept = set(keep)
        held = rows or {}
        gone = [rid for rid in comp if rid not in kept and (rid not in known or rid in held)]
        if gone:
            await conn.execute(query(name), {"table": self.table, "ids": gone})

    async def _write_parts(self, conn: psycopg.AsyncConnection[Any], comp: list[str], parts: list[Part],
                           stored: StoredRows | None = None) -> None:
        """Replace the stored parts (``nearsync.dedup_parts``) of the records ``comp``: a row for each
        member of a part of two or more records; no result is read. Rows equal to ``stored``'s are
        not sent (a part of 782 records: 2-8 ms of upserting unchanged rows)."""
        rows = [(n, p.part_id, p.level) for p in parts if len(p.nodes) > 1 for n in p.nodes]
        if stored is None:
            stored = StoredRows()
        await self._clear("clear_parts_of", conn, comp, [r[0] for r in rows], stored.parts_known, stored.parts)
        rows = [r for r in rows if stored.parts.get(r[0]) != (r[1], r[2])]
        if rows:
            await conn.execute(query("upsert_parts"), {"table": self.table, "record_ids": [r[0] for r in rows],
                                                       "part_ids": [r[1] for r in rows],
                                                       "levels": [r[2] for r in rows]})

    async def _write_clusters_and_flags(self, conn: psycopg.AsyncConnection[Any], comp: list[str],
                                        members: list[tuple[str, str, str]],
                                        flags: list[tuple[str, str, str, str, Evidence]],
                                        docs: dict[str, IndexDocument], stored: StoredRows | None = None) -> None:
        """Replace the cluster rows and flags of the component ``comp`` (no result is read); rows and
        flags that are unchanged are left as they are (no new row versions; cluster rows equal to
        ``stored``'s are not even sent). A flag whose evidence is a stored link
        (:class:`StoredEvidence`) is sent as the link's pair (and summary prefix), its score, reasons
        and summary copied from the row by the query."""
        if stored is None:
            stored = StoredRows()
        await self._clear("clear_clusters_of", conn, comp, [m[0] for m in members], stored.clusters_known,
                          stored.clusters)
        members = [m for m in members if stored.clusters.get(m[0]) != (m[1], m[2])]
        if members:
            await conn.execute(query("upsert_clusters"), {
                "table": self.table, "record_ids": [m[0] for m in members],
                "cluster_ids": [m[1] for m in members], "original_ids": [m[2] for m in members]})
        await self._clear("clear_flags_of", conn, comp, [f[0] for f in flags])
        if flags:
            scored = [(None, None, x.score, jsoncodec.dumps(x.reasons), x.summary) if isinstance(x, Link)
                      else (x.link.a, x.link.b, None, None, x.prefix) for *_, x in flags]
            await conn.execute(query("upsert_flags"), {
                "table": self.table, "record_ids": [f[0] for f in flags], "flags": [f[1] for f in flags],
                "original_ids": [f[2] for f in flags], "cluster_ids": [f[3] for f in flags],
                "link_a": [x[0] for x in scored], "link_b": [x[1] for x in scored],
                "scores": [x[2] for x in scored], "reasons": [x[3] for x in scored],
                "summaries": [x[4] for x in scored],
                "sig_versions": [int((docs.get(f[0]).signature if docs.get(f[0]) else {}).get("v", 0)) for f in flags]})
