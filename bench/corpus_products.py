"""A seeded corpus of product listings with realistic near-duplicate density, for the dedup benches.

Built from the Abt-Buy listings (both shops, read at run time from ``../shared/data/abt-buy``,
never copied). The unit is a *product line* (a family): one Abt-Buy product (for a matched pair
both shops' texts, else the one listing), of which

* ``variants`` products are made: the original and hard negatives that differ from it in their
  model number (always), and often in a colour or a size as well (``KDL40V`` → ``KDL46V``,
  ``Black`` → ``Silver``, ``32''`` → ``40''``), at a different price;
* each product is listed by several of ``shops`` shops (one listing per shop, the ``source``), each
  listing starting from one of the product's Abt-Buy texts with seeded edits: a typo or two, words
  dropped from the title and the body, the description cut short, the price within ±10%.

Product lines beyond the number of Abt-Buy products (about 2,200, so from about 100,000 listings
on) are later *generations* of a base product: every model number re-rolled (same shape, other
characters) and about half of the other words of title and body swapped for words of other
listings, so that the density per listing stays that of one product line instead of growing with
the corpus. Listings come out in a seeded shuffled order (created in that order).

Every listing carries its labels (:class:`Listing`): product line, product, shop.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.evaluation.datasets import abt_buy
from daemon.evaluation.loader import parse_price

SHOP_NAMES = ("abt", "buy", "shop3", "shop4", "shop5", "shop6", "shop7", "shop8", "shop9", "shop10", "shop11",
              "shop12")
COLOURS = ("Black", "White", "Silver", "Red", "Blue", "Grey", "Pink", "Green", "Gold", "Brown")
_COLOUR_RE = re.compile(r"\b(" + "|".join(COLOURS) + r")\b", re.IGNORECASE)
#: A model number as the signatures see one: letters and digits mixed, 4 characters or more.
MODEL_RE = re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][A-Za-z0-9-]{3,}\b")
_SIZE_RE = re.compile(r"\b(\d{1,4})(\s?)(''|\"|-inch|\s?inch|in\b|GB|TB|MP|W\b|-Watt|mm)", re.IGNORECASE)
_WORD_RE = re.compile(r"\b[A-Za-z]{3,}\b")


@dataclass(frozen=True)
class Listing:
    """One listing of the corpus: its ``fields`` (``title``, ``body``, ``price``, ``source``,
    ``category``) and labels: ``family`` (product line), ``product`` (``family:variant``; listings
    of one product are true duplicates, of two products of a family hard negatives)."""

    fields: dict[str, Any]
    family: int
    product: str


@dataclass(frozen=True)
class BaseProduct:
    """An Abt-Buy product: its listings' ``(title, body, price, manufacturer)`` texts (two for a
    matched Abt/Buy pair, else one)."""

    texts: tuple[tuple[str, str, float | None, str | None], ...]


def base_products(data_dir: Path) -> list[BaseProduct]:
    """The Abt-Buy products, in file order: matched pairs as one product with both shops' texts,
    unmatched listings alone.

    Raises:
        FileNotFoundError: the files are not in ``data_dir/abt-buy``.
    """
    ds = abt_buy(data_dir)
    by_key = {r.key: r.fields for r in ds.records}

    def text(f: dict[str, Any]) -> tuple[str, str, float | None, str | None]:
        return (f.get("title") or "", f.get("body") or "", parse_price(f.get("price")), f.get("category"))

    out, used = [], set()
    for a, b in sorted(ds.pairs):
        if a in used or b in used:  # the mapping is not strictly one-to-one: first pair wins
            continue
        used |= {a, b}
        out.append(BaseProduct((text(by_key[a]), text(by_key[b]))))
    out += [BaseProduct((text(f),)) for k, f in by_key.items() if k not in used]
    return out


def _typo(rng: random.Random, word: str) -> str:
    if len(word) < 4 or MODEL_RE.fullmatch(word):
        return word
    i = rng.randrange(1, len(word) - 2)
    return word[:i] + word[i + 1] + word[i] + word[i + 2:]


def reroll_model(rng: random.Random, model: str) -> str:
    """``model`` with every letter and digit replaced by a random one of the same kind (its shape,
    hyphens and case kept): another product's model number."""
    out = []
    for ch in model:
        if ch.isdigit():
            out.append(str(rng.randrange(10)))
        elif ch.isalpha():
            c = chr(ord("A") + rng.randrange(26))
            out.append(c if ch.isupper() else c.lower())
        else:
            out.append(ch)
    return "".join(out)


