"""Scores of the classified-ads example pairs quoted in the docs (a script, not a test): prints each
pair's score (0-100), decision and summary under the default (``classified``) profile.

The pairs are the examples of CHANGELOG.md and docs/quality.md: reposts that restate a changed
price, mileage or phone writing, and a seller's look-alike items (garment sizes, an agency's flats
in one postcode, a shop's two tiers of one phone). The postcode pairs are scored twice: without a
corpus snapshot and with one in which the postcode is in more titles than
``COMMON_CODE_DOCUMENTS``. To score them with another
revision's code, run this file with that checkout first on the path::

    python bench/bench_pairs.py
    PYTHONPATH=/path/to/other/checkout python bench/bench_pairs.py   # its daemon package, this script
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if not os.environ.get("PYTHONPATH"):  # else the checkout named there, before the installed package
    sys.path.insert(0, str(REPO))

from daemon.scoring import ScoringConfig, decide, score_pair  # noqa: E402
from daemon.scoring.rarity import FrequencyCounter, Rarity  # noqa: E402
from daemon.signatures import compute_signature  # noqa: E402

CAR = "Well maintained, full service history, new tyres."
FLAT = "Bright 2 bedroom flat near the metro, 2nd floor, renovated kitchen, available now."
WEAR = "Worn twice, like new, smoke-free home."
ONE_FLAT = "Bright flat near the metro, 2nd floor, renovated kitchen."
OTHER_FLAT = "Quiet studio on the courtyard, 5th floor with lift."
PHONE = "Like new, always in a case, with box and charger."
HOUSE = "Bright house with garden, close to schools and shops, double glazing."

PAIRS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("mileage repost", {"title": "VW Golf 1.4 TSI 2015 85000 km", "body": CAR, "price": 9500},
     {"title": "VW Golf 1.4 TSI 2015 86500 km", "body": CAR, "price": 9300}),
    ("mileage repost, 85 000 km", {"title": "VW Golf 1.4 TSI 2015, 85 000 km", "body": CAR, "price": 9500},
     {"title": "VW Golf 1.4 TSI 2015, 86 500 km", "body": CAR, "price": 9300}),
    ("mileage repost, 85.000 km", {"title": "VW Golf 1.4 TSI 2015 85.000 km", "body": CAR, "price": 9500},
     {"title": "VW Golf 1.4 TSI 2015 86.500 km", "body": CAR, "price": 9300}),
    ("a dealer's two cars", {"title": "VW Golf 1.4 TSI 2015 85000 km", "body": CAR, "price": 9500},
     {"title": "VW Golf 1.4 TSI 2015 140000 km", "body": CAR, "price": 9400}),
    ("price drop, €/month", {"title": "2 bed flat €1500/month", "body": FLAT, "price": 1500},
     {"title": "2 bed flat €1450/month", "body": FLAT, "price": 1450}),
    ("price drop, EUR", {"title": "2 bed flat - 1500 EUR", "body": FLAT, "price": 1500},
     {"title": "2 bed flat - 1450 EUR", "body": FLAT, "price": 1450}),
    ("price drop, €", {"title": "Sofa 3 seater 250€ negotiable", "body": FLAT, "price": 250},
     {"title": "Sofa 3 seater 200€ negotiable", "body": FLAT, "price": 200}),
    ("price drop, EUR (a phone)", {"title": "iPhone 12 64GB black - 450 EUR", "body": FLAT, "price": 450},
     {"title": "iPhone 12 64GB black - 420 EUR", "body": FLAT, "price": 420}),
    ("price drop, bare number", {"title": "Sofa 3 seater - 250", "body": "Grey fabric sofa, good condition.", "price": 250},
     {"title": "Sofa 3 seater - 200", "body": "Grey fabric sofa, good condition.", "price": 200}),
    ("price drop, in thousands", {"title": "House 3 bed - 250k", "body": HOUSE, "price": 250_000},
     {"title": "House 3 bed - 245k", "body": HOUSE, "price": 245_000}),
    ("phone with country code", {"title": "iPhone 12 64GB black", "body": "Good condition. Call 06 12 34 56 78.",
                                 "price": 450},
     {"title": "iPhone 12 64GB black", "body": "Good condition. Call +33 6 12 34 56 78.", "price": 440}),
    ("phone, UK", {"title": "iPhone 12 64GB black", "body": "Good condition. Call 07700 900123.", "price": 450},
     {"title": "iPhone 12 64GB black", "body": "Good condition. Call +44 7700 900123.", "price": 440}),
    ("sizes M / L", {"title": "Zara summer dress size M", "body": WEAR, "price": 20},
     {"title": "Zara summer dress size L", "body": WEAR, "price": 20}),
    ("sizes XL / XXL", {"title": "Nike hoodie XL black", "body": WEAR, "price": 30},
     {"title": "Nike hoodie XXL black", "body": WEAR, "price": 30}),
    ("a shop's two tiers, S21 / S21+", {"title": "Samsung Galaxy S21 128GB black", "body": PHONE, "price": 400},
     {"title": "Samsung Galaxy S21+ 128GB black", "body": PHONE, "price": 450}),
    ("a shop's two tiers, 12 Pro / 12 Pro Max", {"title": "iPhone 12 Pro 128GB graphite", "body": PHONE, "price": 600},
     {"title": "iPhone 12 Pro Max 128GB graphite", "body": PHONE, "price": 650}),
    ("one tier written two ways, a repost", {"title": "Samsung Galaxy S21+ 128GB black", "body": PHONE, "price": 450},
     {"title": "Samsung Galaxy S21 Plus 128GB black - price drop", "body": PHONE, "price": 430}),
    ("an agency's flats, one postcode",
     {"title": "Appartement 2 pièces 75011 Paris", "body": ONE_FLAT, "price": 1500},
     {"title": "Appartement 2 pièces 75011 Paris", "body": OTHER_FLAT, "price": 1500}),
    ("the same, no postcode",
     {"title": "Appartement 2 pièces Paris 11e", "body": ONE_FLAT, "price": 1500},
     {"title": "Appartement 2 pièces Paris 11e", "body": OTHER_FLAT, "price": 1500}),
]


def postcode_snapshot(documents: int = 30) -> Rarity:
    """A corpus snapshot of ``documents`` flat titles of the postcode 75011 (so the postcode is in
    more titles than the common-code bound of 20)."""
    counter = FrequencyCounter()
    for i in range(documents):
        counter.add(f"flat {i % 5} rooms paris 75011 ref{i}")
    return Rarity(1, counter.documents, *counter.arrays())


def main() -> int:
    """Print one line per pair (and the postcode pairs again with the snapshot); returns 0."""
    import daemon

    print(f"code: {Path(daemon.__file__).resolve().parent.parent}")
    plain = ScoringConfig.from_mapping({})
    with_snapshot = plain.with_snapshot(postcode_snapshot())
    for label, a, b in PAIRS:
        for cfg, note in ((plain, ""), (with_snapshot, ", with a snapshot")) if "flats" in label or "postcode" in label \
                else ((plain, ""),):
            p = score_pair(a, compute_signature(a).to_document(), b, compute_signature(b).to_document(), cfg)
            print(f"{label}{note}: {p.score:.1f} {decide(p.score, cfg) or 'not flagged'} | {p.summary()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
