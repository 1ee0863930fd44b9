"""Benchmark of the pair scorer (a script, not a test): µs per pair, prepared records against the plain scorer.

Scores every pair within each product line of the product corpus (:mod:`bench.corpus_products`:
Abt-Buy listings with hard negatives, from ``../shared/data``) under the ``products`` and
``classified`` profiles, alternating in one process, ``--rounds`` times:

* ``reference``: the scorer as it was before records were prepared (``tests/scoring_reference.py``:
  one call per pair and per field on the raw values);
* ``prepared``: :func:`daemon.scoring.score_sides` on :class:`daemon.scoring.Side` views made once
  per record (as the dedup worker keeps them on its documents), ``cold`` including making them;
* ``worker``: what the dedup worker runs, :func:`daemon.scoring.pair_scorer` with the potential
  threshold as floor (a pair shown to score below it is dropped before every field is compared)
  and a token-rarity snapshot of the corpus's titles attached, on fresh views (``cold``) and again
  (``warm``).

Usage::

    python bench/bench_scoring.py [--listings 3000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.corpus_products import build_corpus  # noqa: E402
from daemon.evaluation.datasets import default_data_dir  # noqa: E402
from daemon.profiles import PROFILES  # noqa: E402
from daemon.scoring import ScoringConfig, Side, score_sides  # noqa: E402
from daemon.scoring.combine import pair_scorer  # noqa: E402
from daemon.scoring.rarity import FrequencyCounter, Rarity  # noqa: E402
from daemon.signatures import compute_signature  # noqa: E402
from tests import scoring_reference as ref  # noqa: E402

Doc = tuple[dict[str, Any], dict[str, Any]]


def product_line_pairs(listings: int) -> tuple[list[Doc], list[tuple[int, int]], Rarity]:
    """The product corpus of ``listings`` listings (seed 5, 8 shops) as ``(fields, signature)``
    documents, every pair ``(i, j)``, ``i < j``, of two listings of one product line, and a
    token-rarity snapshot (version 1) of the corpus's titles.

    Raises:
        SystemExit: without ``../shared/data/abt-buy`` (or ``NEARSYNC_DATA``).
    """
    data = default_data_dir()
    if data is None or not (data / "abt-buy" / "Abt.csv").is_file():
        raise SystemExit("needs ../shared/data/abt-buy (or NEARSYNC_DATA)")
    corpus = build_corpus(listings, seed=5, data_dir=data, shops=8)
    docs = [(dict(x.fields), compute_signature(x.fields).to_document()) for x in corpus]
    lines: dict[int, list[int]] = {}
    for i, x in enumerate(corpus):
        lines.setdefault(x.family, []).append(i)
    counter = FrequencyCounter()
    for fields, _ in docs:
        counter.add(fields.get("title"))
    pairs = [(a, b) for ids in lines.values() for a in ids for b in ids if a < b]
    return docs, pairs, Rarity(1, counter.documents, *counter.arrays())


def main() -> None:
    """Parse the arguments, build the corpus and print µs per pair for each scorer and profile."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listings", type=int, default=3000, help="listings in the corpus (default 3000)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    args = ap.parse_args()
    docs, pairs, snapshot = product_line_pairs(args.listings)
    print(f"{len(docs):,} listings, {len(pairs):,} pairs within product lines", flush=True)
    for rnd in range(1, args.rounds + 1):
        for name in ("products", "classified"):
            cfg = ScoringConfig.from_mapping(PROFILES[name]["dedup"])
            t = time.perf_counter()
            for a, b in pairs:
                ref.score_pair(docs[a][0], docs[a][1], docs[b][0], docs[b][1], cfg)
            reference = (time.perf_counter() - t) / len(pairs) * 1e6
            t = time.perf_counter()
            sides = [Side(f, s) for f, s in docs]
            for a, b in pairs:
                score_sides(sides[a], sides[b], cfg)
            cold = (time.perf_counter() - t) / len(pairs) * 1e6
            t = time.perf_counter()
            for a, b in pairs:
                score_sides(sides[a], sides[b], cfg)
            warm = (time.perf_counter() - t) / len(pairs) * 1e6
            print(f"round {rnd} {name:>10}: reference {reference:5.1f} us/pair, prepared {cold:5.1f} (cold) / "
                  f"{warm:5.1f} (warm) us/pair, ratio {reference / warm:.1f}x", flush=True)
            worker = pair_scorer(cfg.with_snapshot(snapshot), cfg.potential_threshold)
            t = time.perf_counter()
            sides = [Side(f, s) for f, s in docs]
            kept = sum(worker(sides[a], sides[b]) is not None for a, b in pairs)
            cold = (time.perf_counter() - t) / len(pairs) * 1e6
            t = time.perf_counter()
            for a, b in pairs:
                worker(sides[a], sides[b])
            warm = (time.perf_counter() - t) / len(pairs) * 1e6
            print(f"round {rnd} {name:>10}: worker (floor {cfg.potential_threshold:g}, rarity) {cold:5.1f} (cold) / "
                  f"{warm:5.1f} (warm) us/pair, {kept:,} pairs kept", flush=True)


if __name__ == "__main__":
    main()
