"""compute_signature on whole records: document format, geohash boundary, bad input, determinism."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pygeohash
import pytest

from daemon.errors import RecordError
from daemon.signatures import (
    DOCUMENT_KEYS,
    MINHASH_EMPTY,
    SIGNATURE_SCHEMA_VERSION,
    Signature,
    SignatureParams,
    compute_signature,
    geo_tokens,
)

from data_paths import abt_buy_records

REPO = Path(__file__).resolve().parents[1]
INT64 = (-(2**63), 2**63 - 1)

AD = {
    "title": "Sony Bravia KDL-40V4100 40in LCD TV",
    "body": "Like new, barely used. Call 06 12 34 56 78 or jean@example.fr. Pick up in Paris.",
    "price": 350.0,
    "lat": 48.8566,
    "lon": 2.3522,
    "category": "TV & Vidéo",
    "user": "u-17",
    "unrelated_column": [1, 2, 3],
}


def _assert_document_shape(doc: dict) -> None:
    assert list(doc) == list(DOCUMENT_KEYS)
    json.dumps(doc)  # serialisable
    assert doc["v"] == SIGNATURE_SCHEMA_VERSION
    assert INT64[0] <= doc["simhash"] <= INT64[1]
    assert all(INT64[0] <= x <= INT64[1] for x in doc["minhash"] + doc["bottomk"])
    assert doc["bottomk"] == sorted(doc["bottomk"])
    assert "text" not in doc  # computed (Signature.text), not stored
    for key in ("bands", "blocks", "geo", "super", "models", "phones", "emails", "tokens", "title_codes"):
        assert all(isinstance(x, str) for x in doc[key])


def test_document_format_and_round_trip() -> None:
    sig = compute_signature(AD)
    doc = sig.to_document()
    _assert_document_shape(doc)
    assert len(doc["minhash"]) == 128
    assert len(doc["bands"]) == SignatureParams().bands_rows[0]
    assert all(b.startswith(f"b{i}:") and len(b.split(":")[1]) == 16 for i, b in enumerate(doc["bands"]))
    assert len(doc["blocks"]) == 4
    assert len(doc["geo"]) == 9 and doc["geo"][0] == pygeohash.encode(48.8566, 2.3522, 6)
    assert doc["models"] == ["kdl40v4100"]
    assert doc["title_codes"] == ["kdl40v4100"]
    assert doc["phones"] == ["0612345678"]
    assert doc["emails"] == ["jean@example.fr"]
    assert "kdl40v4100" in doc["tokens"]
    assert sig.text.startswith("sony bravia kdl-40v4100")
    assert all(s.startswith(("t:0:", "t:1:", "k:t:", "k:m:")) for s in doc["super"]) and doc["super"]
    assert sum(s.startswith("k:t:") for s in doc["super"]) == 1 and sum(s.startswith("k:m:") for s in doc["super"]) == 1
    assert doc["params"] == SignatureParams().fingerprint()
    again = Signature.from_document(json.loads(json.dumps(doc)))
    assert again == replace(sig, text="")  # the normalised text is not stored
    # a document stored before 2026-11-26 still holds it, and reads back whole
    assert Signature.from_document(json.loads(json.dumps({**doc, "text": sig.text}))) == sig
    keys = sig.keys()
    assert keys == list(dict.fromkeys(doc["bands"] + doc["blocks"] + doc["super"]))


@pytest.mark.parametrize("title", [
    "Weber Genesis S320 LP Grill - 3780001", "Sony KDL-40V4100 40in LCD TV", "Canon 12.345.678 / 2024/11/27",
    "Café Émile édition 98765 " + "long " * 60 + "AB-12345", 1234567, 12.5, "", None, "1-2-3-4-5 and 1234 5678"])
def test_title_codes_are_the_scorers_and_a_document_without_them_scores_the_same(title: object) -> None:
    """The signer stores the title's codes (signature ``title_codes``) as the scorer derives them from
    the whole title (past ``max_title_chars`` and for a number too), and a document stored before they
    were (no ``title_codes``) reads back without them and gives the scorer the same codes."""
    from daemon.scoring.metrics import title_models
    from daemon.scoring.side import Side

    fields = {"title": title, "body": "Brand new, model 55555 compatible."}
    doc = compute_signature(fields).to_document()
    expected = title_models(str(title)) if title else frozenset()
    assert doc["title_codes"] == sorted(expected)
    legacy = {k: v for k, v in doc.items() if k != "title_codes"}
    assert Signature.from_document(legacy).title_codes is None and "title_codes" not in Signature.from_document(
        legacy).to_document()
    assert Side(fields, doc).title_codes() == Side(fields, legacy).title_codes() == expected


@pytest.mark.parametrize(("price", "codes"), [
    (45000, []), (45000.0, []), ("45000", []), (" 45000.00 ", []), (44999, ["45000"]), (None, ["45000"]),
    ("call me", ["45000"]), (float("nan"), ["45000"]), (True, ["45000"])])
def test_the_records_own_price_in_its_title_is_no_code_for_the_signer_and_the_scorer(price: object,
                                                                                  codes: list[str]) -> None:
    """A title that carries the ad's price (``iPhone 12 64GB - 45000`` at 45,000) has no catalogue
    number: the signer leaves it out of ``title_codes``, and the scorer's own derivation, for a
    document stored without them, agrees."""
    from daemon.scoring.side import Side

    fields = {"title": "iPhone 12 64GB - 45000", "price": price}
    doc = compute_signature(fields).to_document()
    assert doc["title_codes"] == codes
    legacy = {k: v for k, v in doc.items() if k != "title_codes"}
    assert Side(fields, doc).title_codes() == Side(fields, legacy).title_codes() == frozenset(codes)


def test_from_document_rejects_malformed() -> None:
    doc = compute_signature(AD).to_document()
    with pytest.raises(ValueError):
        Signature.from_document({k: v for k, v in doc.items() if k != "bands"})
    with pytest.raises(ValueError):
        Signature.from_document({**doc, "extra": 1})
    with pytest.raises(ValueError):
        Signature.from_document({**doc, "simhash": 2**64})
    with pytest.raises(ValueError):
        Signature.from_document({**doc, "bands": "b0:00"})
    with pytest.raises(ValueError):
        Signature.from_document({**doc, "text": 3})
    with pytest.raises(ValueError):
        Signature.from_document({**doc, "title_codes": [3]})


def test_super_tokens_need_both_fields() -> None:
    base = compute_signature(AD)
    moved = compute_signature({**AD, "lat": 43.2965, "lon": 5.3698})  # Marseille
    other_title = compute_signature({**AD, "title": "Bicycle for sale"})
    rule0 = lambda s: {t for t in s.super if t.startswith("t:0:")}
    rule1 = lambda s: {t for t in s.super if t.startswith("t:1:")}
    assert rule0(base) and not rule0(base) & rule0(moved)  # same title, far away
    assert rule1(base) == rule1(moved)  # same model and category
    assert rule0(base) != rule0(other_title)
    # an empty component degrades the rule to the others (model numbers alone), never to nothing,
    # and a degraded key is never one of the full rule's
    no_category = rule1(compute_signature({**AD, "category": None}))
    assert no_category and not no_category & rule1(base)
    assert no_category == rule1(compute_signature({**AD, "category": None, "body": "other words"}))
    assert not rule1(compute_signature({**AD, "category": None, "title": "tv", "body": "no model"}))
    params = SignatureParams.from_mapping({"super": {"rules": [["title", "body", "user"]], "max_per_rule": 2}})
    assert len([t for t in compute_signature(AD, params).super if t.startswith("t:")]) == 2


def test_identity_keys_title_and_model_numbers_whatever_the_rules() -> None:
    from daemon.signatures.supertokens import identity_keys

    ident = lambda s: {t for t in s.super if t.startswith("k:")}
    base = compute_signature(AD)
    bare = compute_signature({"title": AD["title"]})  # no body, place, category or user
    assert ident(bare) == ident(base)  # the body's model numbers are the title's here
    reordered = compute_signature({"title": "KDL-40V4100, Sony  BRAVIA 40in LCD TV"})
    assert {t for t in ident(reordered) if t.startswith("k:t:")} == {t for t in ident(base) if t.startswith("k:t:")}
    assert not ident(compute_signature({"title": "", "body": ""}))
    assert identity_keys(["a", "b"], ["x1y2", "x1y2"]) == identity_keys(["b", "a", "a"], ["x1y2"])
    assert len(identity_keys([], ["ab12", "cd34"])) == 2


def test_title_pair_keys_pairs_of_the_sampled_words() -> None:
    from daemon.errors import ConfigError
    from daemon.signatures.signature import record_text
    from daemon.signatures.supertokens import title_pair_keys, title_sample

    toks = ["sony", "cyber", "shot", "black", "digit", "camera", "dsch10b", "kit", "case"]
    keys = title_pair_keys(toks, 8)
    assert len(keys) == 28 and len(set(keys)) == 28 and all(k.startswith("t:p:") for k in keys)
    assert title_pair_keys(list(reversed(toks)) + toks, 8) == keys  # order and repeats do not matter
    # a title without one of the sampled words still shares the pairs of the words it kept
    dropped = title_sample(toks, 8)[0]
    kept = [t for t in toks if t != dropped]
    assert len(set(title_pair_keys(kept, 8)) & set(keys)) == 21  # C(7, 2)
    assert len(title_pair_keys(["solo", "solo"], 8)) == 1 and title_pair_keys([], 8) == []
    # through the signature: only with the setting; the default parameters' fingerprint is unchanged
    p = SignatureParams.from_mapping({"super": {"rules": [["model"]], "title_pairs": 8}})
    sig = compute_signature(AD, p)
    assert {k for k in sig.super if k.startswith("t:p:")} == set(title_pair_keys(record_text(AD, p).title_toks, 8, p.seed))
    assert not any(k.startswith("t:p:") for k in compute_signature(AD).super)
    assert SignatureParams.from_mapping({"super": {"title_pairs": 0}}).fingerprint() == SignatureParams().fingerprint()
    assert p.fingerprint() != SignatureParams.from_mapping({"super": {"rules": [["model"]]}}).fingerprint()
    for bad in (1, 17, True, "8"):
        with pytest.raises(ConfigError, match="signatures.super.title_pairs"):
            SignatureParams.from_mapping({"super": {"title_pairs": bad}})


def _geo_boundary_case(precision: int) -> None:
    cell = pygeohash.encode(45.7640, 4.8357, precision)  # Lyon
    box = pygeohash.decode_exactly(cell)
    east_edge = box.longitude + box.longitude_error
    metres_per_degree_lon = 111_320 * math.cos(math.radians(box.latitude))
    inside = (box.latitude, east_edge - 20 / metres_per_degree_lon)
    across = (box.latitude, east_edge + 30 / metres_per_degree_lon)  # 50 m east of `inside`
    ga, gb = geo_tokens(*inside, precision), geo_tokens(*across, precision)
    assert ga[0] == cell and gb[0] != cell
    assert gb[0] in ga and ga[0] in gb
    north_edge = box.latitude + box.latitude_error
    up = geo_tokens(north_edge + 30 / 111_320, box.longitude, precision)
    down = geo_tokens(north_edge - 20 / 111_320, box.longitude, precision)
    assert up[0] != down[0] and up[0] in down and down[0] in up


def test_geohash_neighbours_across_cell_boundary() -> None:
    for precision in (5, 6, 7):
        _geo_boundary_case(precision)


def test_geohash_poles_and_antimeridian() -> None:
    assert len(geo_tokens(89.99, 10.0, 4)) == 6  # 5 neighbours at the top row
    east = geo_tokens(10.0, 179.999, 5)
    west = geo_tokens(10.0, -179.999, 5)
    assert west[0] in east and east[0] in west


@pytest.mark.parametrize(
    ("lat", "lon"),
    [(None, None), (48.8, None), (float("nan"), 2.3), (48.8, float("inf")), (91.0, 2.3), (48.8, -180.5),
     ("abc", 2.3), (0.0, 0.0), (True, 2.3), ([1], 2.3)],
)
def test_bad_locations_give_no_geo_tokens(lat: object, lon: object) -> None:
    assert compute_signature({**AD, "lat": lat, "lon": lon}).geo == ()
    assert compute_signature({**AD, "lat": "48.8566", "lon": Decimal("2.3522")}).geo[0] == "u09tvw"


def test_empty_record_has_defined_empty_signature() -> None:
    for fields in ({}, {"title": None, "body": None}, {"title": "", "body": "   "}, {"title": "😀🎉", "body": "👍👍👍"},
                   {"title": "\x00\x00", "body": "\ud800\udc00\udfff"}, {"title": "!!!", "body": "... --- ???"}):
        sig = compute_signature(fields)
        assert sig.simhash == 0
        assert sig.minhash == (MINHASH_EMPTY,) * 128
        assert sig.bottomk == () and sig.bands == () and sig.blocks == () and sig.super == ()
        assert sig.keys() == []
        _assert_document_shape(sig.to_document())


def test_bad_text_values() -> None:
    sig = compute_signature({"title": "Sony\x00 TV\ud800 KDL-40V4100", "body": "<b>nice</b> tv\x00"})
    assert "soni" in sig.tokens and "kdl40v4100" in sig.models
    assert "\x00" not in sig.text and "\ud800" not in sig.text
    json.dumps(sig.to_document())
    sig.text.encode("utf-8")  # no surrogates left
    assert compute_signature({"title": 12345678}).tokens == ("12345678",)
    assert compute_signature({"title": b"caf\xc3\xa9 \xff"}).tokens[0] == "cafe"
    with pytest.raises(RecordError):
        compute_signature({"title": ["a", "list"]})
    with pytest.raises(RecordError):
        compute_signature({"body": {"a": 1}})
    with pytest.raises(RecordError):
        compute_signature(["not", "a", "mapping"])  # type: ignore[arg-type]


@pytest.mark.parametrize("price", [float("nan"), float("inf"), -float("inf"), None, "free", -1.0, 1e308])
def test_prices_do_not_matter(price: object) -> None:
    assert compute_signature({**AD, "price": price}) == compute_signature(AD)


def test_huge_body_is_truncated() -> None:
    words = " ".join(f"word{i % 5000} filler" for i in range(100_000))  # ~1.2 MB
    assert len(words) > 1_000_000
    sig = compute_signature({"title": "big", "body": words})
    truncated = compute_signature({"title": "big", "body": words[:100_000]})
    assert sig == truncated
    assert len(sig.text) == 2000
    small = SignatureParams.from_mapping({"shingles": {"max_body_chars": 50}})
    assert compute_signature({"body": words}, small) == compute_signature({"body": words[:50]}, small)


def test_extra_text_fields_only_when_configured() -> None:
    plain = compute_signature({"title": "tv", "body": "good", "notes": "mint condition"})
    assert plain == compute_signature({"title": "tv", "body": "good"})
    params = SignatureParams.from_mapping({"fields": {"notes": {"stem": False}}})
    with_notes = compute_signature({"title": "tv", "body": "good", "notes": "mint condition"}, params)
    assert "mint condition" in with_notes.text


def test_idf_table_changes_simhash_weights() -> None:
    base = compute_signature(AD)
    assert compute_signature(AD, idf={}) == base
    weighted = compute_signature(AD, idf={"soni": 50.0, "bravia": 50.0})
    assert weighted.simhash != base.simhash and weighted.minhash == base.minhash


def test_sentence_bottomk_option() -> None:
    params = SignatureParams.from_mapping({"bottomk": {"shingles": "sentences"}})
    a = compute_signature({"title": "tv", "body": "First sentence here. Second one there! Third."}, params)
    b = compute_signature({"title": "tv", "body": "First sentence here. Another one there! Third."}, params)
    assert len(a.bottomk) == 4  # title + 3 sentences
    assert len(set(a.bottomk) & set(b.bottomk)) == 3


_CHILD = """
import json, sys
sys.path.insert(0, {repo!r})
from daemon.signatures import compute_signature
records = json.loads(sys.stdin.read())
print(json.dumps([compute_signature(r).to_document() for r in records]))
"""


def test_stable_across_processes_and_hash_seeds() -> None:
    records = [AD] + [{k: v for k, v in r.items()} for r in abt_buy_records()[:20]]
    records = [{k: v for k, v in r.items() if k != "unrelated_column"} for r in records]
    here = [compute_signature(r).to_document() for r in records]
    for hashseed in ("0", "12345", "random"):
        env = {**os.environ, "PYTHONHASHSEED": hashseed}
        out = subprocess.run(
            [sys.executable, "-c", _CHILD.format(repo=str(REPO))],
            input=json.dumps(records), capture_output=True, text=True, env=env, check=True, timeout=120,
        )
        assert json.loads(out.stdout) == here


def test_text_sketch_is_the_core_of_compute_signature() -> None:
    from daemon.signatures import text_sketch, tokens

    sig = compute_signature({"title": "Sony TV", "body": "A fine television set, barely used"})
    sk = text_sketch(tokens("Sony TV") + tokens("A fine television set, barely used"))
    assert sig.minhash == tuple(sk.minhash.tolist()) and list(sig.bands) == sk.bands and list(sig.blocks) == sk.blocks
    empty = text_sketch([])
    assert empty.simhash == 0 and empty.bands == [] and empty.blocks == [] and empty.gram_hashes.size == 0


def test_shingle_simhash_option_and_block_layout() -> None:
    params = SignatureParams.from_mapping({"simhash": {"features": "shingles", "blocks": 6, "max_distance": 3}})
    sig = compute_signature(AD, params)
    assert len(sig.blocks) == 20 and sig.simhash != compute_signature(AD).simhash


@pytest.mark.parametrize(
    "body",
    ["<script>" * 12_500, "<!--" * 25_000, "<a " * 33_000, "<style>x</style>" * 6_000, "a" * 100_000, "&amp;" * 20_000],
)
def test_pathological_markup_and_giant_tokens(body: str) -> None:
    sig = compute_signature({"title": "", "body": body})
    assert sig.bands == () and sig.models == ()  # markup stripped, the 100k-letter word dropped
    _assert_document_shape(sig.to_document())


def test_markup_blocks_are_removed() -> None:
    from daemon.signatures import normalise_text

    assert normalise_text("a<!-- c -->b<SCRIPT type=x>var</script >c<style>.x{}</style>d<!-- open") == "a b c d"
