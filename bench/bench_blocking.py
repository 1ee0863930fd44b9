"""Benchmark of candidate-key designs (a script, not a test): what a lookup visits and what it finds.

For each ``[signatures]`` variant it signs the same listings with the real signature code
(:func:`daemon.signatures.compute_signatures`), builds an in-memory inverted index of their candidate
keys (what ``nearsync.document_lookup.key_hashes`` holds, without the scope key) and, for sampled
listings, counts:

* **visited**: the sum of the block sizes of the listing's keys, i.e. the index entries a
  PostgreSQL lookup reads (one GIN scan per key, every document of its block);
* **candidates**: the other-source listings sharing at least one key (``dedup.min_match = 1``);
* **recall@cap**: the share of the listing's true duplicates (same product, another source) among
  the ``cap`` candidates sharing the most keys (ties by position), as the candidate lookup ranks
  them before scoring.

``--max-block B …`` adds rows for the profile's keys with *block purging* (Papadakis et al., "A
Blocking Framework for Entity Resolution in Highly Heterogeneous Information Spaces", IEEE TKDE
2013): a lookup leaves out every super token (:func:`daemon.signatures.blocks.purgeable`) whose
block holds more than ``B`` listings, as the dedup worker does with ``[dedup] max_block = B`` and a
corpus snapshot. The blocks that get that large are the title word pairs of common words ("digital
camera"), which rank a listing's siblings and unrelated products alike.

Data: Abt-Buy as shipped (true pairs from its mapping; shop = source) and corpora of
:mod:`bench.corpus_products` (true pairs = same product; 8 shops). No PostgreSQL involved: this
measures the key design, not the database. Variants: ``single4`` (4 sampled title words as keys
of their own, the ``products`` profile before 2026-11-24), ``pairs7`` and ``pairs8`` (pairs of 7 or
8 sampled title words, ``super.title_pairs``; 8 is the profile's), each with the model-number
rule; every other setting is the ``products`` profile's.

Usage (from the repository root)::

    python bench/bench_blocking.py [--corpus 20000] [--sample 500] [--cap 50]
    python bench/bench_blocking.py --corpus 100000 --max-block 2000 1000 500 250
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.corpus_products import build_corpus, key_postings  # noqa: E402
from daemon.evaluation.datasets import abt_buy, default_data_dir  # noqa: E402
from daemon.profiles import PROFILES, merged  # noqa: E402
from daemon.signatures.blocks import purgeable  # noqa: E402

VARIANTS: dict[str, dict[str, Any]] = {
    "single4": {"super": {"rules": [["model"], ["title"]], "title_tokens": 4, "title_pairs": 0}},
    "pairs7": {"super": {"rules": [["model"]], "title_pairs": 7}},
    "pairs8": {"super": {"rules": [["model"]], "title_pairs": 8}},
}
"""Variant name -> ``[signatures]`` keys applied over the ``products`` profile's."""


