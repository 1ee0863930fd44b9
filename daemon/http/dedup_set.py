"""``POST /v1/dedup-set``: collapse near-duplicates inside a ranked result set (search results, a feed).

Each item is compared by its sorted bottom-k shingle sketch (``sig["bottomk"]``, stored in the
index) with :func:`daemon.signatures.bottomk_similar`, the merge comparison that stops as soon as
the threshold is decided. Items are taken in ranking order; an item joins the first group whose
first member (the one to keep) it is similar to, else it starts a group. Only pairs sharing at least
one sketch value are compared (an estimate with no shared value is 0), found through a small
inverted index of the group leaders' values, so a set of distinct items costs little more than the
look-ups.

Sketches of stored records are kept in an LRU :class:`SignatureCache` keyed by record id and
document version, so a set seen again needs no index round trip; the grouping of a set of ids is
remembered too (keyed by every id with its version and the threshold, so it is exact).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from pydantic import BaseModel

from daemon.http.check import InvalidInput, ad_fields, build_document
from daemon.http.models import validate
from daemon.backends.base import IndexBackend
from daemon.signatures import SignatureParams, bottomk_similar


class SignatureCache:
    """LRU cache of bottom-k sketches: record id -> (document version, sketch, time cached).

    A look-up with a version hits only that version; without one, an entry younger than ``ttl_s``
    seconds hits (the index may have a newer version meanwhile: ``ttl_s`` bounds the staleness).

    Args:
        max_size: entries kept (least recently used dropped first). ttl_s: see above (seconds).
    """

    def __init__(self, max_size: int, ttl_s: float) -> None:
        self.max_size = max_size
        self.ttl_s = ttl_s
        self._data: OrderedDict[str, tuple[int, tuple[int, ...], float]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        """Entries held."""
        return len(self._data)

    def get(self, record_id: str, version: int | None, now: float) -> tuple[int, tuple[int, ...]] | None:
        """``(version, sketch)`` if cached and fresh (see the class), else None. ``now``: monotonic seconds."""
        e = self._data.get(record_id)
        if e is None or (version is not None and e[0] != version) or (version is None and now - e[2] > self.ttl_s):
            self.misses += 1
            return None
        self._data.move_to_end(record_id)
        self.hits += 1
        return e[0], e[1]

    def put(self, record_id: str, version: int, sketch: tuple[int, ...], now: float) -> None:
        """Store a sketch (replacing an older version), evicting the least recently used beyond ``max_size``."""
        self._data[record_id] = (version, sketch, now)
        self._data.move_to_end(record_id)
        while len(self._data) > self.max_size:
            self._data.popitem(last=False)


def shared_value_counts(sketches: Sequence[Sequence[int]]) -> np.ndarray:
    """How many sketch values each pair of items shares.

    All values are sorted once; equal values then sit in runs, and entries ``d`` apart in the
    sorted order that hold the same value are one shared value of their two owners. Offsets
    ``d = 1, 2, ...`` are counted with one vectorised comparison each (``np.bincount``), until an
    offset finds no equal pair (runs are contiguous, so no longer offset can). Unrelated items
    share almost nothing, so this ends after an offset or two; no BLAS call (whose threads add
    latency jitter on small products) is involved.

    Args:
        sketches: n sketches of distinct non-negative 63-bit values (as :func:`bottomk_sketch` makes them).
    Returns:
        int64 array ``(n, n)``, symmetric; the diagonal holds each sketch's own size.
    """
    n = len(sketches)
    lens = np.fromiter((len(s) for s in sketches), dtype=np.int64, count=n)
    total = int(lens.sum())
    pairs: list[np.ndarray] = []
    if total:
        values = np.fromiter(chain.from_iterable(sketches), dtype=np.int64, count=total)
        owner = np.repeat(np.arange(n, dtype=np.int64), lens)
        order = np.argsort(values, kind="stable")
        values, owner = values[order], owner[order]
        for d in range(1, total):
            same = values[:-d] == values[d:]
            if not same.any():
                break
            pairs.append(owner[:-d][same] * n + owner[d:][same])
    flat = np.concatenate(pairs) if pairs else np.zeros(0, dtype=np.int64)
    m = np.bincount(flat, minlength=n * n).reshape(n, n)
    m = m + m.T
    m[np.diag_indices(n)] = lens
    return m


def group_sketches(sketches: Sequence[Sequence[int]], threshold: float, k: int) -> list[list[int]]:
    """Greedy leader grouping of sketches in ranking order.

    Each item joins the first group (in ranking order) whose leader it matches by
    :func:`bottomk_similar`; otherwise it leads a new group. A leader is compared only when the two
    share at least ``threshold * min(k, max(len_a, len_b))`` sketch values (counted for all pairs
    at once by :func:`shared_value_counts`): the union sample holds at least that many values and
    the matches are a subset of the shared ones, so pairs below it cannot reach the threshold (the
    filter is exact, not a heuristic).

    Args:
        sketches: sorted bottom-k sketches, one per item, in ranking order (may be empty).
        threshold: bottom-k Jaccard threshold in (0, 1]. k: sketch size.
    Returns:
        Groups as lists of item positions, each in ranking order, groups ordered by their first
        member; every item is in exactly one group (singletons included).
    """
    n = len(sketches)
    if n == 0:
        return []
    shared = shared_value_counts(sketches)
    lens = np.diag(shared)
    need = threshold * np.minimum(k, np.maximum(lens[:, None], lens[None, :]))
    possible = (shared >= need) & (lens[:, None] > 0) & (lens[None, :] > 0)
    group_of: dict[int, int] = {}  # leader position -> group number
    groups: list[list[int]] = []
    for i in range(n):
        for j in np.flatnonzero(possible[i, :i]).tolist():
            g = group_of.get(j)
            if g is not None and bottomk_similar(sketches[j], sketches[i], threshold, k):
                groups[g].append(i)
                break
        else:
            group_of[i] = len(groups)
            groups.append([i])
    return groups


def unique_refs(refs: Sequence[tuple[str, int | None]]) -> list[tuple[str, int | None]]:
    """Each record id once, at its first place in ``refs`` (with that place's version); order kept.

    Args:
        refs: ``(record id, version or None)`` in ranking order.
    Returns:
        The same pairs without the later repeats of an id.
    """
    seen: set[str] = set()
    out: list[tuple[str, int | None]] = []
    for rid, version in refs:
        if rid not in seen:
            seen.add(rid)
            out.append((rid, version))
    return out


@dataclass
class SetDeduplicator:
    """Serves ``/v1/dedup-set`` for one table.

    Args:
        table: tracked table. backend: an opened backend. params: signature parameters (``bottomk_k``).
        model: the request model (:attr:`RequestModels.dedup_set`: ids or documents, at most
            ``--max-set`` items, threshold in (0, 1]).
        cache: the signature cache.
    """

    table: str
    backend: IndexBackend
    params: SignatureParams
    model: type[BaseModel]
    cache: SignatureCache
    results_kept: int = 4096
    _results: OrderedDict[tuple[Any, ...], list[list[int]]] = field(default_factory=OrderedDict, repr=False)

    def _grouped(self, key: tuple[Any, ...] | None, sketches: list[tuple[int, ...]], threshold: float) -> list[list[int]]:
        """:func:`group_sketches`, remembered per ``key`` (ids with versions, threshold) in a small LRU."""
        if key is not None:
            hit = self._results.get(key)
            if hit is not None:
                self._results.move_to_end(key)
                return hit
        groups = group_sketches(sketches, threshold, self.params.bottomk_k)
        if key is not None:
            self._results[key] = groups
            while len(self._results) > self.results_kept:
                self._results.popitem(last=False)
        return groups

    def _items(self, body: Any) -> tuple[str, list[Any], float]:
        req = validate(self.model, body)
        ids, docs = getattr(req, "ids"), getattr(req, "documents")
        if (ids is None) == (docs is None):
            raise InvalidInput("ids", "give exactly one of ids or documents")
        threshold = float(getattr(req, "threshold"))
        if ids is not None:
            return "ids", unique_refs(ids), threshold
        return "documents", list(docs), threshold

    async def _id_sketches(self, items: list[tuple[str, int | None]]) -> tuple[
            list[str], list[tuple[int, ...]], list[str], int, list[int | None]]:
        """Refs, sketches (empty for missing records), missing ids, how many came from the cache, versions.

        ``items`` are validated ``(id, version or None)`` pairs, each id once (:func:`unique_refs`).
        """
        refs = [rid for rid, _ in items]
        wanted = [version for _, version in items]
        now = time.monotonic()
        sketches: list[tuple[int, ...] | None] = []
        todo: list[str] = []
        versions: list[int | None] = []
        for rid, version in zip(refs, wanted):
            hit = self.cache.get(rid, version, now)
            sketches.append(hit[1] if hit else None)
            versions.append(hit[0] if hit else None)
            if hit is None:
                todo.append(rid)
        cached = len(refs) - len(todo)
        missing: list[str] = []
        if todo:
            found = await self.backend.get_sketches(self.table, sorted(set(todo)))
            for rid, (version, sketch) in found.items():
                self.cache.put(rid, version, sketch, now)
            for n, rid in enumerate(refs):
                if sketches[n] is None:
                    hit = found.get(rid)
                    if hit is None:
                        missing.append(rid)
                        sketches[n] = ()
                    else:
                        versions[n], sketches[n] = hit
        return refs, [s or () for s in sketches], missing, cached, versions

    def _doc_sketches(self, items: list[BaseModel]) -> tuple[list[Any], list[tuple[int, ...]]]:
        """Refs and sketches of the validated documents (instances of the ad model).

        Raises:
            InvalidInput: a bad document, or two documents with the same id.
        """
        refs: list[Any] = []
        sketches: list[tuple[int, ...]] = []
        seen: dict[str, int] = {}
        for n, it in enumerate(items):
            fields, rid = ad_fields(it, scope="global", prefix=("documents", n))
            if rid is not None:
                if rid in seen:
                    raise InvalidInput(f"documents[{n}].id", f"repeats the id of documents[{seen[rid]}]")
                seen[rid] = n
            doc = build_document(self.table, fields, self.params, "global", rid)
            refs.append(rid if rid is not None else n)
            sketches.append(tuple(doc.signature.get("bottomk") or ()))
        return refs, sketches

    async def dedup(self, body: Any) -> dict[str, Any]:
        """Group the near-duplicates of a set.

        Args:
            body: ``{"ids": [id | {"id", "version"}, ...]}`` or ``{"documents": [{role: value}, ...]}``
                in ranking order, optional ``"threshold"`` (bottom-k Jaccard, (0, 1]). An id given
                more than once counts once, at its first place (its later places are dropped: an
                item is never grouped with itself); two documents with the same ``id`` are refused.
        Returns:
            ``{"groups": [[ref, ...], ...]`` (near-duplicate groups of two or more, first member to
            keep), ``"keep": [ref, ...]`` (first member of every group and every singleton, in ranking
            order), ``"missing": [id, ...]`` (ids not in the index; kept, never grouped),
            ``"threshold"``, ``"cached": int`` (sketches served from the cache)}. A ref is the record
            id, or for a document without ``id`` its position in the list.
        Raises:
            InvalidInput: a bad body (the field is named). TransientIndexError: the index is unreachable.
        """
        kind, items, threshold = self._items(body)
        missing: list[str] = []
        cached = 0
        key: tuple[Any, ...] | None = None
        if kind == "ids":
            refs, sketches, missing, cached, versions = await self._id_sketches(items)
            key = (threshold, *zip(refs, versions))
        else:
            refs, sketches = self._doc_sketches(items)
        groups = self._grouped(key, sketches, threshold)
        return {"groups": [[refs[i] for i in g] for g in groups if len(g) > 1],
                "keep": [refs[g[0]] for g in sorted(groups, key=lambda g: g[0])],
                "missing": missing, "threshold": threshold, "cached": cached}
