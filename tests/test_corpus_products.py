"""The bench's product corpus (bench/corpus_products.py): seeded, hard negatives apart by model number."""

from __future__ import annotations

import random
from collections import defaultdict

from bench.corpus_products import MODEL_RE, build_corpus, variant_model
from tests.data_paths import DATA_DIR, require


def _corpus(n: int = 400, seed: int = 18):  # type: ignore[no-untyped-def]
    require("abt-buy", "Abt.csv")
    return build_corpus(n, seed=seed, data_dir=DATA_DIR)


def test_same_seed_same_corpus_another_seed_another() -> None:
    a, b, c = _corpus(), _corpus(), _corpus(seed=19)
    assert [(x.fields, x.product) for x in a] == [(x.fields, x.product) for x in b]
    assert [x.fields for x in a] != [x.fields for x in c]
    assert len(a) == 400


def test_a_product_is_listed_once_per_shop() -> None:
    shops = defaultdict(list)
    for x in _corpus():
        shops[x.product].append(x.fields["source"])
    assert all(len(s) == len(set(s)) for s in shops.values())
    assert sum(len(s) > 1 for s in shops.values()) > len(shops) // 2  # most products have duplicates


def test_hard_negatives_differ_in_model_number() -> None:
    models = defaultdict(set)  # product -> the model numbers in its listings' titles
    family_of = {}
    for x in _corpus(1500):
        models[x.product] |= {m.group(0) for m in MODEL_RE.finditer(x.fields["title"])}
        family_of[x.product] = x.family
    by_family = defaultdict(list)
    for product, family in family_of.items():
        by_family[family].append(product)
    siblings = 0
    for products in by_family.values():
        for i, p in enumerate(products):
            for q in products[i + 1:]:
                siblings += 1
                assert not models[p] & models[q], (p, q, models[p], models[q])
    assert siblings > 100


def test_variant_model_changes_one_character() -> None:
    rng = random.Random(3)
    for model in ("KDL40V", "PSLX350H", "AM53BK", "ABCD"):
        for _ in range(50):
            new = variant_model(rng, model)
            assert new != model and len(new) == len(model)
            assert sum(a != b for a, b in zip(new, model)) == 1
