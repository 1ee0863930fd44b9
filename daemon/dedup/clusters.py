"""Duplicate clusters from scored links.

Two methods (``[dedup.cluster] method``):

* ``average`` (the default, :func:`average_link_clusters`): agglomerative clustering with average
  linkage (UPGMA; Sokal & Michener 1958), stopped at the potential threshold: two groups merge only
  when the mean score over *all* their cross pairs reaches it, so one strong link cannot chain a
  record into a group it does not resemble as a whole; two groups that each hold confirmed
  duplicates merge only at the duplicate threshold.
* ``leiden`` (:func:`build_clusters`): union-find, then community detection on weak components:

Similarity is not transitive, and one weak link can chain unrelated items into one component
("Finding similar items", seed 002). So a connected component that is larger than ``max_size``
or sparser than ``min_density`` is split with the Leiden algorithm (Traag, Waltman & van Eck
2019, "From Louvain to Leiden: guaranteeing well-connected communities", Sci. Rep. 9:5233; via
``leidenalg`` + ``igraph``), edge weights = scores, seeded and deterministic; when ``leidenalg``
cannot be imported, networkx's Louvain (Blondel et al. 2008) is used instead. Splitting recurses
into the parts that still break a rule, as long as the algorithm still divides them.

With either method, each cluster's **original** is its earliest member by ``order_key`` (created_at then id); the
cluster id is derived from the original's id only, so it is stable across runs while the original
stays the same.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import xxhash

try:
    import igraph
    import leidenalg

    _HAVE_LEIDEN = True
except ImportError:  # pragma: no cover - depends on the environment
    _HAVE_LEIDEN = False

Link = tuple[Hashable, Hashable, float]


@dataclass(frozen=True, slots=True)
class Cluster:
    """One group of duplicates.

    Attributes:
        id: stable id, ``"c"`` + 16 hex digits of xxh64 of ``str(original)``.
        original: the earliest member (by ``order_key``), the one the others duplicate.
        members: all members, original first, then in ``order_key`` order (>= 2 members).
    """

    id: str
    original: Hashable
    members: tuple[Hashable, ...]


def cluster_id(original: Hashable) -> str:
    """Stable cluster id for an original record id: ``"c"`` + xxh64 hex of ``str(original)``."""
    return "c" + xxhash.xxh64_hexdigest(str(original).encode("utf-8"))


class UnionFind:
    """Disjoint sets over hashable items with path compression (Tarjan 1975).

    Attributes:
        parent: item -> parent item; every item ever passed to :meth:`find` or :meth:`union`.
    """

    def __init__(self) -> None:
        self.parent: dict[Hashable, Hashable] = {}

    def find(self, x: Hashable) -> Hashable:
        """The representative of ``x``'s set (``x`` is added as a singleton when new)."""
        parent = self.parent
        root = parent.setdefault(x, x)
        if root == x:  # a representative (most calls): one dictionary look-up
            return x
        while (up := parent[root]) != root:
            root = up
        while (up := parent[x]) != root:  # path compression
            parent[x], x = root, up
        return root

    def union(self, a: Hashable, b: Hashable) -> None:
        """Merge the sets of ``a`` and ``b`` (``a``'s representative stays the representative)."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra

    def components(self) -> dict[Hashable, list[Hashable]]:
        """Representative -> members of its set, members in the order they were first seen."""
        out: dict[Hashable, list[Hashable]] = defaultdict(list)
        for node in self.parent:
            out[self.find(node)].append(node)
        return dict(out)


def _link_graph(links: Iterable[Link]) -> tuple[dict[frozenset, float], UnionFind]:
    """The graph of ``links``: ``{frozenset((a, b)): best score}`` (self-links dropped, a pair
    linked twice keeps its higher score) and the union-find of its connected components."""
    edges: dict[frozenset, float] = {}
    uf = UnionFind()
    for a, b, score in links:
        if a == b:
            continue
        e = frozenset((a, b))
        edges[e] = max(float(score), edges.get(e, float("-inf")))
        uf.union(a, b)
    return edges, uf


def _components(edges: Mapping[frozenset, float], uf: UnionFind) -> list[tuple[list[Hashable], dict[frozenset, float]]]:
    """Each connected component of :func:`_link_graph`'s graph, in one pass over the edges.

    Returns:
        ``(nodes, edges)`` per component: its nodes in the order :meth:`UnionFind.components` gives,
        and its edges (``{frozenset((a, b)): score}``) in their order in ``edges``.
    """
    comps = uf.components()
    sub: dict[Hashable, dict[frozenset, float]] = {root: {} for root in comps}
    for e, w in edges.items():
        sub[uf.find(next(iter(e)))][e] = w
    return [(nodes, sub[root]) for root, nodes in comps.items()]


def _density(nodes: list[Hashable], edges: Mapping[frozenset, float]) -> float:
    n = len(nodes)
    return 1.0 if n < 2 else len(edges) / (n * (n - 1) / 2)


def leiden_weight(score: float) -> int:
    """A link's weight as Leiden is given it: the score (0-100, rounded to 0.1 by the scorer) in
    tenths, a whole number.

    With the scores themselves as floating-point weights (79.2, 100.0), leidenalg 0.12's optimiser
    looped forever on a 12-record, 19-link component of DBLP-ACM in one table (reproduced apart,
    ``tests/test_clusters.py``): rounding in its quality differences can make a cycle of node moves
    each look like a gain (the failure mode of vtraag/leidenalg issue #126). Whole-number weights
    make every sum of weights exact; scaling every weight by 10 leaves the partition that maximises
    the RB-configuration quality unchanged (the quality scales by the same factor), so only
    rounding, not the optimum, differs. Non-finite or negative scores are not expected (links are
    0-100) and would raise ``ValueError`` / ``OverflowError`` in ``round``."""
    return round(float(score) * 10)


def _communities(
    nodes: list[Hashable], edges: Mapping[frozenset, float], resolution: float, seed: int
) -> list[list[Hashable]]:
    index = {v: i for i, v in enumerate(nodes)}
    ordered = sorted(edges.items(), key=lambda kv: sorted(index[v] for v in kv[0]))
    if _HAVE_LEIDEN:
        g = igraph.Graph(n=len(nodes))
        g.add_edges([tuple(sorted(index[v] for v in e)) for e, _ in ordered])
        g.es["weight"] = [leiden_weight(w) for _, w in ordered]
        part = leidenalg.find_partition(
            g, leidenalg.RBConfigurationVertexPartition, weights="weight",
            resolution_parameter=resolution, seed=seed,
        )
        groups = [[nodes[i] for i in sorted(c)] for c in part]
    else:  # pragma: no cover - fallback
        import networkx as nx

        g = nx.Graph()
        g.add_nodes_from(range(len(nodes)))
        g.add_weighted_edges_from([(*sorted(index[v] for v in e), leiden_weight(w)) for e, w in ordered])
        parts = nx.community.louvain_communities(g, weight="weight", resolution=resolution, seed=seed)
        groups = [[nodes[i] for i in sorted(c)] for c in parts]
    return [g_ for g_ in groups if g_]


def _split(
    nodes: list[Hashable], edges: Mapping[frozenset, float], max_size: int, min_density: float,
    resolution: float, seed: int, depth: int = 0,
) -> list[list[Hashable]]:
    if len(nodes) <= max_size and _density(nodes, edges) >= min_density:
        return [nodes]
    parts = _communities(nodes, edges, resolution, seed)
    if len(parts) <= 1 or depth >= 8:
        return [nodes]  # the algorithm cannot divide it further: keep it whole
    out: list[list[Hashable]] = []
    for part in parts:
        members = set(part)
        sub = {e: w for e, w in edges.items() if e <= members}
        out.extend(_split(part, sub, max_size, min_density, resolution, seed, depth + 1))
    return out


def respect_cannot_links(links: Iterable[Link], cannot: Iterable[tuple[Hashable, Hashable]]) -> list[Link]:
    """The links that can be kept without putting a cannot-link pair in one component.

    Constrained union-find (the greedy variant of COP-k-means' constraint check, Wagstaff et al.
    2001): links are taken strongest first (ties by ids, so the result does not depend on input
    order); a link that would join two components holding the two ends of a cannot-link pair is
    dropped. A link inside one component is always kept. Splitting afterwards
    (:func:`build_clusters`) only divides components, so no cluster then holds a cannot-link pair:
    a pair a moderator dismissed is not re-joined through a third record.

    Args:
        links: ``(a_id, b_id, score)`` links. cannot: pairs that must not share a cluster.
    Returns:
        The kept links, strongest first.
    """
    forbid: dict[Hashable, set[Hashable]] = defaultdict(set)
    for x, y in cannot:
        if x != y:
            forbid[x].add(y)
            forbid[y].add(x)
    ordered = sorted(links, key=lambda x: (-float(x[2]), str(x[0]), str(x[1])))
    if not forbid:
        return ordered
    uf = UnionFind()
    members: dict[Hashable, set[Hashable]] = {}
    kept: list[Link] = []
    for a, b, score in ordered:
        ra, rb = uf.find(a), uf.find(b)
        if ra != rb:
            ma, mb = members.setdefault(ra, {a}), members.setdefault(rb, {b})
            small, large = (ma, mb) if len(ma) <= len(mb) else (mb, ma)
            if any(forbid.get(n, set()) & large for n in small):
                continue
            uf.union(a, b)
            root = uf.find(a)
            members[root] = ma | mb
            members.pop(rb if root == ra else ra, None)
        kept.append((a, b, score))
    return kept


def build_clusters(
    links: Iterable[Link],
    order_key: Mapping[Hashable, Any] | Callable[[Hashable], Any],
    *,
    max_size: int = 50,
    min_density: float = 0.3,
    resolution: float = 1.0,
    seed: int = 42,
) -> list[Cluster]:
    """Group records linked as duplicates into clusters, splitting over-large or sparse components.

    Args:
        links: ``(a_id, b_id, score)`` duplicate links, score 0-100 (the edge weight); self links
            are ignored, a repeated pair keeps its highest score.
        order_key: record id -> sortable creation key (e.g. ``(created_at, id)``), as a mapping
            or a callable; the earliest member of a cluster is its original.
        max_size: components with more members are split (see module docs).
        min_density: components with link density ``links / (n(n-1)/2)`` below it are split.
        resolution: Leiden (RB configuration model) resolution; higher gives smaller parts.
        seed: seed of the community detection (same input -> same output).
    Returns:
        Clusters of >= 2 members (a member split off alone is in no cluster), sorted by the
        original's order key; members are ordered by order key, original first.
    Raises:
        KeyError: when ``order_key`` is a mapping lacking a linked id.
    """
    keys, components = _keyed_components(links, order_key)
    clusters = [c for nodes, sub in components
                for c in _split_clusters(nodes, sub, keys, max_size, min_density, resolution, seed)]
    clusters.sort(key=lambda c: keys[c.original])
    return clusters


def _keyed_components(links: Iterable[Link], order_key: Mapping[Hashable, Any] | Callable[[Hashable], Any],
                      ) -> tuple[dict[Hashable, Any], list[tuple[list[Hashable], dict[frozenset, float]]]]:
    """The connected components of the links' graph (:func:`_link_graph`, :func:`_components`) and
    every linked record's order key, computed once per record.

    Returns:
        ``(keys, components)``: record id -> order key, and ``(nodes, edges)`` per component.
    Raises:
        KeyError: when ``order_key`` is a mapping lacking a linked id.
    """
    key = order_key.__getitem__ if isinstance(order_key, Mapping) else order_key
    components = _components(*_link_graph(links))
    return {n: key(n) for nodes, _ in components for n in nodes}, components


def _split_clusters(nodes: list[Hashable], edges: Mapping[frozenset, float], keys: Mapping[Hashable, Any],
                    max_size: int, min_density: float, resolution: float, seed: int) -> list[Cluster]:
    """The clusters of one component split by :func:`_split` (parts of one record left out), each
    with its members in order-key order (``keys``), the earliest as the original. Sorts ``nodes``."""
    by_key = keys.__getitem__
    nodes.sort(key=by_key)
    out = []
    for part in _split(nodes, edges, max_size, min_density, resolution, seed):
        if len(part) >= 2:
            members = tuple(sorted(part, key=by_key))
            out.append(Cluster(id=cluster_id(members[0]), original=members[0], members=members))
    return out


AVERAGE_LINK_EXACT_LIMIT = 200
"""Components of more nodes are not clustered by average linkage but split as :func:`build_clusters`
does (Leiden, default density and resolution), so one re-clustering under the table lock stays
bounded: average linkage needs the score of every cross pair it weighs (a full pair score for each
pair without a link), up to n²/2 for a component of n records. 200 bounds that to ~20,000 pair
scores (~0.4 s at ~20 µs each) while covering the components product lines make in one table
(Abt-Buy without its source column makes components of more than 60 listings; at 60, the earlier
limit, those went to Leiden, which keeps colour and size variants together: pairs-in-clusters F1
0.713–0.715 against 0.777–0.780 at 200). DBLP-ACM in one table makes components of hundreds of
"Editorial"-like titles, which still go to Leiden."""


def average_link_clusters(
    links: Iterable[Link],
    order_key: Mapping[Hashable, Any] | Callable[[Hashable], Any],
    score: Callable[[Hashable, Hashable], float] | None = None,
    *,
    threshold: float,
    strict_threshold: float,
    max_size: int = 50,
    apart: Callable[[Hashable, Hashable], bool] | None = None,
) -> list[Cluster]:
    """Average-link agglomerative clustering of linked records (UPGMA, Sokal & Michener 1958).

    Start from singletons; repeatedly merge the two groups, joined by at least one link, with the
    highest mean pair score over all their cross pairs, while that mean reaches ``threshold`` (or
    ``strict_threshold`` when both groups already hold two records or more: two clusters of
    confirmed duplicates are not merged through potential-level evidence) and the merged group
    has at most ``max_size`` records. A cross pair without a link is scored with ``score`` (the
    pair's real score, below the link threshold or never compared); so a record only joins a
    group it resembles as a whole, and a chain a-b-c whose a-c is weak does not become one cluster.
    Ties are broken by the groups' earliest members' order keys, so the result depends only on the
    links and scores, not on their order.

    Records with evidence against each other are never put in one group (a cannot-link constraint,
    Wagstaff et al. 2001): two groups do not merge when a cross pair scores below ``threshold`` and
    ``apart`` says it has evidence against (two different model numbers, colours or codes). A record
    whose title fits two items of a line equally (a generic or shortened title, ``LG 2.0 cu.ft. Over
    the Range Microwave``) then joins one of them, instead of the average of its strong links pulling
    the line's other items into one cluster.

    Cost: edges are grouped by component in one pass, each record's order key is computed once
    (keys are expected to be distinct, as ``order_key``'s are: they end with the id), and the cross
    sums are kept up to date by the Lance & Williams (1967) update instead of being re-summed at each
    merge (see :func:`_average_link`, which gives exactly the merges of the plain re-summing).

    Args:
        links: ``(a_id, b_id, score)`` links, score 0-100; self links are ignored, a repeated pair
            keeps its highest score.
        order_key: record id -> sortable creation key (mapping or callable); the earliest member of
            a cluster is its original.
        score: ``score(a, b)`` -> 0-100 for a pair without a link; None: such pairs count as 0.
            A component larger than :data:`AVERAGE_LINK_EXACT_LIMIT` is split by Leiden instead.
        threshold, strict_threshold: the mean score (0-100) a merge needs (see above).
        max_size: largest cluster made (>= 2).
        apart: ``apart(a, b)`` -> True when the pair has evidence against a match (see above),
            called only for cross pairs below ``threshold`` of two groups linked to each other, at
            most once per pair; None: no such constraint.
    Returns:
        Clusters of >= 2 members as :class:`Cluster`, sorted by the original's order key.
    """
    keys, components = _keyed_components(links, order_key)
    clusters: list[Cluster] = []
    for nodes, sub in components:
        if len(nodes) > AVERAGE_LINK_EXACT_LIMIT:
            clusters += _split_clusters(nodes, sub, keys, max_size, 0.3, 1.0, 42)
            continue
        for members in _average_link(nodes, sub, keys, score, threshold, strict_threshold, max_size, apart):
            if len(members) >= 2:
                clusters.append(Cluster(id=cluster_id(members[0]), original=members[0], members=tuple(members)))
    clusters.sort(key=lambda c: keys[c.original])
    return clusters


_MEAN_SLACK = 2.0**-40
"""Per-term bound, relative to the largest pair score, on how far a mean kept by sums of sums
(:func:`_average_link`) can be from the same mean summed left to right: summing k terms in any order
errs by at most (k - 1)·u·Σ|x| (u = 2**-53; Higham 2002, "Accuracy and Stability of Numerical
Algorithms", §4.2), so two such sums of one mean differ by at most 2k·u·max|x| and their means by
(2k + 2)·u·max|x|; 2**-40·k leaves a margin of thousands."""

_TINY = 2.0**-1000
"""Absolute slack on top of :data:`_MEAN_SLACK` (covers a mean that underflows to subnormals)."""


def _largest(bound: float, v: float) -> float:
    """``max(bound, |v|)``; ``inf`` when ``v`` is not finite (nan included), so no slack is trusted."""
    return max(bound, abs(v)) if math.isfinite(v) else math.inf


def _average_link(
    nodes: list[Hashable], edges: Mapping[frozenset, float], keys: Mapping[Hashable, Any],
    score: Callable[[Hashable, Hashable], float] | None, threshold: float, strict_threshold: float, max_size: int,
    apart: Callable[[Hashable, Hashable], bool] | None = None,
) -> list[list[Hashable]]:
    """UPGMA (Sokal & Michener 1958) on one connected component, as :func:`average_link_clusters` describes.

    The sum of pair scores between every two linked groups is kept and, when two groups A and B
    merge, updated as sum(A∪B, C) = sum(A, C) + sum(B, C) (the Lance & Williams 1967 update of
    average linkage), instead of re-summing every cross pair of every linked pair of groups at each
    merge. A pair of groups too large to merge is dropped for good (groups only grow). Each pair of
    linked groups is judged (its mean against the threshold, then evidence against) once, when it is
    formed, not again at every merge: its sum, sizes and cross pairs stay the same until one of its
    groups merges, and a verdict made with the rounding bound of that time stays sound (the bound
    only grows with the pair scores summed later, none of them in this pair's sum). So a merge costs
    the pairs of the merged group, not every linked pair of groups of the component.
    (``tests/test_clusters_equivalence.py`` checks all of this against the plain definition.)

    The chosen merge is exactly the one of summing each candidate's pairs left to right in
    order-key order (the plain definition, and this module's earlier implementation): a mean within
    :data:`_MEAN_SLACK` of the threshold or of the best mean is summed that way before it decides, so
    rounding cannot tip a comparison. ``score`` is called, once per pair, for at most the unlinked
    pairs that the plain definition weighs: the cross pairs of linked groups that may merge by size
    (without ``apart``, exactly those; with it, not those of groups already known kept apart).

    Args:
        nodes: the component's records. edges: its links, ``{frozenset((a, b)): score}``.
        keys: record id -> order key (distinct keys: ``order_key`` ends with the id).
        score, threshold, strict_threshold, max_size, apart: as in :func:`average_link_clusters`. A
            pair of groups found apart is dropped for good, as one too large to merge (groups only
            grow, and the pair that forbids the merge stays across them: no later pair of groups
            holding its two records can merge, so none of them is summed nor scored). A pair of
            groups formed by a merge is checked for it first, before its unlinked cross pairs are
            scored for its sum (the scored ones first, then each unscored one as it is scored), so a
            pair kept apart costs no more scores than the one that keeps it apart.
    Returns:
        The groups (every record in one), members in order-key order.
    """
    cache: dict[frozenset, float] = {}
    by_key = keys.__getitem__
    worst = 0.0  # the largest |pair score| summed so far (inf when one is not finite)

    def pair(a: Hashable, b: Hashable) -> float:
        nonlocal worst
        e = frozenset((a, b))
        if e in edges:
            return edges[e]
        if score is None:
            return 0.0
        v = cache.get(e)
        if v is None:
            x, y = (a, b) if keys[a] <= keys[b] else (b, a)
            v = cache[e] = float(score(x, y))
            worst = _largest(worst, v)
        return v

    apart_memo: dict[frozenset, bool] = {}

    def kept_apart(A: list[Hashable], B: list[Hashable]) -> bool:
        """Whether a cross pair of groups A, B scores below the threshold with evidence against.

        The pairs whose score is known (links, pairs scored already) are looked at first, so a pair
        of groups that one of them keeps apart costs no new score; the answer does not depend on
        the order."""
        if apart is None:
            return False
        unknown = []
        for a in A:
            for b in B:
                e = frozenset((a, b))
                v = edges.get(e)
                if v is None:
                    v = cache.get(e)
                if v is None:
                    unknown.append((a, b, e))
                elif not v >= threshold and separated(a, b, e):
                    return True
        return any(not pair(a, b) >= threshold and separated(a, b, e) for a, b, e in unknown)

    def separated(a: Hashable, b: Hashable, e: frozenset) -> bool:
        """``apart`` of the pair (a, b) (``e`` its frozenset), in order-key order, asked once."""
        v = apart_memo.get(e)
        if v is None:
            x, y = (a, b) if keys[a] <= keys[b] else (b, a)
            v = apart_memo[e] = bool(apart(x, y))
        return v

    blocked: set[frozenset] = set()  # pairs of groups (by representative) that must not merge

    def plain_mean(g: Hashable, h: Hashable) -> float:
        """The mean of groups g, h (g earlier) summed left to right in order-key order."""
        A, B = groups[g], groups[h]
        return sum(pair(a, b) for a in A for b in B) / (len(A) * len(B))

    groups: dict[Hashable, list[Hashable]] = {n: [n] for n in sorted(nodes, key=by_key)}
    # sums[g][h]: sum of the pair scores across linked groups g and h that may still merge by size
    sums: dict[Hashable, dict[Hashable, float]] = {n: {} for n in groups}
    if max_size >= 2:
        for e, w in edges.items():
            a, b = e
            sums[a][b] = sums[b][a] = w
            worst = _largest(worst, w)
    # passing[(g, h)] (g earlier): a merge the mean allows and no evidence forbids, as
    # (low, high, g, h, exact); judged once per pair of groups, when it is new (see the docstring)
    passing: dict[tuple[Hashable, Hashable], tuple[float, float, Hashable, Hashable, bool]] = {}
    fresh = [(g, h) for g, around in sums.items() for h in around if keys[g] < keys[h]]
    cleared: set[tuple[Hashable, Hashable]] = set()  # pairs of fresh found not kept apart already
    while True:
        newly_apart: list[tuple[Hashable, Hashable]] = []
        for g, h in fresh:
            ng, nh = len(groups[g]), len(groups[h])
            need = strict_threshold if ng > 1 and nh > 1 else threshold
            k = ng * nh
            mean = sums[g][h] / k
            slack = k * _MEAN_SLACK * worst + _TINY
            if mean + slack < need:
                continue
            if mean - slack >= need:
                candidate = (mean - slack, mean + slack, g, h, False)
            else:  # too close to call: decide on the plain sum
                mean = plain_mean(g, h)
                if mean < need:
                    continue
                candidate = (mean, mean, g, h, True)
            if (g, h) not in cleared and kept_apart(groups[g], groups[h]):
                newly_apart.append((g, h))
            else:
                passing[(g, h)] = candidate
        for g, h in newly_apart:
            blocked.add(frozenset((g, h)))
            sums[g].pop(h, None)
            sums[h].pop(g, None)
        if not passing:
            break
        floor = max(p[0] for p in passing.values())
        contenders = [p for p in passing.values() if p[1] >= floor]
        if len(contenders) == 1:
            _, _, ga, gb, _ = contenders[0]
        else:  # the highest plain mean; on a tie the earliest pair (by the groups' order keys)
            best: tuple[float, Any, Any] | None = None
            for low, _, g, h, exact in sorted(contenders, key=lambda p: (keys[p[2]], keys[p[3]])):
                mean = low if exact else plain_mean(g, h)
                if best is None or mean > best[0]:
                    best = (mean, g, h)
            assert best is not None
            _, ga, gb = best
        keep, gone = ga, gb  # ga is the earlier: it stays the representative
        A, B = groups[keep], groups.pop(gone)
        around_a, around_b = sums.pop(keep), sums.pop(gone)
        merged = sorted(A + B, key=by_key)
        grown: dict[Hashable, float] = {}
        for c in sorted((around_a.keys() | around_b.keys()) - {keep, gone}, key=by_key):
            sums[c].pop(keep, None)
            sums[c].pop(gone, None)
            C = groups[c]
            if len(merged) + len(C) > max_size:
                continue
            if frozenset((keep, c)) in blocked or frozenset((gone, c)) in blocked:
                blocked.add(frozenset((keep, c)))
                continue
            if kept_apart(merged, C):  # never one group (see the docstring): no need to sum it
                blocked.add(frozenset((keep, c)))
                continue
            # a side without a link to C was never summed: sum it now (its pairs are all unlinked)
            sa = around_a.get(c)
            if sa is None:
                sa = sum(pair(a, b) for a in A for b in C)
            sb = around_b.get(c)
            if sb is None:
                sb = sum(pair(a, b) for a in B for b in C)
            grown[c] = sums[c][keep] = sa + sb
        groups[keep] = merged
        sums[keep] = grown
        # only the pairs of the merged group are new; every other verdict holds (its groups are unchanged)
        passing = {p: v for p, v in passing.items() if keep not in p and gone not in p}
        fresh = [(keep, c) if keys[keep] < keys[c] else (c, keep) for c in grown]
        cleared = set(fresh)  # found not kept apart above
    return list(groups.values())


def membership(clusters: Iterable[Cluster]) -> dict[Hashable, str]:
    """Record id -> cluster id for every member of ``clusters``."""
    return {m: c.id for c in clusters for m in c.members}