def variant_model(rng: random.Random, model: str) -> str:
    """A sibling model number: one digit changed (``KDL40V`` → ``KDL46V``), or the last letter when
    it has no digit to change; never ``model`` itself."""
    digits = [i for i, ch in enumerate(model) if ch.isdigit()]
    i = digits[-1] if digits and rng.random() < 0.7 else rng.choice(digits) if digits else len(model) - 1
    ch = model[i]
    if ch.isdigit():
        new = str((int(ch) + rng.randrange(1, 10)) % 10)
    else:
        new = chr((ord(ch.upper()) - ord("A") + rng.randrange(1, 26)) % 26 + ord("A"))
    return model[:i] + new + model[i + 1:]


def _map_models(text: str, mapping: dict[str, str]) -> str:
    return MODEL_RE.sub(lambda m: mapping.get(m.group(0), m.group(0)), text)


def _swap_words(rng: random.Random, text: str, vocabulary: Sequence[str], rate: float) -> str:
    return _WORD_RE.sub(lambda m: rng.choice(vocabulary) if rng.random() < rate else m.group(0), text)


def _edit_listing(rng: random.Random, title: str, body: str, price: float | None) -> tuple[str, str, float | None]:
    """One shop's listing of a product: typos, dropped words, a cut description, price ±10%."""
    words = title.split()
    droppable = [i for i, w in enumerate(words) if not MODEL_RE.fullmatch(w.strip("-/,()"))]
    if len(droppable) > 3 and rng.random() < 0.5:
        del words[rng.choice(droppable)]
    for _ in range(rng.choice((0, 1, 1, 2))):
        if words:
            j = rng.randrange(len(words))
            words[j] = _typo(rng, words[j])
    bwords = [w for w in body.split() if rng.random() > 0.1]
    if len(bwords) > 20 and rng.random() < 0.3:
        bwords = bwords[: rng.randrange(len(bwords) // 2, len(bwords))]
    for _ in range(rng.choice((0, 1, 2, 3))):
        if bwords:
            j = rng.randrange(len(bwords))
            bwords[j] = _typo(rng, bwords[j])
    if price is not None:
        price = round(price * rng.uniform(0.9, 1.1), 2)
    return " ".join(words), " ".join(bwords), price


def _hard_negative(rng: random.Random, texts: list[list[Any]], taken: set[str]) -> list[list[Any]]:
    """A sibling product of ``texts`` (all of one product's texts, changed consistently): every model
    number changed to one not in ``taken`` (the product line's model numbers so far, which this
    one's are added to), often a colour or a size too, another price."""
    models = sorted({m.group(0) for t in texts for part in t[:2] for m in MODEL_RE.finditer(part)})
    mapping: dict[str, str] = {}
    for m in models:
        new = variant_model(rng, m)
        for _ in range(50):
            if new not in taken:
                break
            new = variant_model(rng, m)
        mapping[m] = new
        taken.add(new)
    named = reroll_model(rng, "XX000")
    while named in taken:
        named = reroll_model(rng, "XX000")
    taken.add(named)
    colour = rng.choice(COLOURS) if rng.random() < 0.4 else None
    size_delta = rng.choice((2, 4, 6, 10, 12, 20)) if rng.random() < 0.4 else 0
    factor = rng.uniform(0.7, 1.4)
    out = []
    for title, body, price, maker in texts:
        title, body = _map_models(title, mapping), _map_models(body, mapping)
        if not models:  # nothing to tell the products apart by otherwise: name it
            title = f"{title} {named}"
        if colour:
            if _COLOUR_RE.search(title):
                title, body = _COLOUR_RE.sub(colour, title), _COLOUR_RE.sub(colour, body)
            else:
                title = f"{title} - {colour}"
        if size_delta:
            def bump(m: re.Match[str]) -> str:
                return f"{int(m.group(1)) + size_delta}{m.group(2)}{m.group(3)}"
            title, body = _SIZE_RE.sub(bump, title), _SIZE_RE.sub(bump, body)
        out.append([title, body, None if price is None else round(price * factor, 2), maker])
    return out


def _next_generation(rng: random.Random, texts: list[list[Any]], vocabulary: Sequence[str]) -> list[list[Any]]:
    """A product line made from a base product: model numbers re-rolled, half the other words swapped."""
    models = sorted({m.group(0) for t in texts for part in t[:2] for m in MODEL_RE.finditer(part)})
    mapping = {m: reroll_model(rng, m) for m in models}
    out = []
    for title, body, price, maker in texts:
        title = _swap_words(rng, _map_models(title, mapping), vocabulary, 0.5)
        body = _swap_words(rng, _map_models(body, mapping), vocabulary, 0.5)
        out.append([title, body, None if price is None else round(price * rng.uniform(0.5, 2.0), 2), maker])
    return out


def build_corpus(n: int, *, seed: int = 18, data_dir: Path, shops: int = 8, variants: tuple[int, int] = (2, 6),
                 listed_by: tuple[int, int] = (2, 6)) -> list[Listing]:
    """``n`` listings (see the module docstring); the same ``seed`` gives the same corpus.

    Args:
        data_dir: the shared data directory (holding ``abt-buy``).
        shops: the number of shops (sources); at most ``len(SHOP_NAMES)``.
        variants: (min, max) products per product line (the original and its hard negatives).
        listed_by: (min, max) shops listing each product (capped at ``shops``).
    Raises:
        FileNotFoundError: the Abt-Buy files are absent. ValueError: ``shops`` out of range.
    """
    if not 2 <= shops <= len(SHOP_NAMES):
        raise ValueError(f"shops must be between 2 and {len(SHOP_NAMES)}, got {shops}")
    bases = base_products(data_dir)
    vocabulary = sorted({w for b in bases for t in b.texts for w in _WORD_RE.findall(t[0] + " " + t[1])})
    rng = random.Random(seed)
    out: list[Listing] = []
    family = 0
    while len(out) < n:
        base = bases[family % len(bases)]
        frng = random.Random(f"{seed}:{family}")  # each line from its own stream, whatever n
        texts = [list(t) for t in base.texts]
        if family >= len(bases):
            texts = _next_generation(frng, texts, vocabulary)
        taken = {m.group(0) for t in texts for part in t[:2] for m in MODEL_RE.finditer(part)}
        for v in range(frng.randint(*variants)):
            vtexts = texts if v == 0 else _hard_negative(frng, texts, taken)
            k = min(shops, frng.randint(*listed_by))
            for shop in frng.sample(range(shops), k):
                title, body, price, maker = vtexts[frng.randrange(len(vtexts))]
                title, body, price = _edit_listing(frng, title, body, price)
                out.append(Listing({"title": title, "body": body, "price": price, "category": maker,
                                    "source": SHOP_NAMES[shop]}, family, f"{family}:{v}"))
        family += 1
    out = out[:n]
    rng.shuffle(out)
    return out


def key_postings(records: Sequence[dict[str, Any]], signatures: dict[str, Any]
                 ) -> tuple[list[list[str]], dict[str, list[int]]]:
    """Sign ``records`` (field dicts) with the ``[signatures]`` settings ``signatures`` and index
    their candidate keys in memory.

    Returns:
        ``(keys, postings)``: each record's keys (empty for a record whose signing failed), and
        key -> positions of the records holding it (the key's block).
    """
    from collections import defaultdict

    from daemon.capture.documents import coerce_numbers
    from daemon.signatures import SignatureParams, compute_signatures

    params = SignatureParams.from_mapping(signatures)
    sigs = compute_signatures([coerce_numbers(dict(f)) for f in records], params, errors="return")
    keys = [[] if isinstance(s, Exception) else s.keys() for s in sigs]
    postings: dict[str, list[int]] = defaultdict(list)
    for i, ks in enumerate(keys):
        for k in ks:
            postings[k].append(i)
    return keys, postings


def key_density(records: Sequence[dict[str, Any]], *, sample: int = 500, seed: int = 1,
                signatures: dict[str, Any] | None = None) -> dict[str, float]:
    """How many candidates the index's keys give a record, before the candidate cap: for ``sample``
    random records, the records of another ``source`` sharing at least one candidate key (LSH band,
    simhash block or super token) with it, as ``dedup.min_match = 1`` finds them.

    Args:
        records: field dicts (``title``, ``body``, ``price``, ``source``, ...).
        signatures: the ``[signatures]`` settings (default: those of the product profile).
    Returns:
        ``keys`` (mean keys per record), ``mean``, ``median``, ``p90`` candidates per record and
        ``over_cap`` (share over the product profile's candidate cap of 50).
    """
    from daemon.evaluation.evaluate import PRODUCT_PROFILE

    keys, postings = key_postings(records, signatures if signatures is not None else PRODUCT_PROFILE["signatures"])
    picked = random.Random(seed).sample(range(len(records)), min(sample, len(records)))
    counts = []
    for i in picked:
        found: set[int] = set()
        for k in keys[i]:
            found.update(postings[k])
        src = records[i].get("source")
        counts.append(sum(1 for j in found if j != i and records[j].get("source") != src))
    counts.sort()
    cap = PRODUCT_PROFILE["dedup"]["candidate_cap"]
    return {"keys": sum(map(len, keys)) / max(1, len(keys)), "mean": sum(counts) / max(1, len(counts)),
            "median": counts[len(counts) // 2], "p90": counts[int(0.9 * len(counts))],
            "over_cap": sum(c > cap for c in counts) / max(1, len(counts))}


def write_csv(listings: Sequence[Listing], out: Path) -> tuple[Path, Path]:
    """Write ``listings`` as a labelled set that ``nearsync evaluate`` reads: ``records.csv``
    (``id``, ``title``, ``body``, ``price``, ``source``; ids ``p0``, ``p1``, ... in corpus order) and
    ``pairs.csv`` (``a``, ``b``: each listing paired with the first listing of its product, when
    that one came from another shop; evaluate takes the transitive closure).

    Returns:
        The two paths. Raises OSError when ``out`` cannot be written.
    """
    import csv

    out.mkdir(parents=True, exist_ok=True)
    records, pairs = out / "records.csv", out / "pairs.csv"
    first: dict[str, int] = {}
    with records.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "title", "body", "price", "source"])
        for i, x in enumerate(listings):
            w.writerow([f"p{i}", x.fields["title"], x.fields["body"],
                        "" if x.fields["price"] is None else x.fields["price"], x.fields["source"]])
    with pairs.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["a", "b"])
        for i, x in enumerate(listings):
            j = first.setdefault(x.product, i)
            if j != i and listings[j].fields["source"] != x.fields["source"]:
                w.writerow([f"p{j}", f"p{i}"])
    return records, pairs


