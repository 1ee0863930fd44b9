"""The scorer on real data: Abt-Buy product matching (Köpcke, Thor & Rahm 2010 benchmark).

Harness: every Abt record is compared with Buy candidates from simple blocking (the 10 Buy
records sharing the rarest title tokens, by summed IDF, plus every Buy record sharing a model
number); a pair is predicted when ``decide`` flags it (duplicate or potential duplicate). No label
is used to set weights or thresholds (the defaults of ``ScoringConfig.from_mapping({})``). The
figures are printed (``pytest -s``); the assertion is a floor below what it reaches.
"""

from __future__ import annotations

import csv
import math
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from daemon.evaluation.measures import pair_prf
from daemon.scoring import ScoringConfig, decide, score_matrix
from daemon.signatures import SignatureParams, compute_signature

DATA = Path("/work/shared/data/abt-buy")
pytestmark = pytest.mark.skipif(not (DATA / "Abt.csv").exists(), reason="abt-buy data set absent")


def _read(name: str) -> list[dict[str, str]]:
    with open(DATA / name, encoding="cp1252", newline="") as f:
        return list(csv.DictReader(f))


def _price(s: str | None) -> float | None:
    s = (s or "").replace("$", "").replace(",", "").strip()
    try:
        return float(s)
    except ValueError:
        return None


def _signer():
    params = SignatureParams()
    return (lambda f: compute_signature(f, params).to_document()), "daemon.signatures"


@pytest.fixture(scope="module")
def abt_buy():
    sign, how = _signer()
    recs: dict[str, tuple[dict, dict]] = {}
    for r in _read("Abt.csv"):
        f = {"title": r["name"], "body": r["description"] or None, "price": _price(r["price"])}
        recs["a" + r["id"]] = (f, sign(f))
    for r in _read("Buy.csv"):
        f = {"title": r["name"], "body": r["description"] or None, "price": _price(r["price"])}
        recs["b" + r["id"]] = (f, sign(f))
    true = {frozenset(("a" + g["idAbt"], "b" + g["idBuy"])) for g in _read("abt_buy_perfectMapping.csv")}
    return recs, true, how


def block(recs: dict[str, tuple[dict, dict]], per_record: int = 10) -> list[tuple[str, str]]:
    """Candidate (abt, buy) pairs: top ``per_record`` Buy records by summed IDF of shared title
    tokens (tokens in >= 200 Buy titles ignored), plus all Buy records sharing a model number."""
    tok_index: dict[str, set[str]] = defaultdict(set)
    model_index: dict[str, set[str]] = defaultdict(set)
    buys = [k for k in recs if k[0] == "b"]
    for k in buys:
        f, s = recs[k]
        for t in set(re.findall(r"[a-z0-9]+", f["title"].lower())):
            tok_index[t].add(k)
        for m in s["models"]:
            model_index[m].add(k)
    n = len(buys)
    pairs = set()
    for k in (k for k in recs if k[0] == "a"):
        f, s = recs[k]
        acc: Counter[str] = Counter()
        for t in sorted(set(re.findall(r"[a-z0-9]+", f["title"].lower()))):
            post = tok_index.get(t, ())
            if 0 < len(post) < 200:
                for b in post:
                    acc[b] += math.log(n / len(post))
        ranked = sorted(acc.items(), key=lambda kv: (-kv[1], kv[0]))  # ties by id: deterministic
        pairs.update((k, b) for b, _ in ranked[:per_record])
        pairs.update((k, b) for m in s["models"] for b in model_index.get(m, ()))
    return sorted(pairs)


@pytest.fixture(scope="module")
def scored(abt_buy):
    recs, true, _ = abt_buy
    cfg = ScoringConfig.from_mapping({})
    cands = block(recs)
    scores = score_matrix(recs, cands, cfg)
    flagged = {p: s for p, s in scores.items() if decide(s.score, cfg) is not None}
    return cfg, cands, flagged


def test_scorer_on_abt_buy(abt_buy, scored) -> None:
    recs, true, how = abt_buy
    cfg, cands, flagged = scored
    blocking = pair_prf(cands, true)
    result = pair_prf(flagged, true)
    dup_only = pair_prf([p for p, s in flagged.items() if decide(s.score, cfg) == "duplicate"], true)
    # one-to-one reading (each shop lists a product once): keep mutual best flagged pairs
    best_a: dict[str, tuple[str, float]] = {}
    best_b: dict[str, tuple[str, float]] = {}
    for (a, b), s in flagged.items():
        if a not in best_a or s.score > best_a[a][1]:
            best_a[a] = (b, s.score)
        if b not in best_b or s.score > best_b[b][1]:
            best_b[b] = (a, s.score)
    mutual = pair_prf([(a, b) for a, (b, _) in best_a.items() if best_b[b][0] == a], true)
    print(f"\nabt-buy [{how}] {len(cands)} candidates, blocking recall {blocking.recall:.3f}")
    print(f"  duplicate ∪ potential (score >= {cfg.potential_threshold}): {result}")
    print(f"  duplicate only (score >= {cfg.duplicate_threshold}): {dup_only}")
    print(f"  mutual-best 1:1 of the flagged pairs: {mutual}")
    assert blocking.recall >= 0.9
    assert result.f1 >= 0.70
    assert mutual.f1 >= 0.80


def test_baselines_on_abt_buy(abt_buy, scored) -> None:
    from daemon.evaluation.baselines import levenshtein_title_pairs, simhash_pairs, tune_minhash_lsh

    recs, true, _ = abt_buy
    records = [(k, f["title"], f["body"]) for k, (f, _) in recs.items()]

    def cross(p: frozenset) -> bool:  # only Abt-Buy pairs can be true in this record-linkage set
        return len({x[0] for x in p}) == 2

    best, lsh, _ = tune_minhash_lsh(records, true, keep=cross)
    sim = pair_prf({p for p in simhash_pairs(records, 3) if cross(p)}, true)
    lev = pair_prf({p for p in levenshtein_title_pairs(records, 0.8) if cross(p)}, true)
    print(f"\n  MinHash LSH best (threshold {best}, tuned on the labels): {lsh}")
    print(f"  simhash Hamming <= 3: {sim}")
    print(f"  title Levenshtein ratio >= 0.8: {lev}")
    ours = pair_prf(scored[2], true)
    print(f"  nearsync scorer (untuned defaults): {ours}")
    assert ours.f1 > max(lsh.f1, sim.f1, lev.f1)
