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
        self.parent.setdefault(x, x)
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:  # path compression
            self.parent[x], x = root, self.parent[x]
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


def _density(nodes: list[Hashable], edges: Mapping[frozenset, float]) -> float:
    n = len(nodes)
    return 1.0 if n < 2 else len(edges) / (n * (n - 1) / 2)


def _communities(
    nodes: list[Hashable], edges: Mapping[frozenset, float], resolution: float, seed: int
) -> list[list[Hashable]]:
    index = {v: i for i, v in enumerate(nodes)}
    ordered = sorted(edges.items(), key=lambda kv: sorted(index[v] for v in kv[0]))
    if _HAVE_LEIDEN:
        g = igraph.Graph(n=len(nodes))
        g.add_edges([tuple(sorted(index[v] for v in e)) for e, _ in ordered])
        g.es["weight"] = [w for _, w in ordered]
        part = leidenalg.find_partition(
            g, leidenalg.RBConfigurationVertexPartition, weights="weight",
            resolution_parameter=resolution, seed=seed,
        )
        groups = [[nodes[i] for i in sorted(c)] for c in part]
    else:  # pragma: no cover - fallback
        import networkx as nx

        g = nx.Graph()
        g.add_nodes_from(range(len(nodes)))
        g.add_weighted_edges_from([(*sorted(index[v] for v in e), w) for e, w in ordered])
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
    key = order_key.__getitem__ if isinstance(order_key, Mapping) else order_key
    edges, uf = _link_graph(links)
    components = uf.components()
    by_node_edges: dict[Hashable, dict[frozenset, float]] = defaultdict(dict)
    for e, w in edges.items():
        by_node_edges[uf.find(next(iter(e)))][e] = w
    clusters: list[Cluster] = []
    for root, nodes in components.items():
        nodes.sort(key=key)
        for part in _split(nodes, by_node_edges[root], max_size, min_density, resolution, seed):
            if len(part) < 2:
                continue
            members = tuple(sorted(part, key=key))
            clusters.append(Cluster(id=cluster_id(members[0]), original=members[0], members=members))
    clusters.sort(key=lambda c: key(c.original))
    return clusters


AVERAGE_LINK_EXACT_LIMIT = 60
"""Components of more nodes are not clustered by average linkage (whose cost grows with the cube of
a component's size, every merge re-averaging the groups' cross pairs) but split as
:func:`build_clusters` does (Leiden, default density and resolution), so one re-clustering under
the table lock stays bounded (DBLP-ACM in one table makes components of hundreds of "Editorial"s)."""


def average_link_clusters(
    links: Iterable[Link],
    order_key: Mapping[Hashable, Any] | Callable[[Hashable], Any],
    score: Callable[[Hashable, Hashable], float] | None = None,
    *,
    threshold: float,
    strict_threshold: float,
    max_size: int = 50,
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

    Args:
        links: ``(a_id, b_id, score)`` links, score 0-100; self links are ignored, a repeated pair
            keeps its highest score.
        order_key: record id -> sortable creation key (mapping or callable); the earliest member of
            a cluster is its original.
        score: ``score(a, b)`` -> 0-100 for a pair without a link; None: such pairs count as 0.
            A component larger than :data:`AVERAGE_LINK_EXACT_LIMIT` is split by Leiden instead.
        threshold, strict_threshold: the mean score (0-100) a merge needs (see above).
        max_size: largest cluster made (>= 2).
    Returns:
        Clusters of >= 2 members as :class:`Cluster`, sorted by the original's order key.
    """
    key = order_key.__getitem__ if isinstance(order_key, Mapping) else order_key
    edges, uf = _link_graph(links)
    clusters: list[Cluster] = []
    for nodes in uf.components().values():
        if len(nodes) > AVERAGE_LINK_EXACT_LIMIT:
            nodes.sort(key=key)
            members_of = set(nodes)
            sub = {e: w for e, w in edges.items() if next(iter(e)) in members_of}
            for part in _split(nodes, sub, max_size, 0.3, 1.0, 42):
                if len(part) >= 2:
                    ms = tuple(sorted(part, key=key))
                    clusters.append(Cluster(id=cluster_id(ms[0]), original=ms[0], members=ms))
            continue
        exact = score is not None
        cache: dict[frozenset, float] = {}

        def pair(a: Hashable, b: Hashable) -> float:
            e = frozenset((a, b))
            if e in edges:
                return edges[e]
            if not exact:
                return 0.0
            if e not in cache:
                x, y = sorted((a, b), key=key)
                cache[e] = float(score(x, y))  # type: ignore[misc]
            return cache[e]

        groups: dict[Hashable, list[Hashable]] = {n: [n] for n in sorted(nodes, key=key)}
        where = {n: n for n in nodes}
        mine = [tuple(e) for e in edges if next(iter(e)) in where]
        while True:
            best: tuple[float, Any, Any] | None = None
            pairs = {tuple(sorted((where[a], where[b]), key=key)) for a, b in mine if where[a] != where[b]}
            for ga, gb in sorted(pairs, key=lambda p: (key(p[0]), key(p[1]))):
                A, B = groups[ga], groups[gb]
                if len(A) + len(B) > max_size:
                    continue
                mean = sum(pair(a, b) for a in A for b in B) / (len(A) * len(B))
                need = strict_threshold if len(A) > 1 and len(B) > 1 else threshold
                if mean >= need and (best is None or mean > best[0]):
                    best = (mean, ga, gb)
            if best is None:
                break
            _, ga, gb = best
            keep, gone = (ga, gb) if key(ga) <= key(gb) else (gb, ga)
            groups[keep] = sorted(groups[keep] + groups.pop(gone), key=key)
            for n in groups[keep]:
                where[n] = keep
        for members in groups.values():
            if len(members) >= 2:
                clusters.append(Cluster(id=cluster_id(members[0]), original=members[0], members=tuple(members)))
    clusters.sort(key=lambda c: key(c.original))
    return clusters


def membership(clusters: Iterable[Cluster]) -> dict[Hashable, str]:
    """Record id -> cluster id for every member of ``clusters``."""
    return {m: c.id for c in clusters for m in c.members}
