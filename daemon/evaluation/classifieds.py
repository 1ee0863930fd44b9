"""A generated labelled set of classified ads: cars, flats, clothes and phones, with reposts.

No shared data is needed: everything is drawn from small vocabularies with a seed (same seed, same
set). It exercises what classified-ads sites write that product catalogues do not:

* **the price in the title** (``VW Golf 1.4 TSI 2015 - 9500 €``, ``2 bed flat - €1500/month``,
  ``Zara summer dress size M - 15€``) for about half of the sellers, restated by a repost whose
  price dropped 3-15%;
* **a vehicle's mileage** in the title, written ``85000 km``, ``85 000 km`` or ``km 85.000`` by
  seller, a repost stating it 100-2,500 km higher;
* **the seller's phone number** in the body, a repost writing it with or without the country code
  (``06 12 34 56 78`` / ``+33 6 12 34 56 78``);
* **hard negatives in one seller's stock**: a dealer's cars of one make, model and year (mileages
  at least 8,000 km and 5% apart), or two of one model a few hundred km apart, one with a manual
  and one with an automatic gearbox; an agency's flats with the same rooms in one postcode (other
  surfaces and rents), or flats of one block alike but for their floor (``2nd floor`` / ``4th
  floor``); one garment in two or three sizes or colours, or in one size and colour for men and
  for women; one phone model in two storage sizes or colours, or two tiers of its line in one
  storage size and colour (``iPhone 6s`` / ``6s Plus``, ``Galaxy S21`` / ``S21+``). Their bodies
  are drawn from the category's few phrases, so they share many words.
* **numbers written as words**: some agencies write a flat's rooms as a word (``Two bed flat``), and
  a repost may write them the other way.
* **reposts**: about half of the ads are reposted once, some twice, each with one to three edits
  drawn from: the price dropped (and restated in the title where the seller writes it there), the
  mileage raised (cars), the phone written the other way, the rooms written the other way (flats),
  an ``URGENT`` / ``PRICE REDUCED`` / emoji prefix, two title words swapped, the body's sentences
  reordered, a typo in the title.

The true pairs are repost ↔ original (their closure also links two reposts of one ad); there are
none across sellers. Records are written in creation order (every original first, then the
reposts), as ``records.csv`` (``id,user,category,title,body,price``, UTF-8) and ``pairs.csv``
(``a,b``). Built by nearsync around the patterns above, so it tests that they are handled (and
that a seller's similar items stay apart); it is no evidence of how other sites' ads fare.

Run ``python -m daemon.evaluation.classifieds OUT_DIR [--seed N] [--sellers N]``, then ``nearsync
evaluate --records OUT_DIR/records.csv --pairs OUT_DIR/pairs.csv --map
title=title,body=body,price=price,user=user,category=category``.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from daemon.evaluation.datasets import with_reposts, write_labelled_set
from daemon.scoring.metrics import english_ordinal

CARS = (("VW", "Golf", "1.4 TSI"), ("VW", "Polo", "1.0 TSI"), ("Renault", "Clio", "1.2 TCe"),
        ("Renault", "Megane", "1.5 dCi"), ("Peugeot", "208", "1.2 PureTech"), ("Peugeot", "308", "1.6 HDi"),
        ("Ford", "Focus", "1.0 EcoBoost"), ("Ford", "Fiesta", "1.25"), ("Toyota", "Yaris", "1.5 Hybrid"),
        ("Toyota", "Corolla", "1.8 Hybrid"), ("BMW", "Serie 3", "320d"), ("Audi", "A3", "1.6 TDI"),
        ("Fiat", "Panda", "1.2"), ("Opel", "Corsa", "1.4"), ("Skoda", "Octavia", "2.0 TDI"))
CITIES = (("Paris", "75011"), ("Paris", "75015"), ("Lyon", "69003"), ("Lyon", "69007"), ("Marseille", "13006"),
          ("Lille", "59000"), ("Nantes", "44000"), ("Bordeaux", "33000"))
CLOTHES = (("Zara", "summer dress"), ("Zara", "wool coat"), ("H&M", "denim jacket"), ("Nike", "hoodie"),
           ("Adidas", "track jacket"), ("Levi's", "501 jeans"), ("Mango", "linen shirt"), ("Uniqlo", "down jacket"))
CUTS = ("mens", "womens")
"""Cuts of the garments other than the dress (a seller's one jacket for men and for women)."""
COLOURS = ("black", "white", "navy", "red", "grey", "beige", "green", "pink")
SIZES = ("XS", "S", "M", "L", "XL", "XXL")
PHONES = (("iPhone", "12"), ("iPhone", "13"), ("iPhone", "11 Pro"), ("Galaxy", "S21"), ("Galaxy", "A52"),
          ("Pixel", "6"), ("Xiaomi", "Redmi Note 10"), ("iPhone", "6s"))
TIERS = {"12": ("12", "12 Pro"), "S21": ("S21", "S21+"), "6s": ("6s", "6s Plus")}
"""The models of :data:`PHONES` whose line has another tier a seller may list beside them."""
ROOM_WORDS = ("One", "Two", "Three", "Four")
GEARBOXES = ("manual", "automatic")
STORAGE = (64, 128, 256)
CAR_LINES = ("Full service history.", "Non-smoker, no pets.", "Timing belt done last year.", "Two keys.",
             "New tyres.", "Air conditioning works fine.", "MOT valid.", "Second owner.")
FLAT_LINES = ("Bright and quiet.", "Close to the metro.", "Renovated kitchen.", "Lift and cellar.",
              "Available now.", "Agency fees included.", "Double glazing.", "South facing balcony.")
CLOTH_LINES = ("Worn twice.", "Like new.", "Smoke-free home.", "Can send by post.", "No stains or holes.",
               "Bought last season.")
PHONE_LINES = ("No scratches.", "Battery health 89%.", "With box and charger.", "Unlocked, any network.",
               "Screen protector since day one.")
PREFIXES = ("URGENT - ", "PRICE REDUCED - ", "\U0001f525 ", "Must go! ")
EDITS = ("price", "mileage", "phone", "rooms", "prefix", "swap_words", "body_order", "typo")


def _grouped(n: int) -> str:
    """``85000`` → ``85 000``."""
    return f"{n:,}".replace(",", " ")


def _dotted(n: int) -> str:
    """``85000`` → ``85.000``."""
    return f"{n:,}".replace(",", ".")


def _phone(rng: random.Random) -> tuple[str, str]:
    """A French mobile number, national and international: ``06 12 34 56 78``, ``+33 6 12 34 56 78``."""
    digits = [rng.choice("67")] + [str(rng.randrange(10)) for _ in range(8)]
    pairs = ["".join(digits[i:i + 2]) for i in range(1, 9, 2)]
    return f"0{digits[0]} {' '.join(pairs)}", f"+33 {digits[0]} {' '.join(pairs)}"


class _Seller:
    """One seller's style: whether and how the price goes in the title, the phone's two writings,
    and for cars how the mileage is written."""

    def __init__(self, rng: random.Random, user: str) -> None:
        self.user = user
        self.price_in_title = rng.random() < 0.5
        self.mileage_style = rng.randrange(3)
        self.phone = _phone(rng) if rng.random() < 0.6 else None
        self.phone_style = rng.randrange(2)
        self.rooms_in_words = rng.random() < 0.3


def _title(category: str, item: dict[str, Any], seller: _Seller, price: int, *,
           rooms_in_words: bool | None = None) -> str:
    """The ad's title in the seller's style, with its current price and (cars) mileage; a flat's
    rooms as a word where the seller writes them so (``rooms_in_words`` overrides it: a repost)."""
    if category == "car":
        km = item["km"]
        reading = (f"{km} km", f"{_grouped(km)} km", f"km {_dotted(km)}")[seller.mileage_style]
        gearbox = f" {item['gearbox']}" if item.get("gearbox") else ""
        base = f"{item['make']} {item['model']} {item['engine']}{gearbox} {item['year']} {reading}".replace("  ", " ")
        return f"{base} - {price} €" if seller.price_in_title else base
    if category == "flat":
        words = seller.rooms_in_words if rooms_in_words is None else rooms_in_words
        rooms = ROOM_WORDS[item["rooms"] - 1] if words else str(item["rooms"])
        floor = f" {english_ordinal(item['floor'])} floor" if item.get("floor") else ""
        base = f"{rooms} bed flat {item['surface']}m2{floor} {item['city']} {item['postcode']}"
        return f"{base} - €{price}/month" if seller.price_in_title else base
    if category == "clothes":
        cut = f" {item['cut']}" if item.get("cut") else ""
        base = f"{item['brand']} {item['item']}{cut} size {item['size']} {item['colour']}"
        return f"{base} - {price}€" if seller.price_in_title else base
    base = f"{item['brand']} {item['model']} {item['storage']}GB {item['colour']}"
    return f"{base} - {price} EUR" if seller.price_in_title else base


def _body(rng: random.Random, category: str, seller: _Seller) -> list[str]:
    """The ad's body sentences: from the seller's category phrases, and the phone where they give it."""
    lines = {"car": CAR_LINES, "flat": FLAT_LINES, "clothes": CLOTH_LINES, "phone": PHONE_LINES}[category]
    body = rng.sample(lines, min(len(lines), rng.randint(3, 4)))
    if seller.phone is not None:
        body.append(f"Call {seller.phone[seller.phone_style]}.")
    return body


def _stock(rng: random.Random, category: str) -> list[tuple[dict[str, Any], int]]:
    """One seller's items of one category and their prices: one to four items of a kind, which are
    the hard negatives of one another (see the module docstring)."""
    n = rng.choice((1, 1, 2, 3, 4))
    twins = n >= 2 and rng.random() < 0.35  # items alike but for one word (see the module docstring)
    if category == "car":
        make, model, engine = rng.choice(CARS)
        year = rng.randint(2008, 2022)
        if twins:  # two of one model a few hundred km apart, one manual, one automatic
            km, price = rng.randrange(15_000, 220_000, 100), rng.randrange(3_000, 25_000, 100)
            return [({"make": make, "model": model, "engine": engine, "year": year, "gearbox": g,
                      "km": km + rng.randrange(0, 800, 50)}, price + rng.randrange(0, 300, 50)) for g in GEARBOXES]
        kms: list[int] = []
        while len(kms) < n:
            km = rng.randrange(15_000, 220_000, 100)
            if all(abs(km - k) > max(8_000, 0.05 * max(km, k)) for k in kms):
                kms.append(km)
        return [({"make": make, "model": model, "engine": engine, "year": year, "km": km},
                 rng.randrange(3_000, 25_000, 100)) for km in kms]
    if category == "flat":
        city, postcode = rng.choice(CITIES)
        rooms = rng.randint(1, 4)
        if twins:  # one block's flats alike but for their floor
            surface = rng.randrange(18 + 15 * rooms, 40 + 25 * rooms)
            rent = 12 * surface + rng.randrange(0, 400, 10)
            return [({"rooms": rooms, "surface": surface, "floor": f, "city": city, "postcode": postcode}, rent)
                    for f in sorted(rng.sample(range(1, 7), n))]
        surfaces = rng.sample(range(18 + 15 * rooms, 40 + 25 * rooms), n)
        return [({"rooms": rooms, "surface": s, "city": city, "postcode": postcode}, 12 * s + rng.randrange(0, 400, 10))
                for s in surfaces]
    if category == "clothes":
        brand, item = rng.choice(CLOTHES)
        price = rng.randrange(8, 80)
        if twins and item != "summer dress":  # one garment in one size and colour, for men and for women
            size, colour = rng.choice(SIZES), rng.choice(COLOURS[:3])
            return [({"brand": brand, "item": item, "cut": cut, "size": size, "colour": colour}, price) for cut in CUTS]
        variants = rng.sample([(s, c) for s in SIZES for c in COLOURS[:3]], n)
        return [({"brand": brand, "item": item, "size": s, "colour": c}, price) for s, c in variants]
    brand, model = rng.choice(PHONES)
    if twins and model in TIERS:  # two tiers of one line in one storage size and colour
        storage, colour = rng.choice(STORAGE), rng.choice(COLOURS[:2])
        return [({"brand": brand, "model": tier, "storage": storage, "colour": colour}, rng.randrange(150, 900, 10))
                for tier in TIERS[model]]
    models = rng.sample([(g, c) for g in STORAGE for c in COLOURS[:2]], min(n, 6))
    return [({"brand": brand, "model": model, "storage": g, "colour": c}, rng.randrange(150, 900, 10))
            for g, c in models]


def _typo(rng: random.Random, title: str) -> str:
    """One keyboard slip (two neighbours swapped) in a title word of five letters or more."""
    words = title.split()
    long = [i for i, w in enumerate(words) if len(w) >= 5 and w.isalpha()]
    if not long:
        return title
    i = rng.choice(long)
    w = words[i]
    j = rng.randrange(1, len(w) - 2)
    words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
    return " ".join(words)


def _repost(rng: random.Random, ad: dict[str, Any], edits: list[str]) -> dict[str, Any]:
    """A copy of ``ad`` with ``edits`` applied (see the module docstring)."""
    seller, item, price = ad["seller"], dict(ad["item"]), ad["price"]
    body = list(ad["body"])
    if "price" in edits:
        price = int(price * (1 - rng.uniform(0.03, 0.15)))
    if "mileage" in edits and ad["category"] == "car":
        item["km"] += rng.randrange(100, 2_500, 50)
    if "phone" in edits and seller.phone is not None:
        body = [f"Call {seller.phone[1 - seller.phone_style]}." if s.startswith("Call ") else s for s in body]
    if "body_order" in edits:
        rng.shuffle(body)
    flip = "rooms" in edits and ad["category"] == "flat"
    title = _title(ad["category"], item, seller, price, rooms_in_words=(not seller.rooms_in_words) if flip else None)
    if "swap_words" in edits:
        words = title.split()
        words[0], words[1] = words[1], words[0]
        title = " ".join(words)
    if "typo" in edits:
        title = _typo(rng, title)
    if "prefix" in edits:
        title = rng.choice(PREFIXES) + title
    return {**ad, "item": item, "price": price, "body": body, "title": title}


def build_classifieds(*, seed: int = 41, sellers: int = 400) -> tuple[list[dict[str, Any]], set[tuple[str, str]]]:
    """The classified-ads set (see the module docstring).

    Args:
        seed: the random seed (same seed and size, same set).
        sellers: how many sellers post (each one to four ads of one category: ~2.2 ads and ~1.6
            reposts each).
    Returns:
        ``(records, pairs)``: records as dicts with ``id``, ``user``, ``category``, ``title``,
        ``body`` (text), ``price`` in creation order; true pairs ``(original id, repost id)``.
    """
    rng = random.Random(seed)
    originals: list[dict[str, Any]] = []
    for k in range(sellers):
        seller = _Seller(rng, f"user{k:04d}")
        category = rng.choice(("car", "flat", "clothes", "phone"))
        for item, price in _stock(rng, category):
            ad: dict[str, Any] = {"seller": seller, "category": category, "item": item, "price": price,
                                  "body": _body(rng, category, seller)}
            originals.append({**ad, "title": _title(category, item, seller, price)})
    reposts, pairs = with_reposts(rng, originals, lambda ad: _repost(rng, ad, rng.sample(EDITS, rng.randint(1, 3))))
    records = [{"id": r["id"], "user": r["seller"].user, "category": r["category"], "title": r["title"],
                "body": " ".join(r["body"]), "price": r["price"]} for r in originals + reposts]
    return records, pairs


def write_classifieds(out_dir: Path, *, seed: int = 41, sellers: int = 400) -> tuple[Path, Path]:
    """Write ``records.csv`` and ``pairs.csv`` of :func:`build_classifieds` to ``out_dir`` (created).

    Returns:
        The two paths. Raises OSError when ``out_dir`` cannot be written.
    """
    records, pairs = build_classifieds(seed=seed, sellers=sellers)
    return write_labelled_set(out_dir, ("id", "user", "category", "title", "body", "price"), records, pairs)


def main(argv: list[str] | None = None) -> int:
    """``python -m daemon.evaluation.classifieds OUT_DIR [--seed N] [--sellers N]``; prints the two paths."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=41)
    p.add_argument("--sellers", type=int, default=400, help="sellers posting (default 400: ~900 ads, ~620 reposts)")
    args = p.parse_args(argv)
    if args.sellers < 1:
        p.error(f"--sellers must be at least 1, got {args.sellers}")
    for path in write_classifieds(args.out, seed=args.seed, sellers=args.sellers):
        print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