def measure(records: Sequence[dict[str, Any]], groups: Sequence[Any], signatures: dict[str, Any], *,
            sample: Sequence[int], cap: int, max_blocks: Sequence[int | None] = (None,),
            ) -> list[dict[str, float]]:
    """Visited entries, candidates and recall@cap for the ``sample`` listings (see the module docstring).

    Args:
        records: field dicts (``title``, ``body``, ``price``, ``source``).
        groups: per record, its true-duplicate group (records of one group and another source are
            true pairs); ``None`` for a record in no pair.
        signatures: the ``[signatures]`` settings.
        sample: indexes of the records measured. cap: the candidate cap.
        max_blocks: one result per entry: ``None`` uses every key, a number leaves out the super
            tokens whose block holds more listings than that (block purging, see the module docstring); the
            listings are signed once for all of them.
    Returns:
        Per entry of ``max_blocks``: ``keys`` (mean keys per record, all of them), ``visited`` and
        ``candidates`` (means over the sample), ``visited_p99`` (the 99th percentile of visited),
        ``recall`` (true pairs among the top ``cap`` over all true pairs of the sample).
    """
    keys, postings = key_postings(records, signatures)
    members: dict[Any, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        if g is not None:
            members[g].append(i)
    out = []
    for bound in max_blocks:
        found = true_total = candidates = 0
        visits: list[int] = []
        for i in sample:
            src = records[i].get("source")
            shared: Counter[int] = Counter()
            visited = 0
            for k in keys[i]:
                block = postings[k]
                if bound is not None and len(block) > bound and purgeable(k):
                    continue
                visited += len(block)
                shared.update(j for j in block if j != i and records[j].get("source") != src)
            visits.append(visited)
            candidates += len(shared)
            top = {j for j, _ in sorted(shared.items(), key=lambda x: (-x[1], x[0]))[:cap]}
            truth = [j for j in members.get(groups[i], []) if j != i and records[j].get("source") != src]
            true_total += len(truth)
            found += sum(j in top for j in truth)
        n = max(1, len(sample))
        visits.sort()
        out.append({"keys": sum(map(len, keys)) / max(1, len(keys)), "visited": sum(visits) / n,
                    "visited_p99": float(visits[min(len(visits) - 1, int(0.99 * len(visits)))]) if visits else 0.0,
                    "candidates": candidates / n, "recall": found / max(1, true_total)})
    return out


def abt_buy_sets(data: Path) -> tuple[list[dict[str, Any]], list[Any]]:
    """Abt-Buy's listings (shop as ``source``) and their true-pair groups (connected components of
    the mapping)."""
    ds = abt_buy(data)
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in ds.pairs:
        parent[find(a)] = find(b)
    records = [dict(r.fields) for r in ds.records]
    groups = [find(r.key) if r.key in parent else None for r in ds.records]
    return records, groups


def main() -> None:
    """Print the figures of every variant for Abt-Buy and each ``--corpus`` size (see the module
    docstring). Exits with a message when the shared data is absent."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=int, nargs="*", default=[20_000], help="product-corpus sizes (listings)")
    ap.add_argument("--sample", type=int, default=500, help="listings measured per set (Abt-Buy: all)")
    ap.add_argument("--cap", type=int, default=PROFILES["products"]["dedup"]["candidate_cap"])
    ap.add_argument("--seed", type=int, default=18, help="the corpus's seed")
    ap.add_argument("--max-block", type=int, nargs="*", default=[],
                    help="also measure the profile's keys (pairs8) with block purging at these block sizes")
    args = ap.parse_args()
    if any(b < 1 for b in args.max_block):
        ap.error("--max-block: block sizes are positive integers")
    data = default_data_dir()
    if data is None:
        raise SystemExit("needs ../shared/data/abt-buy (or NEARSYNC_DATA)")
    sets: list[tuple[str, list[dict[str, Any]], list[Any], list[int]]] = []
    records, groups = abt_buy_sets(data)
    sets.append(("Abt-Buy as shipped (2 shops)", records, groups, list(range(len(records)))))
    for n in args.corpus:
        corpus = build_corpus(n, seed=args.seed, data_dir=data)
        picked = random.Random(1).sample(range(len(corpus)), min(args.sample, len(corpus)))
        sets.append((f"corpus of {n:,} listings (8 shops)", [x.fields for x in corpus], [x.product for x in corpus],
                     picked))
    base = PROFILES["products"]["signatures"]
    for label, recs, grps, sample in sets:
        print(f"{label}, {len(sample):,} listings measured, cap {args.cap}:", flush=True)
        for name, variant in VARIANTS.items():
            bounds = [None, *args.max_block] if name == "pairs8" else [None]
            for bound, r in zip(bounds, measure(recs, grps, merged(base, variant), sample=sample, cap=args.cap,
                                                max_blocks=bounds), strict=True):
                label_ = name if bound is None else f"{name}, blocks <= {bound:,}"
                print(f"  {label_:24} {r['keys']:5.1f} keys/listing, visited {r['visited']:7.0f} (p99 "
                      f"{r['visited_p99']:6.0f}), candidates {r['candidates']:6.0f}, recall@{args.cap} {r['recall']:.4f}",
                      flush=True)


if __name__ == "__main__":
    main()
