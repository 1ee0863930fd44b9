"""Throughput of the signature core (one process = one core) on real ads, 100- and 1,000-word texts,
side by side with datasketch's MinHash.bulk and the ``simhash`` package on the same inputs.

The batch column signs the same records with ``compute_signatures`` (the path of
``DocumentBuilder.build_many``), :data:`BATCH` records a call; its ratio is batch ÷ record by record.

Run: ``python bench/bench_signatures.py [--repeat 3] [--profile]`` from the repository root. Data is read
from ``../shared/data/abt-buy`` (Abt.csv and Buy.csv, cp1252). Prints records/s; nothing is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import os
import platform
import pstats
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from daemon.signatures import (  # noqa: E402
    SignatureParams,
    TextSketch,
    compute_signature,
    compute_signatures,
    minhash,
    normalise_text,
    s_curve_table,
    shingle_hashes,
    simhash,
    text_sketch,
    tokens,
    word_ngrams,
)

DATA = REPO.parent / "shared" / "data" / "abt-buy"
PARAMS = SignatureParams()
BATCH = 250
"""Records per compute_signatures call in the batch column (a signature-pool part is 1,000-2,500 rows)."""


def load_ads() -> list[dict[str, str]]:
    """Abt and Buy rows as ``{"title", "body"}`` ads (name, description)."""
    rows: list[dict[str, str]] = []
    for name in ("Abt.csv", "Buy.csv"):
        with open(DATA / name, encoding="cp1252", errors="replace", newline="") as f:
            rows += [{"title": r["name"] or "", "body": r["description"] or ""} for r in csv.DictReader(f)]
    return rows


def texts_of(n_words: int, ads: Sequence[dict[str, str]], count: int) -> list[dict[str, str]]:
    """Records whose body has exactly ``n_words`` words from consecutive real descriptions."""
    out: list[dict[str, str]] = []
    words: list[str] = []
    while len(out) < count:
        for ad in ads:
            words.extend(ad["body"].split())
            if len(words) >= n_words:
                body = " ".join(words[:n_words])
                out.append({"title": " ".join(words[:8]), "body": body})
                words = []
                if len(out) >= count:
                    break
    return out


def rate(fn: Callable[[Any], Any], items: Sequence[Any], repeat: int) -> float:
    """Best items per CPU-second of this process over ``repeat`` passes, after one warm-up pass that fills
    caches. CPU time (``time.process_time``) rather than wall time, so that other work on the machine
    does not count against us; one process is one core."""
    for item in items:
        fn(item)
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for item in items:
            fn(item)
        best = min(best, time.process_time() - start)
    return len(items) / best


def core_path(record: dict[str, str]) -> TextSketch:
    """Only simhash + 128-permutation MinHash + LSH bands (normalisation and tokens included)."""
    toks = tokens(normalise_text(record["title"])) + tokens(normalise_text(record["body"][: PARAMS.max_body_chars]))
    return text_sketch(toks, PARAMS)


def compare_minhash(corpus: list[dict[str, str]], repeat: int) -> tuple[float, float]:
    """(ours, datasketch) shingle sets/s for 128-perm MinHash of the same word 3-gram strings."""
    from datasketch import MinHash

    shingles = [word_ngrams(tokens(r["title"] + " " + r["body"]), 3) for r in corpus]
    encoded = [[s.encode("utf-8") for s in sh] for sh in shingles]
    ours = rate(lambda sh: minhash(shingle_hashes(sh, 0), 128, 1), shingles, repeat)
    batch = 64
    chunks = [encoded[i : i + batch] for i in range(0, len(encoded), batch)]
    theirs = rate(lambda chunk: MinHash.bulk(chunk, num_perm=128), chunks, repeat) * batch
    return ours, theirs


def compare_simhash(corpus: list[dict[str, str]], repeat: int) -> tuple[float, float]:
    """(ours, simhash package) token lists/s for a 64-bit TF-weighted simhash of the same tokens."""
    from simhash import Simhash

    toks = [tokens(r["title"] + " " + r["body"]) for r in corpus]
    ours = rate(lambda t: simhash(t, 0), toks, repeat)
    theirs = rate(lambda t: Simhash(t).value, toks, repeat)
    return ours, theirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed passes per measurement (best is kept)")
    parser.add_argument("--profile", action="store_true", help="print the cProfile top 15 on 100-word texts, record by record and in batches")
    args = parser.parse_args(argv)
    if not DATA.exists():
        print(f"shared data absent: {DATA}", file=sys.stderr)
        return 2
    ads = load_ads()
    corpora = {
        f"Abt-Buy ads ({len(ads)}, title + description)": ads,
        "100-word texts (600)": texts_of(100, ads, 600),
        "1,000-word texts (100)": texts_of(1000, ads, 100),
    }
    words = {name: sum(len(r["body"].split()) + len(r["title"].split()) for r in c) / len(c) for name, c in corpora.items()}
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; one process, CPU time (per core figures)")
    print(f"params {PARAMS.fingerprint()}: num_perm {PARAMS.num_perm}, bands x rows {PARAMS.bands_rows}, "
          f"shingle n {PARAMS.shingle_n}, bottom-k {PARAMS.bottomk_k}, simhash {PARAMS.simhash_blocks} blocks k={PARAMS.simhash_max_distance}")
    print()
    print(f"{'corpus':44} {'words':>6} {'full sig/s':>11} {'batch sig/s':>12} {'ratio':>6} {'simhash+MinHash+bands/s':>24}")
    for name, corpus in corpora.items():
        full = rate(lambda r: compute_signature(r, PARAMS), corpus, args.repeat)
        batches = [corpus[i : i + BATCH] for i in range(0, len(corpus), BATCH)]
        batch = rate(lambda b: compute_signatures(b, PARAMS), batches, args.repeat) * len(corpus) / len(batches)
        core = rate(core_path, corpus, args.repeat)
        print(f"{name:44} {words[name]:6.0f} {full:11,.0f} {batch:12,.0f} {batch / full:5.2f}x {core:24,.0f}")
    print()
    print(f"{'side by side (same inputs)':44} {'nearsync/s':>11} {'other/s':>11} {'ratio':>7}")
    for name, corpus in corpora.items():
        ours, theirs = compare_minhash(corpus, args.repeat)
        print(f"{'MinHash-128 vs datasketch bulk: ' + name.split(' (')[0]:44} {ours:11,.0f} {theirs:11,.0f} {ours / theirs:6.1f}x")
        ours, theirs = compare_simhash(corpus, args.repeat)
        print(f"{'simhash-64 vs simhash.Simhash: ' + name.split(' (')[0]:44} {ours:11,.0f} {theirs:11,.0f} {ours / theirs:6.1f}x")
    print()
    print(s_curve_table(*PARAMS.bands_rows))
    if args.profile:
        corpus = corpora["100-word texts (600)"]
        for label, run in (("record by record", lambda: [compute_signature(r, PARAMS) for r in corpus]),
                           (f"in batches of {BATCH}", lambda: [compute_signatures(corpus[i : i + BATCH], PARAMS)
                                                                for i in range(0, len(corpus), BATCH)])):
            print(f"\ncProfile, 100-word texts, {label}:")
            prof = cProfile.Profile()
            prof.enable()
            run()
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
