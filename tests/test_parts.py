"""Cutting an over-large component of the link graph into parts (daemon.dedup.parts): the parts are
a function of the links, whichever records a batch starts from and in whatever order."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import pytest

from daemon.dedup.parts import Part, components, cut_into_parts, part_levels


@dataclass(frozen=True)
class L:
    a: str
    b: str
    score: float


def graph_walk(links: list[L]):
    """An in-memory version of the ``component_links`` query: breadth-first over links >= min_score,
    stopping at ``limit`` records, the start records first."""
    adj: dict[str, list[L]] = {}
    for x in links:
        adj.setdefault(x.a, []).append(x)
        adj.setdefault(x.b, []).append(x)

    async def walk(start: list[str], min_score: float, limit: int) -> tuple[list[str], list[L]]:
        seen = list(dict.fromkeys(start))
        i = 0
        while i < len(seen) and len(seen) < limit:
            for x in adj.get(seen[i], []):
                other = x.b if x.a == seen[i] else x.a
                if x.score >= min_score and other not in seen and len(seen) < limit:
                    seen.append(other)
            i += 1
        nodes = seen[:limit]
        inside = set(nodes)
        return nodes, [x for x in links if x.a in inside and x.b in inside and x.score >= min_score]

    return walk


def chained_groups(rng: random.Random, groups: int, size: int) -> list[L]:
    """Tight groups (links 85-100) chained by weak links (70-79) into one component."""
    links = []
    for g in range(groups):
        ids = [f"{g:02d}-{i:02d}" for i in range(size)]
        for i in range(size):
            for j in range(i + 1, size):
                if rng.random() < 0.6 or j == i + 1:
                    links.append(L(ids[i], ids[j], rng.choice([85.0, 90.0, 95.0, 100.0])))
        if g:
            links.append(L(f"{g - 1:02d}-{rng.randrange(size):02d}", ids[rng.randrange(size)], 70.0 + rng.randrange(10)))
    return links


def part_of(parts: list[Part]) -> dict[str, tuple[tuple[str, ...], float]]:
    return {n: (p.nodes, p.level) for p in parts for n in p.nodes}


def test_part_levels_climb_from_the_potential_threshold_to_100() -> None:
    assert part_levels(70) == (0.0, 75.0, 80.0, 85.0, 90.0, 95.0, 100.0)
    assert part_levels(40, steps=3) == (0.0, 60.0, 80.0, 100.0)
    assert part_levels(100) == (0.0,)
    with pytest.raises(ValueError, match="steps"):
        part_levels(70, steps=0)


def test_components_are_sorted_and_cover_every_node() -> None:
    comps = components(["c", "a", "z"], [L("a", "b", 90), L("c", "d", 80)])
    assert comps == [["a", "b"], ["c", "d"], ["z"]]


def test_a_component_under_the_cap_is_one_part_at_level_0() -> None:
    links = [L("a", "b", 71), L("b", "c", 99)]
    parts = asyncio.run(cut_into_parts(["a"], graph_walk(links), cap=5, levels=part_levels(70)))
    assert parts == [Part(("a", "b", "c"), 0.0, tuple(links))]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_parts_are_the_same_whatever_the_start_records_and_their_order(seed: int) -> None:
    rng = random.Random(seed)
    links = chained_groups(rng, groups=6, size=7)  # one component of 42
    walk = graph_walk(links)
    levels = part_levels(70)
    nodes = sorted({x.a for x in links} | {x.b for x in links})
    # Each record alone gives its part; every other way of starting must give the same.
    alone = {n: part_of(asyncio.run(cut_into_parts([n], walk, cap=10, levels=levels)))[n] for n in nodes}
    for _ in range(5):
        start = rng.sample(nodes, rng.randrange(1, len(nodes)))
        parts = asyncio.run(cut_into_parts(start, walk, cap=10, levels=levels))
        got = part_of(parts)
        assert all(got[n] == alone[n] for n in got), start
        assert set(start) <= set(got)
        assert sum(len(p.nodes) for p in parts) == len(got)  # disjoint
    # The weak chain links are the first to go: every part is at most the cap and above level 0,
    # and no part crosses a link below its level.
    assert all(len(p) <= 10 for p, _ in alone.values())
    assert all(level > 0 for _, level in alone.values())
    for nodes_of, level in set(alone.values()):
        inside = set(nodes_of)
        assert not any(x.score >= level and (x.a in inside) != (x.b in inside) for x in links)


def test_a_component_over_the_cap_at_every_level_is_truncated_and_marked() -> None:
    ids = [f"r{i}" for i in range(6)]
    links = [L(a, b, 100.0) for i, a in enumerate(ids) for b in ids[i + 1:]]
    parts = asyncio.run(cut_into_parts(ids, graph_walk(links), cap=4, levels=part_levels(70)))
    assert any(p.truncated for p in parts)
    assert sorted(n for p in parts for n in p.nodes) == ids  # still disjoint and covering