def main() -> None:
    """``python -m bench.corpus_products --density 10000 100000``: the candidate density (before the
    cap) of the real Abt-Buy listings and of corpora of the given sizes, side by side.
    ``--write-csv DIR --size N --shops 2``: write one corpus as a labelled set for ``nearsync
    evaluate`` instead (:func:`write_csv`)."""
    import argparse

    from daemon.evaluation.datasets import default_data_dir

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--density", type=int, nargs="*", default=[10_000], help="corpus sizes to measure")
    ap.add_argument("--seed", type=int, default=18, help="the corpus's seed")
    ap.add_argument("--shops", type=int, default=8)
    ap.add_argument("--sample", type=int, default=500, help="records whose candidates are counted")
    ap.add_argument("--write-csv", type=Path, metavar="DIR", help="write a labelled set (records.csv, pairs.csv)")
    ap.add_argument("--size", type=int, default=25_000, help="listings of the set --write-csv writes")
    args = ap.parse_args()
    data = default_data_dir()
    if data is None:
        raise SystemExit("needs ../shared/data/abt-buy (or NEARSYNC_DATA)")
    if args.write_csv:
        listings = build_corpus(args.size, seed=args.seed, data_dir=data, shops=args.shops)
        for path in write_csv(listings, args.write_csv):
            print(path)
        return
    sets: list[tuple[str, list[dict[str, Any]]]] = [("Abt-Buy as shipped (2 shops)",
                                                     [dict(r.fields) for r in abt_buy(data).records])]
    for n in args.density:
        sets.append((f"corpus of {n:,} ({args.shops} shops)",
                     [x.fields for x in build_corpus(n, seed=args.seed, data_dir=data, shops=args.shops)]))
    for label, records in sets:
        d = key_density(records, sample=args.sample)
        print(f"{label}: {len(records):,} listings, {d['keys']:.1f} keys each; other-source records sharing a key: "
              f"mean {d['mean']:.0f}, median {d['median']}, p90 {d['p90']}; over the cap of 50: {d['over_cap']:.0%}",
              flush=True)


if __name__ == "__main__":
    main()
