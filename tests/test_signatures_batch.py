"""The batch signing path (compute_signatures, DocumentBuilder.build_many) gives the per-record
signatures bit for bit, on real data, and keeps a bad record's error to that record."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from daemon.backends.base import IndexDocument
from daemon.capture.documents import DocumentBuilder
from daemon.capture.source import SourceTable
from daemon.config import SourceSettings
from daemon.errors import RecordError
from daemon.signatures import SignatureParams, compute_signature, compute_signatures
from daemon.signatures._ragged import offsets_of, segment_unique
from daemon.signatures.batch import MIN_BATCH
from daemon.signatures.minhash import BATCH_ROWS, minhash, minhash_many
from daemon.signatures.shingles import ngram_hashes, ngram_hashes_many

from data_paths import abt_buy_records, news_records, texts_of_words

EDGE = [{}, {"title": None, "body": None}, {"title": "a"}, {"title": "x y"}, {"title": "the of"},
        {"title": "tv", "body": "!! ??"}, {"title": "KDL-40V4100 ok"}, {"title": "😀"}, {"body": "one two three"}]
"""Empty, stop-word-only, one- and two-token, emoji-only and body-only records."""


def _with_places(records: list[dict], seed: int = 3) -> list[dict]:
    """The records, half of them with a location (so geohash and title+geo super tokens are exercised)."""
    rng = random.Random(seed)
    return [dict(r, lat=48.8 + rng.random() * 0.2, lon=2.2 + rng.random() * 0.3) if rng.random() < 0.5 else r
            for r in records]


def _assert_same(records: list[dict], params: SignatureParams | None = None, idf: dict | None = None,
                 batch: int = 1000) -> None:
    """compute_signatures in batches of ``batch`` == compute_signature record by record, field by field."""
    expected = [compute_signature(r, params, idf) for r in records]
    got = [s for i in range(0, len(records), batch) for s in compute_signatures(records[i:i + batch], params, idf)]
    assert len(got) == len(expected)
    for i, (e, g) in enumerate(zip(expected, got)):
        assert g.simhash == e.simhash, (i, records[i])
        assert g.minhash == e.minhash, (i, records[i])
        assert g.bottomk == e.bottomk, (i, records[i])
        assert g.keys() == e.keys(), (i, records[i])
        assert g.to_document() == e.to_document(), (i, records[i])


def test_batch_signatures_equal_per_record_on_abt_buy() -> None:
    records = EDGE + _with_places(abt_buy_records()) + EDGE
    _assert_same(records)
    _assert_same(records[:600], batch=7)  # small batches: block and record boundaries fall elsewhere


def test_batch_signatures_equal_per_record_on_news() -> None:
    records = _with_places(news_records(), seed=5)
    assert len(records) > 6000
    _assert_same(records, batch=2500)


@pytest.mark.parametrize("params", [
    SignatureParams(bottomk_shingles="sentences", simhash_features="shingles"),
    SignatureParams(shingle_n=1, num_perm=64, simhash_blocks=6, simhash_max_distance=3),
    SignatureParams(shingle_n=5, lsh_bands=16, lsh_rows=8, bottomk_k=16, seed=12345),
    SignatureParams(simhash_blocks=1, simhash_max_distance=0, super_rules=(("title",), ("body", "user"))),
    SignatureParams(lsh_keys=False, super_rules=(("model",),), super_title_pairs=8),
], ids=["sentences+shingle-simhash", "unigrams-64perm-6blocks", "n5-explicit-bands-seed", "one-block", "no-band-keys"])
def test_batch_signatures_equal_per_record_for_other_parameters(params: SignatureParams) -> None:
    _assert_same(EDGE + _with_places(abt_buy_records()[:800]) + news_records()[:400], params, batch=300)


def test_products_profile_documents_carry_no_band_keys_but_their_minhash() -> None:
    """The ``products`` profile (``lsh.keys = false``) signs Abt-Buy without a single band key, and
    every other part of each signature (MinHash included, which scoring reads) is what the same
    parameters with band keys give; only the band keys are gone from the candidate keys."""
    from daemon.config import settings_from_mapping

    settings = settings_from_mapping({"dedup": {"profile": "products"}}, env={})
    products = SignatureParams.from_mapping(settings.signatures)
    assert products.lsh_keys is False
    with_bands = replace(products, lsh_keys=True)
    records = abt_buy_records()
    got, ref = compute_signatures(records, products), compute_signatures(records, with_bands)
    assert sum(len(r.bands) for r in ref) > len(records)  # the reference does have band keys
    for g, r in zip(got, ref):
        assert g.bands == ()
        assert g.minhash == r.minhash and g.simhash == r.simhash and g.bottomk == r.bottomk
        assert g.blocks == r.blocks and g.super == r.super
        assert g.keys() == [k for k in r.keys() if k not in set(r.bands)]
        doc = g.to_document()
        assert doc["bands"] == [] and doc["minhash"] == list(r.minhash)
    assert sum(1 for g in got if len(set(g.minhash)) > 1) > 0.9 * len(records)  # real MinHashes


def test_batch_signatures_equal_per_record_with_an_idf_table() -> None:
    idf = {"sony": 3.5, "tv": 0.25, "black": 0.5, "camera": 2.0}
    _assert_same(EDGE + abt_buy_records()[:500], idf=idf, batch=100)


def test_long_texts_and_records_larger_than_a_block() -> None:
    long_texts = [{"title": t[:60], "body": t} for t in texts_of_words(1000, 20)]
    huge = {"title": "huge", "body": " ".join(texts_of_words(1000, 20))}  # ~20,000 words: MinHash alone
    records = long_texts[:5] + [huge] + long_texts[5:] + [huge, EDGE[0], huge]
    _assert_same(records, batch=len(records))
    assert sum(len(r["body"].split()) for r in long_texts) > BATCH_ROWS  # several blocks in one batch


def test_vectorised_parts_equal_their_per_record_functions() -> None:
    rng = np.random.default_rng(7)
    lengths = [0, 1, 2, 3, 4, 0, 50, 1, 300, 2, 0, 5000, 7]
    hashes = rng.integers(0, 2**64, size=sum(lengths), dtype=np.uint64)
    hashes[10:20] = hashes[0]  # repeats inside and across records
    offsets = offsets_of(lengths)
    for n in (1, 2, 3, 4):
        grams, gram_offsets = ngram_hashes_many(hashes, offsets, n)
        for r in range(len(lengths)):
            expected = ngram_hashes(hashes[offsets[r]:offsets[r + 1]], n)
            assert np.array_equal(grams[gram_offsets[r]:gram_offsets[r + 1]], expected), (n, r)
    mins = minhash_many(hashes, offsets, 128, 1)
    for r in range(len(lengths)):
        assert np.array_equal(mins[r], minhash(hashes[offsets[r]:offsets[r + 1]], 128, 1)), r
    values, value_offsets = segment_unique(hashes, offsets)
    for r in range(len(lengths)):
        assert np.array_equal(values[value_offsets[r]:value_offsets[r + 1]], np.unique(hashes[offsets[r]:offsets[r + 1]]))
    assert minhash_many(np.empty(0, np.uint64), offsets_of([]), 16).shape == (0, 16)


def test_a_record_that_cannot_be_signed_keeps_its_error_in_place() -> None:
    records = abt_buy_records()[:20]
    records[3] = {"title": ["not", "text"]}
    records[11] = "not a mapping"  # type: ignore[call-overload]
    records[12] = {"title": "ok", "category": {"a": 1}}  # fails when the super tokens are assembled
    got = compute_signatures(records, errors="return")
    for i, r in enumerate(records):
        if i in (3, 11, 12):
            assert isinstance(got[i], RecordError)
            with pytest.raises(RecordError) as e:
                compute_signature(r)
            assert str(got[i]) == str(e.value)
        else:
            assert got[i] == compute_signature(r)
    with pytest.raises(RecordError, match="expected text"):
        compute_signatures(records)
    for size in range(1, MIN_BATCH + 1):  # small batches take the per-record path: same contract
        assert isinstance(compute_signatures(records[3:3 + size], errors="return")[0], RecordError)
    assert compute_signatures([]) == []


def _rows(records: list[dict]) -> list[tuple[dict, int]]:
    rng = random.Random(1)
    return [({"id": i + 1, "user_id": f"u{rng.randint(1, 50)}", "category": r.get("category"), "title": r.get("title"),
              "body": r.get("body"), "price": rng.choice([None, 10.0, "1,299.00"]), "lat": 48.85, "lon": 2.35,
              "status": "active", "created_at": None, "updated_at": None}, 100 + i) for i, r in enumerate(records)]


def test_build_many_signs_the_batch_and_isolates_bad_rows() -> None:
    from daemon.backends.pg_encoding import encode_document

    builder = DocumentBuilder(SourceTable(SourceSettings(), "int"), SignatureParams(), "user")
    items = _rows(EDGE + abt_buy_records()[:400])
    items[5][0]["price"] = "call me"  # fails before signing (numbers)
    items[9][0]["title"] = True  # fails in signing (a boolean is not text)
    items[17][0]["category"] = False  # fails when the super tokens are assembled
    for b in (builder, replace(builder, encoder=encode_document)):
        built = b.build_many(items)
        assert len(built) == len(items)
        for (row, version), doc in zip(items, built):
            try:
                expected: IndexDocument | RecordError = b.build(row, version)
            except RecordError as e:
                expected = e
            if isinstance(expected, RecordError):
                assert isinstance(doc, RecordError) and str(doc) == str(expected)
            else:
                assert doc == expected
        assert [i for i, d in enumerate(built) if isinstance(d, RecordError)] == [5, 9, 17]


ENCODED_DIGEST = "89d707b64503ee14"
"""xxh64 of the wire form of :func:`_golden_items` as built by the signature workers, with the LSH
layout of the code of 06e9b14 (threshold 0.5: 25 bands of 5 rows): every change to the signing or
encoding path must give the same bytes. Change it only with a change of signatures on purpose (a
new ``SIGNATURE_SCHEMA_VERSION``, parameters, or what a signature reads from a text), and say so in
the changelog. Changed on 2026-11-30 (was ``cf986fc8182df9a2``, the code of 06e9b14, before the
issue 20 speed-ups): phone numbers are read only from digit groups shaped as phones, without a year
in front (``daemon.signatures.extract._phone_shaped``), which takes a part number such as
``967562-0403`` out of the phones of 25 of the 3,000 documents; nothing else changed. Changed
again later that day (was ``a7d59276b729945b``): a number written with thousands separators is one
token without them (``85,000`` and ``85.000`` -> ``85000``: ``daemon.signatures.text._ungrouped``),
which changes the tokens of 204 of the 3,000 documents. The
normalised text, stored last in the signature until 2026-11-26 and no longer stored since, is put
back into each signature before hashing, so the digest still covers every other byte as it was."""

ENCODED_DIGEST_DEFAULT = "61b2c3a3239b53ba"
"""The same digest with today's default parameters (LSH threshold 0.6 since 2026-11-26: 18 bands of
7 rows), pinned when that default was adopted (``7bbd7265f064bb18``) and again with the phone
change of 2026-11-30 (``bede46db261b25ab``) and the thousands separators of the same day."""


def _golden_items() -> list[tuple[dict, int]]:
    """1,500 Abt-Buy listings and 1,500 ads generated from them (edited reposts, users, places,
    prices), as rows of the reference table."""
    from daemon.evaluation.generator import generate_ads

    records = abt_buy_records()
    ads = [a.fields for a in generate_ads(1500, seed=5, base=records)]
    rng = random.Random(1)
    return [({"id": i + 1, "user_id": r.get("user") or f"u{rng.randint(1, 50)}", "category": r.get("category"),
              "title": r.get("title"), "body": r.get("body"),
              "price": r.get("price") if isinstance(r.get("price"), (int, float)) else None,
              "lat": r.get("lat"), "lon": r.get("lon"), "status": "active", "created_at": None, "updated_at": None},
             100 + i) for i, r in enumerate(records[:1500] + ads)]


@pytest.mark.parametrize(("params", "expected"), [
    (SignatureParams(lsh_threshold=0.5), ENCODED_DIGEST),
    (SignatureParams(), ENCODED_DIGEST_DEFAULT),
], ids=["lsh-0.5", "default"])
def test_worker_wire_form_is_byte_for_byte_the_pinned_one(params: SignatureParams, expected: str) -> None:
    """``build_many`` with the PostgreSQL encoder (what a signature worker sends back) gives exactly
    the bytes the code gave before the issue 20 work: record id, version, the four JSON texts and
    the three packed int64 arrays of every document, in chunks of 250 as the indexer builds them.
    The keys, no longer stored when they are the signature's own (migration 0013), are the JSON of
    what a read rebuilds from the signature (``keys_of``): the same bytes as the keys stored before.
    The normalised text, no longer stored, is put back last into each signature (as
    ``compute_signature`` gives it) to compare the rest with the bytes of before; the title's codes,
    stored last since 2026-11-27, are checked against the scorer's own derivation and left out."""
    import orjson
    import xxhash

    from daemon.backends.pg_encoding import encode_document, keys_of
    from daemon.scoring.metrics import record_title_models

    builder = DocumentBuilder(SourceTable(SourceSettings(), "int"), params, "user", encoder=encode_document)
    plain = replace(builder, encoder=None, signed=False)
    items = _golden_items()
    digest = xxhash.xxh64()
    for i in range(0, len(items), 250):
        chunk = items[i:i + 250]
        for (row, version), d in zip(chunk, builder.build_many(chunk)):
            assert not isinstance(d, RecordError), d
            e = d.encoded
            assert e.keys is None  # every one of these documents has its signature's own keys
            sig = orjson.loads(e.signature)
            assert "text" not in sig
            # added on 2026-11-27 after every other key: the title's codes, as the scorer derives them
            codes, title = sig.pop("title_codes"), row.get("title")
            assert frozenset(codes) == record_title_models({"title": title, "price": row.get("price")})
            assert codes == sorted(codes)
            sig["text"] = compute_signature(plain.build(row, version).fields, params).text
            keys = orjson.dumps(keys_of(sig)).decode()
            for text in (d.record_id, str(d.version), e.scope, e.fields, orjson.dumps(sig).decode(), keys):
                digest.update(text.encode() + b"\x1e")
            for packed in (e.bottomk, e.minhash, e.key_hashes):
                digest.update((b"N" if packed is None else packed) + b"\x1e")
    assert digest.hexdigest() == expected
