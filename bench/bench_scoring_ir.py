"""Instructions per scored pair of the dedup worker's scorer (a script, not a test), for valgrind.

Timings on a shared 2-core machine move by 2-3x between runs; an instruction count does not. This
script scores every pair within each product line of the product corpus (:mod:`bench.corpus_products`,
from ``../shared/data``) with what the dedup worker runs -- :func:`daemon.scoring.combine.pair_scorer`
of the ``products`` profile with the potential threshold as floor and a token-rarity snapshot of the
corpus's titles attached -- ``--rounds`` times, on fresh :class:`daemon.scoring.Side` views each
round (the first round also with cold memo caches), and prints a digest of the last round's results
(equal digests: equal scores, reasons and drops). Run it twice under valgrind, with and without
``--setup-only`` (the corpus, signatures and snapshot alone), and divide the difference of the two
``Collected`` counts by ``rounds x pairs``::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/bench_scoring_ir.py --listings 800 --rounds 3
    valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/bench_scoring_ir.py --listings 800 --rounds 3 --setup-only
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_scoring import product_line_pairs  # noqa: E402
from daemon.profiles import PROFILES  # noqa: E402
from daemon.scoring import ScoringConfig, Side  # noqa: E402
from daemon.scoring.combine import pair_scorer  # noqa: E402


def main() -> None:
    """Parse the arguments, build the corpus, score its product-line pairs and print a digest."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listings", type=int, default=800, help="listings in the corpus (default 800)")
    ap.add_argument("--rounds", type=int, default=3, help="scoring rounds on fresh views (default 3)")
    ap.add_argument("--setup-only", action="store_true", help="build everything, score nothing")
    args = ap.parse_args()
    docs, pairs, snapshot = product_line_pairs(args.listings)
    cfg = ScoringConfig.from_mapping(PROFILES["products"]["dedup"]).with_snapshot(snapshot)
    scorer = pair_scorer(cfg, cfg.potential_threshold)
    digest = hashlib.sha256()
    if not args.setup_only:
        results: list = []
        for _ in range(args.rounds):
            sides = [Side(f, s) for f, s in docs]
            results = [scorer(sides[a], sides[b]) for a, b in pairs]
        for p in results:
            digest.update(repr(None if p is None else (p.score, p.capped, p.reasons, p.details)).encode())
    print(f"{len(docs):,} listings, {len(pairs):,} pairs, {0 if args.setup_only else args.rounds} rounds, "
          f"digest {digest.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
