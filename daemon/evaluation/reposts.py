"""A labelled repost set built from real listings: sellers reposting their own ads with small edits.

Built from the Abt listings of ``../shared/data/abt-buy`` (1,081 distinct products with real
titles, descriptions and prices), seeded and deterministic:

* **sellers and hard negatives**: the listings are grouped by brand (first title word) and sorted
  by title, so one product line sits together (``Sony Bravia 40"``, ``Sony Bravia 46"``...); each
  run of 3-8 consecutive listings of a brand is one seller's stock. A seller's other products of
  the same line are the hard negatives: same words, different model or size numbers and prices.
* **reposts**: about half of the ads are reposted once, some twice, each repost with one to three
  edits drawn from: typos in the title, a dropped title word, two swapped title words, promotional
  text appended to the title or the body, the price moved by up to ±5%, a shortened title (the
  last third of its words cut, at least three kept), the body's sentences reordered or one
  dropped, or no body at all (a copy of the title, model number, seller and price only).
* the true pairs are repost ↔ original (their closure also links two reposts of one ad); there
  are no true pairs across sellers.

Records are written in creation order (every original first, then the reposts), as
``records.csv`` (``id,user,title,body,price``, UTF-8) and ``pairs.csv`` (``a,b``).

Run ``python -m daemon.evaluation.reposts OUT_DIR [--seed N]``, then e.g. ``nearsync evaluate
--records OUT_DIR/records.csv --pairs OUT_DIR/pairs.csv --map title=title,body=body,price=price,user=user``.
"""

from __future__ import annotations

import argparse
import random
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from daemon.evaluation.datasets import abt_buy_files, default_data_dir, read_records_csv, with_reposts, write_labelled_set
from daemon.evaluation.loader import parse_price

PROMOS = ("FREE SHIPPING", "Great deal!", "Must go - best offer", "Brand new in box", "Call or text today",
          "Price drop!", "Fast delivery", "Like new", "Cash only", "Limited stock")
"""Promotional snippets sellers append to a repost's title or body."""


def _typo(rng: random.Random, word: str) -> str:
    """One keyboard slip in a word of four letters or more: two neighbours swapped, one dropped or doubled."""
    if len(word) < 4 or not word.isalpha():
        return word
    i = rng.randrange(1, len(word) - 2)
    kind = rng.randrange(3)
    if kind == 0:
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if kind == 1:
        return word[:i] + word[i + 1:]
    return word[:i] + word[i] + word[i:]


def _sentences(body: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?/])\s+", body) if s.strip()]


EDITS = ("typo", "drop_word", "swap_words", "promo_title", "promo_body", "price", "shorten", "body_order",
         "no_body")


def repost(rng: random.Random, ad: dict[str, Any], edits: list[str]) -> dict[str, Any]:
    """An edited copy of ``ad`` (``title``, ``body``, ``price``, ``user``) with the named ``edits``
    (:data:`EDITS`) applied in order."""
    out = dict(ad)
    words = (out.get("title") or "").split()
    body = out.get("body") or ""
    for e in edits:
        if e == "typo" and words:
            for _ in range(rng.randint(1, 2)):
                j = rng.randrange(len(words))
                words[j] = _typo(rng, words[j])
        elif e == "drop_word" and len(words) > 3:
            words.pop(rng.randrange(len(words)))
        elif e == "swap_words" and len(words) > 2:
            j = rng.randrange(len(words) - 1)
            words[j], words[j + 1] = words[j + 1], words[j]
        elif e == "promo_title":
            words += ["-", rng.choice(PROMOS)]
        elif e == "promo_body":
            body = f"{body} {rng.choice(PROMOS)}".strip()
        elif e == "price" and isinstance(out.get("price"), float):
            out["price"] = round(out["price"] * (1 + rng.uniform(-0.05, 0.05)), 2)
        elif e == "shorten" and len(words) > 4:
            words = words[: max(3, len(words) - len(words) // 3)]
        elif e == "body_order":
            parts = _sentences(body)
            rng.shuffle(parts)
            if len(parts) > 2 and rng.random() < 0.5:
                parts.pop(rng.randrange(len(parts)))
            body = " ".join(parts)
        elif e == "no_body":
            body = ""
    out["title"] = " ".join(words)
    out["body"] = body or None
    return out


def build_reposts(data_dir: Path, *, seed: int = 17) -> tuple[list[dict[str, Any]], set[tuple[str, str]]]:
    """The repost set (see the module docstring).

    Args:
        data_dir: the shared data directory (holding ``abt-buy/Abt.csv``).
        seed: the random seed (same seed, same set).
    Returns:
        ``(records, pairs)``: records as dicts with ``id``, ``user``, ``title``, ``body``, ``price``
        in creation order; true pairs ``(original id, repost id)``.
    Raises:
        FileNotFoundError: ``abt-buy/Abt.csv`` is not in ``data_dir``.
    """
    rng = random.Random(seed)
    path = abt_buy_files(data_dir)[0]
    if not path.is_file():
        raise FileNotFoundError(path)
    listings = read_records_csv(path, mapping={"title": "name", "body": "description", "price": "price"},
                                encoding="cp1252")
    by_brand: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in listings:
        title = (r.fields.get("title") or "").strip()
        if title:
            by_brand[title.split()[0].casefold()].append({"title": title, "body": r.fields.get("body"),
                                                          "price": parse_price(r.fields.get("price"))})
    originals: list[dict[str, Any]] = []
    seller = 0
    for brand in sorted(by_brand):
        items = sorted(by_brand[brand], key=lambda a: a["title"].casefold())
        i = 0
        while i < len(items):
            n = rng.randint(3, 8)
            seller += 1
            for ad in items[i : i + n]:
                originals.append({**ad, "user": f"seller{seller:04d}"})
            i += n
    reposts, pairs = with_reposts(rng, originals, lambda ad: repost(rng, ad, rng.sample(EDITS, rng.randint(1, 3))))
    return originals + reposts, pairs


def write_reposts(out_dir: Path, *, seed: int = 17, data_dir: Path | None = None) -> tuple[Path, Path]:
    """Write ``records.csv`` and ``pairs.csv`` of :func:`build_reposts` to ``out_dir`` (created).

    Returns:
        The two paths. Raises FileNotFoundError when the data directory is not found.
    """
    data = data_dir or default_data_dir()
    if data is None:
        raise FileNotFoundError("shared/data (set NEARSYNC_DATA)")
    records, pairs = build_reposts(data, seed=seed)
    return write_labelled_set(out_dir, ("id", "user", "title", "body", "price"), records, pairs)


def main(argv: list[str] | None = None) -> int:
    """``python -m daemon.evaluation.reposts OUT_DIR [--seed N]``; prints the two paths."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=17)
    args = p.parse_args(argv)
    for path in write_reposts(args.out, seed=args.seed):
        print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
