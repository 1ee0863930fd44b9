"""A seeded generator of realistic classified ads with known near-duplicates.

Used by the demo when the shipped data is absent, and by benchmarks that need 100,000+ records.
Base ads come from the real Abt-Buy listings when a data directory is given, else from built-in
templates. Duplicates are reposts with controlled edits: typos, reordered sentences, a changed
price (±``price_jitter``), a few words added or dropped.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

BRANDS = ("Sony", "Samsung", "LG", "Panasonic", "Philips", "Canon", "Nikon", "Bosch", "Apple", "Dell", "Lenovo", "Bose")
PRODUCTS = (("LCD television", "tv"), ("digital camera", "camera"), ("laptop", "computer"), ("washing machine", "appliance"),
            ("soundbar", "audio"), ("smartphone", "phone"), ("dishwasher", "appliance"), ("headphones", "audio"),
            ("refrigerator", "appliance"), ("tablet", "computer"), ("camcorder", "camera"), ("turntable", "audio"))
PHRASES = ("Barely used, in perfect condition.", "Original box and all accessories included.",
           "Pick up only, cash on collection.", "Selling because I am moving abroad.", "Still under warranty until next year.",
           "Small scratch on the side, works perfectly.", "Remote control and manual included.", "Non-smoking home, no pets.",
           "Price is slightly negotiable.", "Can deliver within the city for a small fee.", "Bought last year, receipt available.",
           "Energy class A, very quiet.", "Full HD picture, excellent sound.", "Battery holds charge very well.")


@dataclass
class GeneratedAd:
    """One generated ad; ``duplicate_of`` is the index of the ad it reposts (or None)."""

    fields: dict[str, Any]
    duplicate_of: int | None = None


def _typo(rng: random.Random, word: str) -> str:
    if len(word) < 4:
        return word
    i = rng.randrange(1, len(word) - 1)
    return word[:i] + word[i + 1] + word[i] + word[i + 2:]


def edit_ad(rng: random.Random, fields: dict[str, Any], *, price_jitter: float = 0.05) -> dict[str, Any]:
    """A lightly edited repost of ``fields``: a typo or two, sentences reordered, price ±jitter."""
    out = dict(fields)
    title = out.get("title") or ""
    words = title.split()
    if words:
        j = rng.randrange(len(words))
        words[j] = _typo(rng, words[j])
    out["title"] = " ".join(words)
    body = out.get("body") or ""
    sentences = [s.strip() for s in body.replace("/", ".").split(".") if s.strip()]
    rng.shuffle(sentences)
    if sentences and rng.random() < 0.5:
        k = rng.randrange(len(sentences))
        sentences[k] = " ".join(_typo(rng, w) for w in sentences[k].split())
    out["body"] = ". ".join(sentences) + ("." if sentences else "")
    if isinstance(out.get("price"), (int, float)):
        out["price"] = round(out["price"] * (1 + rng.uniform(-price_jitter, price_jitter)), 2)
    return out


def template_ad(rng: random.Random, i: int) -> dict[str, Any]:
    """A fresh ad from the built-in templates (no data set needed)."""
    brand = rng.choice(BRANDS)
    product, category = rng.choice(PRODUCTS)
    model = f"{brand[:2].upper()}-{rng.randint(10, 99)}{rng.choice('ABCDEFGHKMX')}{rng.randint(100, 9999)}"
    body = " ".join(rng.sample(PHRASES, k=rng.randint(3, 6)))
    return {"title": f"{brand} {product} {model}", "body": f"{brand} {product} model {model}. {body}",
            "price": float(rng.randint(20, 2500)), "category": category, "user": f"user{rng.randint(1, max(2, i // 20 + 2))}",
            "lat": 48.80 + rng.random() * 0.15, "lon": 2.25 + rng.random() * 0.2}


def generate_ads(n: int, *, seed: int = 7, dup_rate: float = 0.2, base: Sequence[dict[str, Any]] | None = None,
                 price_jitter: float = 0.05) -> Iterator[GeneratedAd]:
    """Yield ``n`` ads, about ``dup_rate`` of them edited reposts of an earlier ad (same user).

    Args:
        seed: the random seed (same seed, same ads).
        base: real listings (``fields`` dicts) to start from; built-in templates when None.
    """
    rng = random.Random(seed)
    made: list[dict[str, Any]] = []
    for i in range(n):
        if made and rng.random() < dup_rate:
            j = rng.randrange(len(made))
            ad = edit_ad(rng, made[j], price_jitter=price_jitter)
            made.append(ad)
            yield GeneratedAd(ad, j)
            continue
        if base:
            src = dict(base[rng.randrange(len(base))])
            ad = {"title": src.get("title"), "body": src.get("body"), "price": src.get("price"),
                  "category": src.get("category"), "user": f"user{rng.randint(1, max(2, n // 20))}",
                  "lat": 48.80 + rng.random() * 0.15, "lon": 2.25 + rng.random() * 0.2}
        else:
            ad = template_ad(rng, i)
        made.append(ad)
        yield GeneratedAd(ad, None)
