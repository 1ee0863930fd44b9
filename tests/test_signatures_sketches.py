"""Statistical properties of the sketches on real Abt-Buy descriptions and on synthetic sets.

Distributions are printed (``pytest -s``); assertions are the known properties of each sketch.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from daemon.signatures import (
    SignatureParams,
    band_keys,
    bottomk_jaccard,
    bottomk_similar,
    bottomk_sketch,
    compute_signature,
    hamming,
    hash_tokens,
    jaccard_from_minhash,
    lsh_params,
    minhash,
    ngram_hashes,
    s_curve,
    s_curve_table,
    shingle_hashes,
    tokens,
    word_ngrams,
)
from daemon.signatures.simhash import block_keys

from data_paths import texts_of_words

PARAMS = SignatureParams()


def _distribution(values: list[int]) -> str:
    counts = Counter(values)
    return " ".join(f"{d}:{counts[d]}" for d in range(min(values), max(values) + 1))


@pytest.fixture(scope="module")
def texts100() -> list[str]:
    texts = texts_of_words(100, 400)
    assert len(texts) >= 300
    return texts


def _one_word_edit(text: str, rng: random.Random, vocab: list[str]) -> str:
    words = text.split()
    i = rng.randrange(len(words))
    kind = rng.choice(("replace", "delete", "insert"))
    if kind == "replace":
        words[i] = rng.choice(vocab)
    elif kind == "delete":
        del words[i]
    else:
        words.insert(i, rng.choice(vocab))
    return " ".join(words)


def test_identical_text_identical_simhash_and_minhash(texts100: list[str]) -> None:
    for t in texts100[:50]:
        a = compute_signature({"title": t[:40], "body": t})
        b = compute_signature({"title": t[:40], "body": t})
        assert a.simhash == b.simhash
        assert a.minhash == b.minhash
        assert a == b


def test_simhash_one_word_edits_vs_unrelated(texts100: list[str]) -> None:
    rng = random.Random(20240601)
    vocab = [w for t in texts100 for w in t.split()]
    sims = [compute_signature({"body": t}, PARAMS).simhash for t in texts100]
    edits = [hamming(s, compute_signature({"body": _one_word_edit(t, rng, vocab)}, PARAMS).simhash) for t, s in zip(texts100, sims)]
    unrelated = []
    for _ in range(2000):
        i, j = rng.sample(range(len(texts100)), 2)
        if abs(i - j) >= 5:  # neighbouring rows are often the same brand / product line
            unrelated.append(hamming(sims[i], sims[j]))
    p95_edit = float(np.percentile(edits, 95))
    p5_unrelated = float(np.percentile(unrelated, 5))
    print(f"\none-word edits of {len(edits)} ~100-word texts: mean {np.mean(edits):.2f} bits, p95 {p95_edit}, "
          f"distribution {_distribution(edits)}")
    print(f"unrelated pairs ({len(unrelated)}): mean {np.mean(unrelated):.2f} bits, p5 {p5_unrelated}, "
          f"median {np.median(unrelated)}, distribution {_distribution(unrelated)}")
    assert np.mean(edits) <= 3.0
    assert p95_edit < p5_unrelated
    assert 28.0 <= np.mean(unrelated) <= 36.0


def test_block_keys_guarantee_shared_key_within_k() -> None:
    rng = random.Random(3)
    for blocks, k in ((4, 3), (6, 3), (5, 2)):
        for _ in range(300):
            a = rng.getrandbits(64)
            b = a
            for bit in rng.sample(range(64), rng.randint(0, k)):
                b ^= 1 << bit
            assert set(block_keys(a, blocks, k)) & set(block_keys(b, blocks, k))
    assert len(block_keys(0, 6, 3)) == 20
    assert len(block_keys(0, 4, 3)) == 4


def _shingle_set(text: str) -> np.ndarray:
    """The shingle set compute_signature uses (n-gram hashes chained from token hashes)."""
    return ngram_hashes(hash_tokens(tokens(text), PARAMS.seed), PARAMS.shingle_n)


@pytest.fixture(scope="module")
def real_pairs(texts100: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """1,000 pairs of shingle sets from real texts spanning the whole Jaccard range: a text against
    itself with 0–60 words replaced, and unrelated texts."""
    rng = random.Random(11)
    vocab = [w for t in texts100 for w in t.split()]
    pairs = []
    for n in range(1000):
        t = texts100[n % len(texts100)]
        if n % 5 == 4:
            other = texts100[(n * 7 + 13) % len(texts100)]
        else:
            words = t.split()
            for i in rng.sample(range(len(words)), rng.randint(0, 60)):
                words[i] = rng.choice(vocab)
            other = " ".join(words)
        pairs.append((_shingle_set(t), _shingle_set(other)))
    return pairs


def _exact_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


def test_minhash_and_bottomk_estimates_on_real_pairs(real_pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
    exact, mh_err, bk_err = [], [], []
    for a, b in real_pairs:
        j = _exact_jaccard(a, b)
        exact.append(j)
        mh_err.append(abs(jaccard_from_minhash(minhash(a, 128), minhash(b, 128)) - j))
        bk_err.append(abs(bottomk_jaccard(bottomk_sketch(a, 64), bottomk_sketch(b, 64), 64) - j))
    mh_ok = np.mean(np.array(mh_err) <= 0.1)
    bk_ok = np.mean(np.array(bk_err) <= 0.1)
    hist = np.histogram(exact, bins=[0, 0.2, 0.4, 0.6, 0.8, 1.0001])[0]
    print(f"\nexact Jaccard of the 1,000 pairs by fifths: {hist.tolist()}")
    print(f"MinHash-128: {mh_ok:.1%} within ±0.1, mean |err| {np.mean(mh_err):.4f}, max {np.max(mh_err):.3f}")
    print(f"bottom-64:   {bk_ok:.1%} within ±0.1, mean |err| {np.mean(bk_err):.4f}, max {np.max(bk_err):.3f}")
    assert min(hist) >= 50  # the pairs do span the range
    assert mh_ok >= 0.95
    assert bk_ok >= 0.95


def test_bottomk_similar_agrees_with_full_estimate(real_pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
    checked = 0
    for a, b in real_pairs:
        sa, sb = bottomk_sketch(a, 64), bottomk_sketch(b, 64)
        estimate = bottomk_jaccard(sa, sb, 64)
        for threshold in (0.0, 0.3, 0.5, 0.7, 0.9, 1.0, estimate):
            assert bottomk_similar(sa, sb, threshold, 64) == (estimate >= threshold)
            checked += 1
    assert checked == 7000


def test_bottomk_exact_for_small_sets_and_edge_cases() -> None:
    a = bottomk_sketch(np.arange(10, dtype=np.uint64) * np.uint64(2), 64)
    b = bottomk_sketch(np.arange(5, 15, dtype=np.uint64) * np.uint64(2), 64)
    assert bottomk_jaccard(a, b) == pytest.approx(5 / 15)
    assert bottomk_jaccard(a, a) == 1.0 and bottomk_similar(a, a, 1.0)
    assert bottomk_jaccard([], a) == 0.0 and not bottomk_similar([], a, 0.0)
    assert all(x < y for x, y in zip(a, a[1:]))
    with pytest.raises(ValueError):
        bottomk_similar(a, b, 1.5)


def _pair_with_jaccard(rng: np.random.Generator, s: float, union: int = 200) -> tuple[np.ndarray, np.ndarray]:
    elems = rng.integers(0, 2**63, size=union, dtype=np.uint64)
    inter = round(s * union)
    rest = union - inter
    a = np.concatenate([elems[:inter], elems[inter : inter + rest // 2]])
    b = np.concatenate([elems[:inter], elems[inter + rest // 2 :]])
    return a, b


def test_lsh_candidate_probability_follows_s_curve() -> None:
    bands, rows = lsh_params(0.5, 128)
    rng = np.random.default_rng(5)
    trials = 400
    print("\n" + s_curve_table(bands, rows))
    for s in (0.2, 0.4, 0.5, 0.6, 0.8):
        hits = 0
        for t in range(trials):
            a, b = _pair_with_jaccard(rng, s)
            ka = set(band_keys(minhash(a, 128, seed=t), bands, rows))
            kb = set(band_keys(minhash(b, 128, seed=t), bands, rows))
            hits += bool(ka & kb)
        expected = float(s_curve(s, bands, rows))
        observed = hits / trials
        sigma = (expected * (1 - expected) / trials) ** 0.5
        print(f"  s={s:.1f}: observed {observed:.3f}, S-curve {expected:.3f} (σ {sigma:.3f})")
        assert abs(observed - expected) <= 4 * sigma + 0.01


def test_lsh_params_match_datasketch() -> None:
    datasketch_lsh = pytest.importorskip("datasketch.lsh")
    for threshold in (0.5, 0.7, 0.8, 0.9):
        assert lsh_params(threshold, 128) == datasketch_lsh._optimal_param(threshold, 128, 0.5, 0.5)
    table = s_curve_table(*lsh_params(0.5, 128))
    assert "0.50" in table and "0.90" in table and "bands" in table


def test_minhash_values_fit_int64_and_empty_set() -> None:
    rng = np.random.default_rng(1)
    sig = minhash(rng.integers(0, 2**64 - 1, size=500, dtype=np.uint64, endpoint=True), 256)
    assert sig.dtype == np.int64 and sig.shape == (256,)
    assert (sig >= 0).all() and (sig < 2**61 - 1).all()
    empty = minhash(np.empty(0, dtype=np.uint64), 128)
    assert (empty == 2**61 - 1).all()
    assert jaccard_from_minhash(empty, empty) == 0.0
    with pytest.raises(ValueError):
        jaccard_from_minhash(sig[:128], sig)


def test_minhash_matches_reference_arithmetic() -> None:
    """The vectorised form equals ``min((a*fmix64(x) + b) mod 2**64) >> 4`` computed with Python
    integers (MurmurHash3's finaliser written out), across chunk boundaries and for extreme inputs."""
    from daemon.signatures.minhash import CHUNK, MERSENNE_61, permutations

    def fmix(k: int) -> int:
        m = (1 << 64) - 1
        k ^= k >> 33
        k = (k * 0xFF51AFD7ED558CCD) & m
        k ^= k >> 33
        k = (k * 0xC4CEB9FE1A85EC53) & m
        return k ^ (k >> 33)

    rng = np.random.default_rng(2)
    x = rng.integers(0, 2**64 - 1, size=CHUNK * 2 + 7, dtype=np.uint64, endpoint=True)
    x[:4] = [0, 2**64 - 1, MERSENNE_61, 2**63]
    before = x.copy()
    sig = minhash(x, 16, seed=9)
    assert np.array_equal(x, before)  # the input is not modified
    a, b = permutations(16, 9)
    assert all(int(v) % 2 == 1 for v in a)
    for i in range(16):
        ref = min(((int(a[i]) * fmix(int(v)) + int(b[i])) % 2**64) >> 4 for v in x)
        assert int(sig[i]) == ref


def test_minhash_estimates_on_structured_inputs() -> None:
    """Consecutive integers (no hashing upstream) still give unbiased estimates: the finaliser mixes
    them before the multiply-add permutations."""
    errors = []
    for s in (0.2, 0.5, 0.8):
        for t in range(40):
            inter = int(300 * s)
            a = np.arange(0, 300, dtype=np.uint64) + np.uint64(t * 1000)
            b = np.arange(300 - inter, 600 - inter, dtype=np.uint64) + np.uint64(t * 1000)
            exact = inter / (600 - inter)
            errors.append(jaccard_from_minhash(minhash(a, 128, seed=t), minhash(b, 128, seed=t)) - exact)
    err = np.asarray(errors)
    assert abs(err.mean()) < 0.02, err.mean()
    assert np.mean(np.abs(err) <= 0.1) >= 0.95


def test_ngram_hashes_properties() -> None:
    h = hash_tokens(["a", "b", "c", "d"])
    grams = ngram_hashes(h, 3)
    assert grams.size == 2
    assert not np.array_equal(ngram_hashes(hash_tokens(["c", "b", "a"]), 3), ngram_hashes(hash_tokens(["a", "b", "c"]), 3))
    assert ngram_hashes(hash_tokens(["a", "b"]), 3).size == 1  # shorter than n: one gram
    assert ngram_hashes(hash_tokens([]), 3).size == 0
    assert np.array_equal(ngram_hashes(h, 1), np.unique(h))
    assert set(ngram_hashes(hash_tokens(["x", "a", "b", "c"]), 3).tolist()) & set(ngram_hashes(h, 3).tolist())
    assert word_ngrams(["a", "b", "c", "d"], 3) == ["a b c", "b c d"]
    assert shingle_hashes(["a b c", "a b c"]).size == 1


def test_hash_shortcuts_equal_hash64() -> None:
    """``hash64_hex`` is ``format(hash64(...), "016x")`` and ``token_hash`` is ``hash64`` (memo hit or
    not), for any text and seed: the super tokens and title samples made with them do not change."""
    from daemon.signatures._hashing import hash64, hash64_hex, hash_tokens, token_hash

    texts = ["", "a", "kdl40v4100", "t\x1f0\x1fbike\x1fu09tun", "\ud800 lone", "é" * 300, "0" * 5]
    for seed in (0, 1, 7, 2**64 - 1):
        for t in texts:
            assert hash64_hex(t, seed) == format(hash64(t, seed), "016x")
            assert token_hash(t, seed) == hash64(t, seed)
        hash_tokens(texts, seed)  # now memoised
        assert [token_hash(t, seed) for t in texts] == [hash64(t, seed) for t in texts]
