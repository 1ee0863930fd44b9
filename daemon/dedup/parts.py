"""Cutting a component of the link graph that is too large to re-cluster into parts, as a function
of the links.

The worker re-clusters the connected component(s) of the link graph around the records a batch
changed. A component can grow past what one batch can afford to read and cluster (``[dedup]
max_component``, default 2,000 records): a chain of weak links through listings that share common
words can join thousands of them (DBLP-ACM's titles and authors, at scores of 70-71, made one of
over 2,000). Cutting such a component where a walk from the batch's records stops would make the
clusters depend on which records were processed last. Instead a component is cut by a **ladder of
link-score levels**: a record's *part* is its connected component over the links scored at least
``t``, for the lowest level ``t`` of :func:`part_levels` at which that component holds at most
``max_component`` records. The weakest links are dropped first, as in single-linkage hierarchical
clustering cut at a score (Sokal & Sneath 1963; the same cut as HDBSCAN's cluster tree at a size
bound, Campello, Moulavi & Sander 2013).

Every member of a part gets the same part (the component at a level contains the record's whole
component at every higher level), so the parts partition the linked records and are a function
of the links alone. When a link changes, the only parts that change are the ones holding its two
ends, before and after; the worker stores each record's part (``nearsync.dedup_parts``) and
re-clusters the members of the old parts too. Only a component that still exceeds
``max_component`` at the top level (that many records linked at score 100) is cut where the walk
stops, and :func:`cut_into_parts` marks such a part ``truncated``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from daemon.dedup.clusters import UnionFind


class Edge(Protocol):
    """A link as :func:`cut_into_parts` reads it: its two record ids."""

    a: str
    b: str


Walk = Callable[[list[str], float, int], Awaitable[tuple[list[str], list[Any]]]]
"""``walk(start, min_score, limit)`` → ``(nodes, links)``: the component(s) of the ``start`` records
over the links scored at least ``min_score``, at most ``limit`` records (``start`` first), and those
links among them (objects with ``.a`` and ``.b``)."""


def part_levels(potential_threshold: float, steps: int = 6, top: float = 100.0) -> tuple[float, ...]:
    """The link-score ladder: ``0`` (every link), then ``steps`` levels evenly spaced from just
    above ``potential_threshold`` up to ``top``.

    With the default potential threshold of 70: 0, 75, 80, 85, 90, 95, 100. Links below the
    potential threshold are not stored, so level 0 is the whole component. Six steps of five points
    each separate the score bands a scorer means something by (a weak potential duplicate at
    70-75, a likely duplicate at 85-90, a near-exact copy at 95-100) on any catalogue or ad site:
    one more step per band costs a component walk per level climbed, only for records of a
    component over ``max_component``.

    Args:
        potential_threshold: the lowest score a link is kept at (0-100).
        steps: levels above it (>= 1).
        top: the highest score (100).

    Returns:
        The levels, ascending, the first 0.0; ``(0.0,)`` when the threshold is at the top already.

    Raises:
        ValueError: ``steps`` < 1.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    p = float(potential_threshold)
    if p >= top:
        return (0.0,)
    return (0.0, *(round(p + (top - p) * k / steps, 6) for k in range(1, steps + 1)))


def components(nodes: Sequence[str], links: Sequence[Edge]) -> list[list[str]]:
    """Connected components of ``nodes`` over ``links`` (union-find, Tarjan 1975).

    Returns:
        Each component's record ids, sorted; components in the order of their smallest id.
    """
    uf = UnionFind()
    for n in nodes:
        uf.find(n)
    for x in links:
        uf.union(x.a, x.b)
    return sorted((sorted(str(n) for n in c) for c in uf.components().values()), key=lambda c: c[0])


@dataclass(frozen=True, slots=True)
class Part:
    """One part of the link graph, re-clustered as a whole.

    Attributes:
        nodes: its record ids, sorted (one id: a record without a link at its level).
        level: the minimum link score that defines it (0.0: its whole component).
        links: the links among its nodes scored at least ``level``.
        truncated: cut where the walk stopped (a component over the cap even at the top level).
    """

    nodes: tuple[str, ...]
    level: float
    links: tuple[Any, ...]
    truncated: bool = False

    @property
    def part_id(self) -> str:
        """The part's id: its smallest record id (stable while its members are)."""
        return self.nodes[0]


def _part(nodes: Sequence[str], level: float, links: Sequence[Edge], truncated: bool = False) -> Part:
    inside = set(nodes)
    return Part(tuple(sorted(inside)), level, tuple(x for x in links if x.a in inside and x.b in inside), truncated)


def _parts_of(comps: list[list[str]], level: float, links: Sequence[Edge]) -> list[Part]:
    """One :class:`Part` per component of ``comps`` (sorted ids, as :func:`components` gives them),
    each with its links out of ``links`` (all among the components' records), in one pass."""
    where = {n: i for i, c in enumerate(comps) for n in c}
    own: list[list[Edge]] = [[] for _ in comps]
    for x in links:
        own[where[x.a]].append(x)
    return [Part(tuple(c), level, tuple(x)) for c, x in zip(comps, own, strict=True)]


async def cut_into_parts(start: Sequence[str], walk: Walk, *, cap: int, levels: Sequence[float]) -> list[Part]:
    """The parts holding the ``start`` records (see the module docs).

    One walk from all of ``start`` at the first level covers the usual case (every component at
    most ``cap`` records). Otherwise each record not yet placed climbs the ladder with walks of at
    most ``cap + 1`` records; a walk found too large marks all the records it saw as too large at
    that level, so records of one large component do not walk it again.

    Args:
        start: record ids (each ends in exactly one part).
        walk: the component query (:data:`Walk`).
        cap: the most records of a part (``max_component``, >= 1).
        levels: :func:`part_levels`.

    Returns:
        Disjoint parts covering ``start``, in the order of their first start record.
    """
    first = levels[0]
    limit = cap + len(start)
    nodes, links = await walk(list(start), first, limit)
    complete = len(nodes) < limit
    comps = components(sorted(set(nodes) | set(start)), links)
    if complete and all(len(c) <= cap for c in comps):
        return _parts_of(comps, first, links)
    too_big: dict[float, set[str]] = {level: set() for level in levels}
    # A component seen with more than ``cap`` records is too large even when the walk was cut short
    # (what it saw of it is a part of it): its records skip the first level.
    too_big[first].update(n for c in comps if len(c) > cap for n in c)
    placed: set[str] = set()
    parts: list[Part] = []
    for s in start:
        if s in placed:
            continue
        part = None
        for level in levels:
            if s in too_big[level]:
                continue
            n, found = await walk([s], level, cap + 1)
            if len(n) <= cap:
                part = _part(n, level, found)
                break
            too_big[level].update(n)
        if part is None:  # over the cap even at the top level: cut where the walk stops
            n, found = await walk([s], levels[-1], cap)
            part = _part([x for x in n if x not in placed], levels[-1], found, truncated=True)
        placed.update(part.nodes)
        parts.append(part)
    return parts
