"""Unit tests of daemon.scoring: config validation, per-field metrics, combination, decision."""

from __future__ import annotations

import json
import re

import pytest
import xxhash

from daemon.errors import ConfigError
from daemon.profiles import PROFILES
from daemon.scoring import PairScore, ScoringConfig, decide, score_matrix, score_pair
from daemon.scoring import metrics as m
from daemon.signatures import SignatureParams, compute_signature

CFG = ScoringConfig.from_mapping({})


def _shingles(text: str) -> set[str]:
    toks = re.findall(r"[a-z0-9]+", text.lower())
    return {" ".join(toks[i : i + 3]) for i in range(max(1, len(toks) - 2))} if toks else set()


def make_sig(fields: dict, models=(), phones=(), emails=()) -> dict:
    """A hand-built serialised signature with the exact keys of Signature.to_document()."""
    text = " ".join(x for x in (fields.get("title"), fields.get("body")) if x).lower()
    sh = _shingles(text)
    mask = (1 << 63) - 1  # non-negative int64, as the signatures package stores them
    hashes = sorted({xxhash.xxh64_intdigest(s.encode()) & mask for s in sh})
    minhash = [min(xxhash.xxh64_intdigest(s.encode(), seed=i) & mask for s in sh) for i in range(128)] if sh else []
    return {
        "v": 1, "params": "test", "simhash": 0, "minhash": minhash, "bottomk": hashes[:128],
        "bands": [], "blocks": [], "geo": [], "super": [], "models": list(models),
        "phones": list(phones), "emails": list(emails),
        "tokens": re.findall(r"[a-z0-9]+", (fields.get("title") or "").lower()), "text": text,
    }


AD = {
    "title": "Apple iPhone 12 Pro 128GB graphite, like new",
    "body": "Selling my iPhone 12 Pro in very good condition. Battery health 91 percent. "
    "Comes with original box and charger. No scratches on the screen. Pick up in the city centre.",
    "price": 650.0, "lat": 33.5731, "lon": -7.5898, "user": "u1", "category": "phones",
}


# --- config -------------------------------------------------------------------------------------

def test_defaults_load_and_are_sane() -> None:
    assert CFG.potential_threshold <= CFG.duplicate_threshold
    assert CFG.field("models").weight > CFG.field("title").weight > 0
    assert CFG.scope == "user" and CFG.cluster.max_size >= 2


@pytest.mark.parametrize(
    ("mapping", "key"),
    [
        ({"fields": {"title": {"weight": 0}}}, "dedup.fields.title.weight"),
        ({"fields": {"title": {"metric": "cosine", "weight": 1}}}, "dedup.fields.title.metric"),
        ({"fields": {"price": {"metric": "price", "weight": 1, "tolerance": -1}}}, "dedup.fields.price.tolerance"),
        ({"fields": {"title": {"metric": "token_set", "weight": 1, "radius_m": 5}}}, "dedup.fields.title.radius_m"),
        ({"potential_threshold": 95}, "dedup.potential_threshold"),
        ({"duplicate_threshold": 101}, "dedup.duplicate_threshold"),
        ({"scope": "planet"}, "dedup.scope"),
        ({"bogus": 1}, "dedup.bogus"),
        ({"cluster": {"max_size": 1}}, "dedup.cluster.max_size"),
        ({"cluster": {"min_density": "x"}}, "dedup.cluster.min_density"),
        ({"candidate_cap": 0}, "dedup.candidate_cap"),
        ({"fields": {"colour": {"metric": "exact"}}}, "dedup.fields.colour.weight"),
        ({"fields": {"body": {"metric": "jaccard", "weight": 1, "evidence": "negative"}}}, "dedup.fields.body.evidence"),
    ],
)
def test_config_errors_name_the_dotted_key(mapping: dict, key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        ScoringConfig.from_mapping(mapping)
    assert exc.value.key == key
    assert key in str(exc.value)


def test_config_merges_fields_and_drops_null() -> None:
    cfg = ScoringConfig.from_mapping(
        {"fields": {"title": {"weight": 5}, "location": None, "category": {"metric": "exact", "weight": 1}}},
        prefix="x",
    )
    assert cfg.field("title").weight == 5 and cfg.field("title").metric == "token_set"
    assert cfg.field("location") is None
    assert cfg.field("category").params["negative"] is True


# --- metrics ------------------------------------------------------------------------------------

def test_metrics_missing_sides_give_none() -> None:
    assert m.levenshtein_similarity("abc", None) is None
    assert m.jaro_winkler_similarity("  ", "abc") is None
    assert m.token_set_similarity(None, None) is None
    assert m.price_similarity(None, 3) is None
    assert m.geo_similarity({"lat": 1.0}, {"lat": 1.0, "lon": 2.0}) is None
    assert m.minhash_similarity([], [1]) is None
    assert m.simhash_similarity(None, 5) is None
    assert m.exact_similarity([], ["x"]) is None


def test_text_metrics() -> None:
    assert m.levenshtein_similarity("Sony KDL-40", "sony kdl 40") == 1.0
    assert m.levenshtein_similarity("abcd", "abcf") == pytest.approx(0.75)
    assert m.jaro_winkler_similarity("martha", "marhta") == pytest.approx(0.9611, abs=1e-3)
    assert m.token_set_similarity("red bike for sale", "bike red for sale") == 1.0


def test_sketch_metrics() -> None:
    assert m.minhash_similarity([1, 2, 3, 4], [1, 2, 0, 0]) == 0.5
    # sketches shorter than k hold the whole sets: exact Jaccard |{1,3}| / |{1,2,3,4,5,6}|
    assert m.bottomk_similarity([1, 2, 3, 5], [1, 3, 4, 6]) == pytest.approx(2 / 6)
    assert m.bottomk_similarity([1, 2], [1, 2]) == 1.0
    assert m.bottomk_similarity([1, 2], [3, 4]) == 0.0
    assert m.simhash_similarity(-1, -1) == 1.0
    assert m.simhash_similarity(0, 0b111) == pytest.approx(1 - 3 / 24)
    assert m.simhash_similarity(0, -1) == 0.0  # 64 bits apart (signed int64 all ones)


def test_exact_metric_shared_disjoint_partial() -> None:
    assert m.exact_similarity(["KX-FA83"], ["kxfa83", "other"]) == 1.0
    assert m.exact_similarity(["abc123"], ["xyz789"]) == 0.0
    assert m.exact_similarity(["abc123"], ["xyz789"], negative=False) is None
    assert m.exact_similarity(["fs105"], ["fs105na"], partial=0.9) == 0.9
    assert m.exact_similarity(["mmv4205bt"], ["mmv4205baq"], partial=0.9) == pytest.approx(0.9 * 8 / 10)
    assert m.exact_similarity(["kdl40v4100"], ["kdl40w5100"], partial=0.9) == 0.0
    assert m.exact_similarity(["1080p"], ["1080p"], ignore_quantities=True) is None
    assert m.is_quantity("120hz") and m.is_quantity("1920x1080") and not m.is_quantity("kdl40v4100")


def test_price_and_geo() -> None:
    assert m.price_similarity(100, 100) == 1.0
    assert m.price_similarity(0, 0) == 1.0
    assert m.price_similarity(100, 95, tolerance=0.3) == pytest.approx(1 - 0.05 / 0.3)
    assert m.price_similarity(100, 60, tolerance=0.3) == 0.0
    assert m.haversine_m(0, 0, 0, 1) == pytest.approx(111_195, rel=1e-3)
    a, b = {"lat": 48.8566, "lon": 2.3522}, {"lat": 48.8566, "lon": 2.3522}
    assert m.geo_similarity(a, b) == 1.0
    assert m.geo_similarity(a, {"lat": 48.8666, "lon": 2.3522}, radius_m=2000) == pytest.approx(1 - 1112 / 2000, abs=0.01)
    assert m.geo_similarity(a, {"lat": 49.8566, "lon": 2.3522}) == 0.0


@pytest.mark.parametrize("absurd", [1e308, 10**400, "1e308", float("inf"), float("nan"), -5, "-5", m.MAX_PRICE * 2,
                                    "10" * 300])
def test_an_absurd_price_is_no_price_and_never_overflows(absurd: object) -> None:
    """Issue 19: a repost priced 1e308 next to one priced 49 raised OverflowError in the price
    comparison (and a 400-digit integer in float()), failing the dedup worker's whole batch. A price
    that is not finite, negative or above MAX_PRICE is now "no price": the field is skipped."""
    assert m.price_value(absurd) is None
    assert m.price_similarity(49, absurd) is None and m.price_similarity(absurd, 49) is None
    assert m.price_change_pct(49, absurd) is None
    sig = make_sig(AD)
    ps = score_pair(dict(AD, price=49.0), sig, dict(AD, price=absurd), dict(sig), CFG)
    assert "price" not in ps.reasons and "price" not in ps.summary(limit=10)
    assert decide(ps.score, CFG) == "duplicate"  # the rest of the pair still decides


def test_price_change_is_bounded_and_exact_at_the_edges() -> None:
    assert m.price_value("49") == 49.0 and m.price_value(0) == 0.0 and m.price_value(m.MAX_PRICE) == m.MAX_PRICE
    assert m.price_change_pct(100, 105) == 5 and m.price_change_pct(100, 95) == -5
    assert m.price_change_pct(0, 10) == 100 and m.price_change_pct(7, 7) == 0
    # a tiny price against the largest one: the ratio is infinite in floats, the percentage bounded
    assert m.price_change_pct(5e-324, m.MAX_PRICE) == m.MAX_PRICE_CHANGE_PCT
    ps = score_pair(dict(AD, price=5e-324), {}, dict(AD, price=m.MAX_PRICE), {}, CFG)
    assert ps.details["price"] == f"price +{m.MAX_PRICE_CHANGE_PCT}%"
    ps = score_pair(dict(AD, price=100.0), {}, dict(AD, price=100.2), {}, CFG)
    assert ps.details["price"] == "price +0%"  # different, if by less than half a percent


def test_coordinates_too_large_for_a_float_are_no_location() -> None:
    assert m.geo_similarity({"lat": 10**400, "lon": 2.35}, {"lat": 48.85, "lon": 2.35}) is None


# --- combination and decision ------------------------------------------------------------------

def test_exact_repost_is_duplicate() -> None:
    s = make_sig(AD, models=["iphone12"], phones=["0612345678"])
    ps = score_pair(AD, s, dict(AD), dict(s), CFG)
    assert ps.score == 100.0 and decide(ps.score, CFG) == "duplicate"
    assert ps.summary(limit=2) == "same model number, same title"
    assert "same price" in ps.summary(limit=10)
    json.dumps(ps.reasons)
    assert set(ps.reasons["title"]) == {"metric", "similarity", "weight"}


def test_typos_reordered_and_price_change_is_at_least_potential() -> None:
    other = dict(AD)
    other["title"] = "Apple iPhone 12 Pro 128 GB grafite like new"
    other["body"] = (
        "Comes with original box and charger. Selling my iPhone 12 Pro in very good condtion. "
        "Battery health 91 percent. Pick up in the city centre. No scratches on the screen."
    )
    other["price"] = 650.0 * 1.05
    ps = score_pair(AD, make_sig(AD), other, make_sig(other), CFG)
    assert decide(ps.score, CFG) in ("duplicate", "potential_duplicate"), (ps.score, ps.reasons)
    assert "price +5%" in ps.summary()


def test_two_products_from_same_seller_are_not_flagged() -> None:
    other = {
        "title": "Samsung 55 inch QLED TV QE55Q60 with wall mount",
        "body": "Big television, two years old, works perfectly, remote included, collection only.",
        "price": 420.0, "lat": AD["lat"], "lon": AD["lon"], "user": "u1", "category": "tv",
    }
    ps = score_pair(AD, make_sig(AD, models=["iphone12"]), other, make_sig(other, models=["qe55q60"]), CFG)
    assert decide(ps.score, CFG) is None, (ps.score, ps.summary())


def test_missing_fields_are_skipped_and_weights_renormalised() -> None:
    a = {"title": "Canon EOS 600D body", "body": None, "price": None}
    b = {"title": "Canon EOS 600D body", "body": "Barely used", "price": 300.0}
    ps = score_pair(a, make_sig(a), b, make_sig(b), CFG)
    assert set(ps.reasons) == {"title"}
    assert ps.score == 100.0
    empty = score_pair({}, {}, {}, {}, CFG)
    assert empty.score == 0.0 and empty.summary() == "no comparable fields"


def test_positive_evidence_field_raises_the_score_but_never_lowers_it() -> None:
    """Same product from two shops: equal title, each shop's own description and price."""
    positive = ScoringConfig.from_mapping({"fields": {
        "body": {"metric": "jaccard", "weight": 1.0, "evidence": "positive"},
        "price": {"metric": "price", "weight": 1.0, "evidence": "positive"}}})
    a = {"title": "Sony Bravia KDL-40V4100 40 inch LCD TV", "body": "Full HD panel with three HDMI inputs "
         "and a matte black bezel, wall mount ready.", "price": 899.0}
    b = {"title": "Sony Bravia KDL-40V4100 40 inch LCD TV", "body": "Our best selling television this "
         "season: bright picture, slim design, free delivery.", "price": 1399.0}
    sa, sb = make_sig(a, models=["kdl40v4100"]), make_sig(b, models=["kdl40v4100"])
    both = score_pair(a, sa, b, sb, CFG)
    pos = score_pair(a, sa, b, sb, positive)
    assert both.reasons["body"]["similarity"] < 0.2 and both.reasons["price"]["similarity"] == 0.0
    assert both.score < 90.0 <= pos.score == 100.0  # title and model agree; body and price not counted
    assert pos.reasons["body"]["counted"] is False and pos.reasons["price"]["counted"] is False
    assert "counted" not in both.reasons["body"]
    # A copied description still raises a score that the other fields leave below 100.
    c = dict(b, body=a["body"], title="Flat screen for sale")
    sc = make_sig(c)
    without = score_pair(a, make_sig(a), dict(c, body=None), sc, positive)
    with_body = score_pair(a, make_sig(a), c, sc, positive)
    assert with_body.score > without.score
    assert "counted" not in with_body.reasons["body"]


def test_disjoint_model_numbers_pull_the_score_down_and_block_auto_reject() -> None:
    a = {"title": "Sony Bravia 40 inch LCD TV", "price": 899.0}
    b = dict(a)
    same = score_pair(a, make_sig(a, models=["kdl40v4100"]), b, make_sig(b, models=["kdl40v4100"]), CFG)
    none = score_pair(a, make_sig(a), b, make_sig(b), CFG)
    diff = score_pair(a, make_sig(a, models=["kdl40v4100"]), b, make_sig(b, models=["kdl40w5100"]), CFG)
    assert same.score == 100.0 and none.score == 100.0
    assert diff.score < CFG.potential_threshold
    assert "different model number" in diff.summary()
    # with a lighter model weight the score stays high, but the cap keeps it off auto-reject
    light = ScoringConfig.from_mapping({"fields": {"models": {"weight": 0.2}}})
    capped = score_pair(a, make_sig(a, models=["kdl40v4100"]), b, make_sig(b, models=["kdl40w5100"]), light)
    assert capped.capped and decide(capped.score, light) == "potential_duplicate"


def test_decide_thresholds_inclusive() -> None:
    cfg = ScoringConfig.from_mapping({"duplicate_threshold": 90, "potential_threshold": 70})
    assert decide(90.0, cfg) == "duplicate"
    assert decide(89.9, cfg) == "potential_duplicate"
    assert decide(70.0, cfg) == "potential_duplicate"
    assert decide(69.9, cfg) is None


def test_score_matrix_skips_self_and_repeats() -> None:
    recs = {1: (AD, make_sig(AD)), 2: (AD, make_sig(AD))}
    out = score_matrix(recs, [(1, 2), (2, 1), (1, 1)], CFG)
    assert list(out) == [(1, 2)] and isinstance(out[(1, 2)], PairScore)


def test_geo_field_and_simhash_metric() -> None:
    cfg = ScoringConfig.from_mapping({"fields": {"body": {"metric": "simhash", "weight": 1}}})
    a, b = dict(AD), dict(AD, lat=AD["lat"] + 0.05)  # ~5.6 km north
    sa, sb = make_sig(a), make_sig(b)
    sa["simhash"], sb["simhash"] = 0, 1
    ps = score_pair(a, sa, b, sb, cfg)
    assert ps.reasons["location"]["similarity"] == 0.0
    assert ps.reasons["body"]["similarity"] == pytest.approx(1 - 1 / 24, abs=1e-4)
    assert "km apart" in ps.details["location"]


# --- with the real signatures ------------------------------------------------------------------

def _doc(fields: dict) -> dict:
    return compute_signature(fields, SignatureParams()).to_document()


def test_with_computed_signatures() -> None:
    repost = score_pair(AD, _doc(AD), dict(AD), _doc(dict(AD)), CFG)
    assert repost.score == 100.0 and decide(repost.score, CFG) == "duplicate"
    edited = dict(AD, title="Apple iPhone 12 Pro 128 GB grafite like new", price=650.0 * 0.95)
    edited["body"] = (
        "Comes with original box and charger. Selling my iPhone 12 Pro in very good condtion. "
        "Battery health 91 percent. Pick up in the city centre. No scratches on the screen."
    )
    assert decide(score_pair(AD, _doc(AD), edited, _doc(edited), CFG).score, CFG) is not None
    tv = {"title": "Samsung 55 inch QLED TV QE55Q60 with wall mount", "body": "Big television, remote "
          "included, collection only.", "price": 420.0, "lat": AD["lat"], "lon": AD["lon"]}
    assert decide(score_pair(AD, _doc(AD), tv, _doc(tv), CFG).score, CFG) is None
    a = {"title": "Sony Bravia 40 inch LCD TV KDL-40V4100", "price": 899.0}
    b = {"title": "Sony Bravia 40 inch LCD TV KDL-40W5100", "price": 899.0}
    diff = score_pair(a, _doc(a), b, _doc(b), CFG)
    assert diff.reasons["models"]["similarity"] == 0.0 and decide(diff.score, CFG) != "duplicate"


def _pair(a: dict, b: dict, cfg: ScoringConfig = CFG) -> PairScore:
    return score_pair(a, compute_signature(a).to_document(), b, compute_signature(b).to_document(), cfg)


def test_evidence_against_a_match_numbers_models_and_price_gap() -> None:
    # issue 17: linked at 90 on title similarity before, different product and price +249%
    escort = {"title": "Escort Passport 8500 X50 Radar Detector", "price": 129.0}
    other = {"title": "Escort Passport 9500ci Radar Detector", "price": 450.0}
    ps = _pair(escort, other)
    assert decide(ps.score, CFG) is None and ps.capped is False
    assert ps.reasons["numbers"]["similarity"] == 0 and ps.reasons["price_gap"]["similarity"] == 0
    assert "different numbers" in ps.summary(6) and "price gap 3.5x" in ps.summary(6)
    # a size of the same line: otherwise equal titles, conflicting sizes
    tv40 = {"title": "Sony Bravia 40' LCD TV", "body": "Full HD, 3 HDMI inputs, like new", "price": 500.0}
    tv46 = {"title": "Sony Bravia 46' LCD TV", "body": "Full HD, 3 HDMI inputs, like new", "price": 520.0}
    assert decide(_pair(tv40, tv46).score, CFG) is None
    # no conflict: a shortened title drops numbers; a rounded figure; numbers inside model numbers
    assert m.numbers_conflict("Apple 120GB Black 7th Generation iPod", "Apple 120GB iPod") is None
    assert m.numbers_conflict("Canon PowerShot 14 Megapixel Camera", "Canon PowerShot 14.7 Megapixel Camera") is None
    assert m.numbers_conflict("Sony KDL-40V4100", "Sony KDL-46V4100") is None
    assert m.numbers_conflict("Samsung 46' LCD HDTV 50,000:1", "Samsung 46' LCD HDTV") is None
    # different wording around the numbers: not "otherwise equal", no evidence either way
    assert m.numbers_conflict("Samsung 46' Series 8 LCD Black Flat Panel HDTV - LN46A850",
                              "Samsung LN46A850 - 46' 1080P LCD HDTV - 50,000:1 Dynamic Contrast Ratio") is None
    # two colours of one model line are two products (a prefix variant is one)
    a = {"title": "Polk Audio CSI A4 Black Center Channel Loudspeaker - CSIA4BK"}
    b = {"title": "Polk Audio CSI A4 Cherry Center Channel Loudspeaker - CSIA4C"}
    assert _pair(a, b).reasons["models"]["similarity"] == 0
    # a prefix variant is half evidence in a seller's own ads, a shop's suffix in the products profile
    c = {"title": "Netgear FS105NA 5-Port Switch"}
    assert _pair({"title": "Netgear FS105 5-Port Switch"}, c).reasons["models"]["similarity"] == 0.5
    products = ScoringConfig.from_mapping(PROFILES["products"]["dedup"])
    assert _pair({"title": "Netgear FS105 5-Port Switch"}, c, products).reasons["models"]["similarity"] == 0.9
    # colours beyond the basic ones are colours too: Cobalt/Black and Onyx Black are two consoles
    ds = "Nintendo DS Lite {} Portable Gaming System"
    assert m.colours_conflict(ds.format("Cobalt/Black"), ds.format("Onyx Black")) == 0.0
    assert m.colours_conflict(ds.format("Onyx Black"), ds.format("Black")) is None
    # the titles' model numbers decide, not a compatible product named in a body
    ipod = {"title": "Apple iPod Classic - MB565LLA", "body": "Works with dock MA300G"}
    nano = {"title": "Apple iPod Nano - MB913LLA", "body": "Works with dock MA300G"}
    assert _pair(ipod, nano).reasons["models"]["similarity"] == 0
    assert m.price_conflict(100, 49) == 0.0 and m.price_conflict(100, 51) is None and m.price_conflict(None, 5) is None


def test_colours_and_title_codes_tell_a_line_s_items_apart() -> None:
    black = {"title": "Flip Video F360 Black Mino Series Camcorder - F360B"}
    white = {"title": "Flip Video F360 White Mino Series Camcorder - F360W"}
    ps = _pair(black, white)
    assert ps.reasons["colours"]["similarity"] == 0 and "different colour (black / white)" in ps.summary(6)
    assert decide(ps.score, CFG) is None
    assert m.colours_conflict("Sony Cyber-Shot Graphite Black Camera", "Sony Cyber-Shot Black Camera") is None
    assert m.colours_conflict("Nintendo DS Lite Cobalt/Black Portable Gaming System",
                              "Nintendo DS Lite Crimson/Black Portable Gaming System") == 0.0
    assert m.colours_conflict("Black leather sofa", "Red bicycle with basket") is None  # not otherwise equal
    # a spec string shared by both titles does not hide two model numbers; a catalogue number counts
    a = {"title": "Pioneer Premier In-Dash CD/WMA/MP3/AAC Receiver - DEHP500UB"}
    b = {"title": "Pioneer Premier In-Dash CD/WMA/MP3/AAC Receiver - DEHP400UB"}
    assert _pair(a, b).reasons["models"]["similarity"] == 0
    # the phrase names the codes, for a moderator: those each title lacks, or those both share
    assert _pair(a, b).details["models"] == "different model number (DEHP500UB / DEHP400UB)"
    assert _pair({"title": "Netgear FS105 switch"}, {"title": "Netgear FS105NA 5-port switch"}).details[
        "models"] == "near-same model number (FS105 / FS105NA)"  # not the quantity 5PORT beside them
    assert _pair({"title": "Samsung 47-inch LED TV"}, {"title": "Samsung 55-inch LED TV"}).details[
        "models"] == "different size (47INCH / 55INCH)"  # a quantity when nothing else differs, named so
    table = "Solid oak, seats four, minor marks on the top. Collection only."
    assert _pair({"title": "Oak dining table 120x60 cm", "body": table}, {"title": "Oak dining table 140x70 cm",
                                                                         "body": table}).details[
        "models"] == "different size (120X60 / 140X70)"  # a dimension too
    assert _pair({"title": "Sony KDL-40V4100 TV"}, {"title": "Sony Bravia KDL40V4100 LCD"}).details[
        "models"] == "same model number (KDL40V4100)"
    assert m.title_models("Weber Genesis S320 LP Grill - 3780001") >= {"3780001"}
    assert m.codes_conflict(frozenset({"3780001"}), frozenset({"3880001"}), [], [])
    # a date or a span of years is when, not which item: no catalogue number, on either side
    assert m.title_models("The Energy Report 3/10/14") == frozenset()
    assert m.title_models("Brake pads Honda Civic 2006-2011") == frozenset()
    day = _pair({"title": "Video Games News And Rumors 3/10/14"}, {"title": "The Bachelor 2014 RECAP 3/10/14"})
    assert "models" not in day.reasons and "model" not in day.summary()
    one_day = _pair({"title": "Garage sale 3/10/14 - 4471203"}, {"title": "Garage sale 3/10/14 - 4471230"})
    assert one_day.reasons["models"]["similarity"] == 0  # the catalogue numbers still conflict
    # a price written in an ad's title is the price, not a model number: a repost whose price dropped
    first = {"title": "iPhone 12 64GB black - 45000", "body": "Like new, with box and charger.", "price": 45000}
    drop = {"title": "iPhone 12 64GB black - 42000", "body": "Like new, with box and charger.", "price": 42000}
    repost = _pair(first, drop)
    assert "models" not in repost.reasons and decide(repost.score, CFG) is not None, repost.summary()
    assert _pair({**first, "price": None}, {**drop, "price": None}).reasons["models"]["similarity"] == 0
    # a typo in one title's code, the right code in the other's body: no conflict
    assert not m.codes_conflict(frozenset({"de5x58784"}), frozenset({"de55x8784"}), ["de5x58784"], ["de55x8784", "de5x58784"])
    # a shop's all-digit item number against the maker's model number: two schemes, no evidence either
    # way; two numbers of one scheme that differ are two items (a shared model number aside: S550)
    nikon = "Nikon Coolpix S550 Digital Camera - Plum - {}"
    assert m.separate_schemes(m.title_models(nikon.format("26110")), m.title_models(nikon.format("COOLPIXS550PL")))
    assert "models" not in _pair({"title": nikon.format("26110")}, {"title": nikon.format("COOLPIXS550PL")}).reasons
    assert not m.separate_schemes(m.title_models(nikon.format("26110")), m.title_models(nikon.format("26108")))
    assert _pair({"title": nikon.format("26110")}, {"title": nikon.format("26108")}).reasons["models"]["similarity"] == 0
    assert not m.separate_schemes(frozenset({"26110", "s550pl"}), frozenset({"coolpixs550pl"}))  # one side names both kinds


@pytest.mark.parametrize(("text", "km"), [
    ("vw golf 1.4 tsi 2015 85000 km", [85000]),
    ("vw golf 1.4 tsi 2015, 85 000 km", [85000]),
    ("vw golf 2015 85.000km", [85000]),
    ("ford focus 85,000 miles", [136794]),
    ("ford focus 120k miles", [193121]),
    ("1.250.000 km, runs fine", [1250000]),
    ("2015 mini cooper 45000 mi.", [72420]),
    ("new car, 10 km only", []),  # under MIN_ODOMETER: a number of the title, not a mileage
    ("motorola talkabout 22 mile radio", []),
    ("2015 mini cooper", []),
    ("tsi 2015 85000", []),  # no unit: no reading
    ("fiat panda 1.2 km 85.000 anno 2015", [85000]),  # the label before the number
    ("vw golf 2015 km 85.000", [85000]),  # the number after km, not the year before it
    ("85000 km 2015", [85000]),
    ("golf 2015 85000 km 9500", [85000]),  # the reading, then a price: not km 9500
    ("85k km 9500", [85000]),
    ("golf tsi, mileage: 120k", [120000]),  # a label without a unit: as written
    ("km 2015", []),  # a year, not a reading
])
def test_odometer_readings(text: str, km: list[int]) -> None:
    """A distance of 1,000 or more with its unit reads as an odometer reading, in kilometres,
    whatever the thousands separator; without a unit, or under a thousand, it is none."""
    from daemon.signatures import normalise_text, odometer_readings, without_odometer

    assert odometer_readings(normalise_text(text)) == km
    if km:
        rest = without_odometer(normalise_text(text))
        assert odometer_readings(rest) == [] and not {"km", "miles", "mi", "mi.", "mileage"} & set(rest.split())


def test_a_mileage_is_no_model_number_and_a_repost_with_a_higher_one_is_a_duplicate() -> None:
    """Car ads: a seller's repost that states the mileage a little higher (or the same reading
    written another way) is at least ``potential_duplicate``, with no model number, phone or number
    conflict read from the mileage; a dealer's two cars of one make, model and year whose mileages
    are far apart are kept apart ("different mileage"); a product's own distance (a radio's range,
    under a thousand) still tells two products apart."""
    from daemon.signatures import normalise_text, phone_numbers

    body = "Well maintained, full service history, new tyres."
    assert m.title_models("VW Golf 1.4 TSI 2015 85000 km") == frozenset()
    assert phone_numbers(normalise_text("VW Golf 1.4 TSI 2015 85000 km")) == []  # not the phone 201585000
    for first, again in (("VW Golf 1.4 TSI 2015 85000 km", "VW Golf 1.4 TSI 2015 86500 km"),
                         ("VW Golf 1.4 TSI 2015, 85 000 km", "VW Golf 1.4 TSI 2015, 86 500 km"),
                         ("VW Golf 1.4 TSI 2015 85.000 km", "VW Golf 1.4 TSI 2015 86.500 km"),
                         ("Toyota Corolla 2012 - 140000 km - 1st owner", "Toyota Corolla 2012 - 141200 km - 1st owner"),
                         ("Ford Focus 2012 120k miles", "Ford Focus 2012 121k miles"),
                         ("Ford Focus 2012 120,000 miles", "Ford Focus 2012 193,121 km"),
                         ("Fiat Panda 1.2 2015 km 85.000", "Fiat Panda 1.2 2015 km 86.000")):
        repost = _pair({"title": first, "body": body, "price": 9500}, {"title": again, "body": body, "price": 9300})
        assert decide(repost.score, CFG) is not None, repost.summary()
        assert not {"models", "phones", "numbers"} & set(repost.reasons), repost.summary()
    dealer = _pair({"title": "VW Golf 1.4 TSI 2015 85000 km", "body": body, "price": 9500},
                   {"title": "VW Golf 1.4 TSI 2015 140000 km", "body": body, "price": 9400})
    assert dealer.reasons["numbers"]["similarity"] == 0 and decide(dealer.score, CFG) is None, dealer.summary()
    assert "different mileage (85,000 / 140,000 km)" in dealer.summary()
    assert not m.mileages_agree(frozenset({85000}), frozenset({95000}))
    assert m.mileages_agree(frozenset({148000}), frozenset({150000}))  # a rounded high reading
    radio = _pair({"title": "Motorola Talkabout 22 mile radio"}, {"title": "Motorola Talkabout 35 mile radio"})
    assert radio.reasons["numbers"]["similarity"] == 0


@pytest.mark.parametrize(("text", "left"), [
    ("2 bed flat €1500/month", "2 bed flat"),
    ("2 bed flat - 1500 eur", "2 bed flat -"),
    ("£1,500 pcm, 2 bed", ", 2 bed"),
    ("sofa 3 seater 250€ negotiable", "sofa 3 seater negotiable"),
    ("us$ 1,500", "us"),
    ("chf 1500.- obo", "obo"),
    ("lot of 3, 250k€", "lot of 3,"),
    ("flat 1500/month", "flat"),
    ("dumbbell 10 pounds", "dumbbell 10 pounds"),  # a weight, not money
    ("sanus euro foundations efsatb", "sanus euro foundations efsatb"),  # a currency word without an amount
    ("samsung 50,000 btu", "samsung 50,000 btu"),
])
def test_amounts_of_money_are_blanked_from_a_text(text: str, left: str) -> None:
    """An amount with a currency symbol or code before or after it, or with a rent's period, is
    an amount of money; weights, currency words without an amount and bare numbers are not."""
    from daemon.signatures import without_prices

    assert " ".join(without_prices(text).split()) == left


def test_a_price_in_the_title_is_no_number_and_a_repost_whose_price_dropped_is_a_duplicate() -> None:
    """Classified ads write the price in the title. A repost whose price dropped is at least
    ``potential_duplicate``: in a record with a price an amount of money is neither a title number
    nor a model number (``€1500/month`` read as ``1500MONTH`` before), and a bare number equal to
    each record's own price, when both titles state theirs, is left to the price field. Other
    numbers still tell two items apart (64GB / 128GB at one price), and in a record without a price
    (a headline) an amount is a number like any other."""
    body = "Bright 2 bedroom flat near the metro, 2nd floor, renovated kitchen, available now."
    for first, again, p1, p2 in (("2 bed flat €1500/month", "2 bed flat €1450/month", 1500, 1450),
                                 ("2 bed flat £1,500 pcm", "2 bed flat £1,450 pcm", 1500, 1450),
                                 ("2 bed flat - 1500 EUR", "2 bed flat - 1450 EUR", 1500, 1450),
                                 ("Sofa 3 seater 250€ negotiable", "Sofa 3 seater 200€ negotiable", 250, 200),
                                 ("iPhone 12 64GB black - 450", "iPhone 12 64GB black - 420", 450, 420),
                                 ("House 3 bed - 250k", "House 3 bed - 245k", 250_000, 245_000)):
        repost = _pair({"title": first, "body": body, "price": p1}, {"title": again, "body": body, "price": p2})
        assert decide(repost.score, CFG) is not None, repost.summary()
        assert not {"models", "numbers"} & set(repost.reasons), repost.summary()
    assert m.title_models("2 bed flat €1500/month", 1500.0) == frozenset()
    assert m._title_parts("2 bed flat - 1500 EUR", 1450.0)[0] == frozenset({"2"})
    # a record without a price (a headline): an amount is what it reports, a number of its title
    assert m.title_numbers("Apple to pay $450 million") == frozenset({"450"})
    fines = _pair({"title": "Bank fined $450 million over rates"}, {"title": "Bank fined $400 million over rates"})
    assert fines.reasons["numbers"]["similarity"] == 0, fines.summary()
    other = _pair({"title": "iPhone 12 64GB black - 450", "price": 450}, {"title": "iPhone 12 128GB black - 450", "price": 450})
    assert other.reasons["numbers"]["similarity"] == 0, other.summary()
    # "250k" is the price written in thousands only where the price is 250,000
    assert m._title_parts("House 3 bed - 250k", 250_000.0)[3] == frozenset({"250"})
    assert m._title_parts("House 3 bed - 250k", 245_000.0)[3] == frozenset()
    # a number equal to the price on one side only is still a number (a spec the other omits)
    assert m.numbers_conflict_parts(m._title_parts("Sofa 3 seater - 250", 250.0), m._title_parts("Sofa 3 seater - 200", None)) == 0.0


def test_an_ordinal_is_a_number_of_its_own() -> None:
    """``2nd`` (a floor, an edition, a generation) is kept apart from a plain ``2``: one agency's
    two flats of one block at one rent, ``2 bed ... 2nd floor`` / ``4th floor``, are two flats (the
    first title's ``{2}`` was covered by the second's ``{2, 4}``: 92.6, ``duplicate``, before). The
    English and French forms of one ordinal are one number; a repost that keeps it is still one."""
    body = "Bright two bedroom flat, newly refurbished kitchen, close to Clapham Common station. Available now."
    floors = _pair({"title": "2 bed flat to rent, Clapham, £1,850 pcm, 2nd floor", "body": body, "price": 1850},
                   {"title": "2 bed flat to rent, Clapham, £1,850 pcm, 4th floor", "body": body, "price": 1850})
    assert floors.reasons["numbers"]["similarity"] == 0 and "different numbers (2nd / 4th)" in floors.summary(6)
    assert decide(floors.score, CFG) is None, floors.summary(6)
    repost = _pair({"title": "2 bed flat to rent, Clapham, £1,850 pcm, 2nd floor", "body": body, "price": 1850},
                   {"title": "2 bed flat to rent - Clapham - 2nd floor - £1,800 pcm", "body": body, "price": 1800})
    assert "numbers" not in repost.reasons and decide(repost.score, CFG) is not None, repost.summary(6)
    assert m.title_numbers("Appartement T3 Lyon 7ème") == m.title_numbers("Appartement T3 Lyon 7e") == {"3", "7th"}
    assert m.title_numbers("1st 2nd 3rd 11th 12th 21st 1er 1re 2nde") == {"1st", "2nd", "3rd", "11th", "12th", "21st"}
    assert m.numbers_conflict("The Hobbit, 2nd edition, hardback", "The Hobbit, 3rd edition, hardback") == 0.0
    # the plain number for the ordinal (4G for a 4th generation) is the same number, where the title
    # holding the ordinal does not have that plain number as well (Abt-Buy's true pair)
    assert m.numbers_conflict("Speck ToughSkin Black Case For 4th Generation iPod Nano - NN4TSBLK",
                              "4G Nano ToughSkin - Black - NN4-TS-BLK") is None
    assert m.numbers_conflict("Intel Core i5 7 gen laptop", "Intel Core i5 7th gen laptop") is None


def test_a_number_written_as_a_word_is_a_number() -> None:
    """``Two bedroom flat`` / ``Three bedroom flat`` with one agency's description scored 92.7,
    ``duplicate``; a number word standing alone is now the title's number, so they are two flats and
    ``2 bedroom`` / ``Two bedroom`` (a repost) agree. A word joined to others (``All-in-One``) and the
    French words with another common sense (``un``, ``sept``, ``neuf``) stay words."""
    body = ("Bright flat on the second floor, newly refurbished kitchen, close to the station. Available now, "
            "no pets, references required.")
    flats = _pair({"title": "Two bedroom flat to rent, Leith", "body": body, "price": 1200},
                  {"title": "Three bedroom flat to rent, Leith", "body": body, "price": 1200})
    assert "different numbers (2 / 3)" in flats.summary(6) and decide(flats.score, CFG) is None, flats.summary(6)
    repost = _pair({"title": "2 bedroom flat to rent, Leith", "body": body, "price": 1200},
                   {"title": "Two bedroom flat to rent, Leith", "body": body, "price": 1150})
    assert "numbers" not in repost.reasons and decide(repost.score, CFG) == "duplicate", repost.summary(6)
    assert m.title_numbers("Appartement trois pièces, Lyon") == {"3"}
    assert m.title_numbers("Canon PIXMA MP620 All-In-One Printer") == frozenset()
    assert m.title_numbers("Vélo neuf, une taille, sept vitesses") == frozenset()

def test_an_area_is_a_quantity_not_a_model_number() -> None:
    """``65m2`` (square metres, as ads write ``m²``) is a surface, like ``16gb`` a capacity: no
    model number, so an agency's two flats of one surface do not share a "model number"; the
    surfaces still differ as numbers of the title (``65`` / ``80``)."""
    from daemon.signatures import model_numbers

    assert model_numbers("flat t3 65m2 lyon") == [] and model_numbers("loft 120m3") == []
    assert model_numbers("kdl40v4100 lcd") == ["kdl40v4100"]  # a real model number still is one
    body = "Bright flat near the metro, renovated kitchen."
    same = _pair({"title": "Flat T3 65m2", "body": body, "price": 900}, {"title": "Flat T3 65m²", "body": body, "price": 880})
    assert "models" not in same.reasons and decide(same.score, CFG) is not None, same.summary()
    other = _pair({"title": "Flat T3 65m2", "body": body, "price": 900}, {"title": "Flat T3 80m2", "body": body, "price": 900})
    assert other.reasons["numbers"]["similarity"] == 0, other.summary()


def test_one_phone_with_and_without_its_country_code_is_the_same_phone() -> None:
    """A repost that writes the seller's number with its country code (or without the trunk
    prefix) has the same phone, by the last nine digits; another number is still a different
    phone, and ``suffix_digits = 0`` compares numbers whole, as before."""
    title = {"title": "iPhone 12 64GB black"}
    for one, other in (("06 12 34 56 78", "+33 6 12 34 56 78"), ("07700 900123", "+44 7700 900123"),
                       ("(555) 123-4567", "+1 555 123 4567"), ("0612345678", "0033612345678")):
        p = _pair({**title, "body": f"Call {one}.", "price": 450}, {**title, "body": f"Call {other}.", "price": 440})
        assert p.reasons["phones"]["similarity"] == 1.0 and decide(p.score, CFG) is not None, p.summary()
    other = _pair({**title, "body": "Call 06 12 34 56 78.", "price": 450}, {**title, "body": "Call 07 12 34 56 78.", "price": 440})
    assert other.reasons["phones"]["similarity"] == 0.0, other.summary()
    whole = ScoringConfig.from_mapping({"fields": {"phones": {"metric": "exact", "weight": 1.5, "suffix_digits": 0}}})
    assert _pair({**title, "body": "Call 06 12 34 56 78."}, {**title, "body": "Call +33 6 12 34 56 78."},
                 whole).reasons["phones"]["similarity"] == 0.0
    assert m.digit_suffixes(frozenset({"33612345678", "abc123", "12345"}), 9) == {"612345678", "abc123", "12345"}
    with pytest.raises(ConfigError, match="suffix_digits"):
        ScoringConfig.from_mapping({"fields": {"phones": {"metric": "exact", "weight": 1, "suffix_digits": -1}}})


def test_garment_sizes_tell_two_items_apart_as_colours_do() -> None:
    """A seller's dress in size M and in size L, or a hoodie in XL and XXL, are two items ("different
    size"); a lone letter names no size without its label, and a size named by one title only is no
    evidence (a repost that drops it)."""
    body = "Worn twice, like new, smoke-free home."
    for one, other, shown in (("Zara summer dress size M", "Zara summer dress size L", "(m / l)"),
                              ("Zara summer dress, taille M", "Zara summer dress, taille S", "(m / s)"),
                              ("Nike hoodie XL black", "Nike hoodie XXL black", "(xl / xxl)")):
        p = _pair({"title": one, "body": body, "price": 20}, {"title": other, "body": body, "price": 20})
        assert p.reasons["colours"]["similarity"] == 0 and decide(p.score, CFG) is None, p.summary()
        assert f"different size {shown}" in p.summary()
    for one, other in (("Zara summer dress size M", "Zara summer dress"), ("Nike hoodie XL black", "Nike hoodie size XL black"),
                       ("BMW M3 coupe", "BMW M5 coupe"), ("LG White Capacity Electric Dryer", "LG XL Capacity Electric Dryer")):
        assert m.colours_conflict(one, other) is None, (one, other)


def test_who_it_is_for_which_side_fuel_gearbox_or_bed_size_tell_two_items_apart() -> None:
    """A seller's pair of items with one title and one description, a word of one attribute swapped
    (``mens`` / ``womens``, ``left`` / ``right`` headlight, ``front`` / ``rear`` discs, ``petrol``
    / ``diesel``, ``king`` / ``queen``), scored 89-95 (``duplicate``) before; each is now two items,
    named in the summary. Two words of one value agree (``men's`` / ``mens``, French ``essence`` /
    ``petrol``), a value named by one title only or by both is no evidence, and titles worded apart
    are not otherwise equal (Abt-Buy's true pair ``Rear Control Washer`` / ``Front Load Washing
    Machine``)."""
    body = ("Genuine item, used a handful of times, no marks, all in working order. Smoke free home. Can post "
            "for £5 or collect from Bristol BS3. No time wasters please.")
    for one, other, shown in (("North Face puffer jacket mens M", "North Face puffer jacket womens M", "gender (men / women)"),
                              ("Girls school shoes size 13", "Boys school shoes size 13", "gender (girls / boys)"),
                              ("Labrador puppy black male", "Labrador puppy black female", "gender (men / women)"),
                              ("BMW E46 left headlight", "BMW E46 right headlight", "side (left / right)"),
                              ("Golf mk7 front brake discs and pads", "Golf mk7 rear brake discs and pads",
                               "position (front / rear)"),
                              ("Ford Focus 1.6 petrol 2014", "Ford Focus 1.6 diesel 2014", "fuel (petrol / diesel)"),
                              ("VW Polo 1.2 manual 2016", "VW Polo 1.2 automatic 2016", "gearbox (manual / automatic)"),
                              ("King size mattress memory foam", "Queen size mattress memory foam", "bed size (king / queen)")):
        before = _pair({"title": one, "body": body, "price": 80}, {"title": one, "body": body, "price": 80})
        p = _pair({"title": one, "body": body, "price": 80}, {"title": other, "body": body, "price": 80})
        assert decide(before.score, CFG) == "duplicate"  # the same ad twice still is one
        assert p.reasons["colours"]["similarity"] == 0 and decide(p.score, CFG) is None, p.summary(6)
        assert f"different {shown}" in p.summary(6), p.summary(6)
    for one, other in (("North Face puffer jacket, men's, M", "North Face puffer jacket mens M"),
                       ("Peugeot 208 1.2 essence 2019", "Peugeot 208 1.2 petrol 2019"),
                       ("HDMI male to female adapter", "HDMI female adapter"),
                       ("North Face puffer jacket mens M", "North Face puffer jacket M"),
                       ("LG WM0642HW 4.0 Cu Ft White Rear Control Washer - WM0642HWH",
                        "LG Electronics WM0642HW Front Load Washing Machine with 7 Washing Programs")):
        assert m.colours_conflict(one, other) is None, (one, other)
    assert m.variant_difference(frozenset({"jacket", "black", "mens"}), frozenset({"jacket", "red", "womens"}))[0] == "colour"


def test_prefix_matching_by_sets_equals_the_walk() -> None:
    """_matches_set (set look-ups, memoised prefixes) gives the walk's answer (the rule as written,
    tests/scoring_reference.py) on random codes over a small alphabet, where equal codes and
    prefixes of every length occur."""
    import random

    from scoring_reference import matches_walk

    rng = random.Random(7)
    code = lambda: "".join(rng.choice("ab1") for _ in range(rng.randint(1, 7)))
    for _ in range(3000):
        ys = frozenset(code() for _ in range(rng.randint(0, 4)))
        x, min_len = code(), rng.randint(1, 5)
        assert m._matches_set(x, ys, min_len) == matches_walk(x, ys, min_len), (x, ys, min_len)


def test_character_classes_by_regex_equal_the_per_character_tests() -> None:
    """The regular expressions normalising identifiers and finding digits keep and find exactly the
    characters str.isalnum / str.isdigit accept, over every Unicode code point."""
    every = "".join(chr(i) for i in range(0x110000) if not 0xD800 <= i < 0xE000)
    assert m._NOT_ALNUM.sub("", every) == "".join(ch for ch in every if ch.isalnum())
    assert m._normalised_uncached(["KX-FA83", "Ｆ５０", "a_b", "ⅻ²"], False) == frozenset(
        "".join(ch for ch in v.casefold() if ch.isalnum()) for v in ["KX-FA83", "Ｆ５０", "a_b", "ⅻ²"])
    for text in ("abc", "ab1", "a²", "٣x", "", "x-y.z", "ＡＢ９"):
        assert m._has_digit(text) == any(c.isdigit() for c in text), text


def test_prepared_title_codes_give_the_conflict_and_scheme_answers() -> None:
    """title_codes_verdict (codes prepared per record, one pass) answers what codes_conflict_sets and
    separate_schemes answer, on random code sets over a small alphabet (letters and digits, so that
    equal codes, prefixes of every length and all-digit codes occur) with random model numbers."""
    import random

    rng = random.Random(11)
    code = lambda: "".join(rng.choice("a12") for _ in range(rng.randint(1, 7)))
    seen = set()
    for _ in range(5000):
        ma, mb = (frozenset(code() for _ in range(rng.randint(1, 3))) for _ in range(2))
        ia, ib = (frozenset(code() for _ in range(rng.randint(0, 3))) for _ in range(2))
        min_len = rng.randint(1, 5)
        expected: bool | None = m.codes_conflict_sets(ma, mb, ia, ib, min_len)
        if expected and m.separate_schemes(ma, mb, min_len):
            expected = None
        got = m.title_codes_verdict(m.title_code_profile(ma, ia, min_len), m.title_code_profile(mb, ib, min_len))
        assert got is expected, (ma, mb, ia, ib, min_len)
        seen.add(got)
    assert seen == {False, True, None}  # every answer was exercised


def test_codes_without_digits_or_too_short_tell_a_line_s_items_apart() -> None:
    """variants_conflict: otherwise equal titles with codes the model-number rule does not see."""
    stand = "Sanus Euro Foundations Satellite Speaker Stand - {}"
    # a seller's two finishes of one stand: capitals without digits, a different last letter
    ps = _pair({"title": stand.format("EFSATB"), "price": 99}, {"title": stand.format("EFSATS"), "price": 99})
    assert ps.reasons["variants"]["similarity"] == 0 and "different code (EFSATB / EFSATS)" in ps.summary(6)
    assert decide(ps.score, CFG) is None
    assert m.variants_conflict("Sony LCS-CSQ/B Black Soft Carrying Case - LCSCSQB",
                               "Sony LCS-CSJ Black Soft Carrying Case - LCSCSJ") == 0.0
    assert m.variants_conflict("Speck SeeThru Pink Hard Shell Case For 15' MacBook - MB15PNKSEEV2",
                               "Speck SeeThru Pink Hard Shell Case For MacBook Air - MBAPNKSEE") == 0.0
    # a code of three characters is a code too (too short for a model number)
    camera = "Canon PowerShot Black 14.7 Megapixel Digital Camera - {}"
    assert m.variants_conflict(camera.format("G10"), camera.format("SD990ISB")) == 0.0
    # the same code mistyped (a doubled letter, two neighbours swapped) or cut is one item
    assert m.variants_conflict(stand.format("EFSATS"), "Sanus Euro Founddations Speaker Satellite Stand - EFSSATS") is None
    assert m.variants_conflict(stand.format("EFSATS"), stand.format("EFSTAS")) is None
    assert m.variants_conflict(stand.format("EFSAT"), stand.format("EFSATS")) is None
    assert decide(_pair({"title": stand.format("EFSATS")}, {"title": stand.format("EFSTAS")}).score, CFG) is not None
    # capitalised names are no codes when they share no series letters, nor when the title is all capitals
    assert m.variants_conflict("Panasonic VIERA 42' Plasma HDTV - TH42PZ80U", "Panasonic DUETS 42' Plasma HDTV - TH42PZ80U") is None
    assert m.variants_conflict("SANUS EURO FOUNDATIONS STAND EFSATB", "SANUS EURO FOUNDATIONS STAND EFSATS") is None
    # four capitals are an abbreviation (HDMI, HDTV), not a code; a code in one title only is no evidence
    assert m.variants_conflict("Sony 40' LCD HDTV", "Sony 40' LCD HDMI") is None
    assert m.variants_conflict(stand.format("EFSATB"), "Sanus Euro Foundations Satellite Speaker Stand") is None
    # titles worded apart are not otherwise equal: no evidence
    assert m.variants_conflict(stand.format("EFSATB"), "Sanus Black Floor Stand For Bookshelf Speakers - EFSATS") is None


def test_two_tiers_of_one_line_are_two_models() -> None:
    """variants_conflict: otherwise equal titles whose model number within its line is followed by
    different tier words (``S21`` / ``S21+``, ``12 Pro`` / ``12 Pro Max``) are two models; the same
    tier written two ways (``S21+`` / ``S21 Plus``, ``8+`` / ``8 Plus``) or a repost's added words
    are one."""
    phone = "Good condition, always in a case, with box and charger. Collection or post."
    ps = _pair({"title": "Samsung Galaxy S21 128GB black", "body": phone, "price": 400},
               {"title": "Samsung Galaxy S21+ 128GB black", "body": phone, "price": 450})
    assert ps.reasons["variants"]["similarity"] == 0 and "different model (S21 / S21 PLUS)" in ps.summary(6), ps.summary(6)
    assert decide(ps.score, CFG) is None  # a shop's two phones: no flag (92.6, duplicate, before the rule)
    pm = _pair({"title": "iPhone 12 Pro 128GB graphite", "body": phone, "price": 600},
               {"title": "iPhone 12 Pro Max 128GB graphite", "body": phone, "price": 650})
    assert "different model (12 PRO / 12 PRO MAX)" in pm.summary(6) and decide(pm.score, CFG) is None
    assert m.variants_conflict("iPhone 12 mini blue", "iPhone 12 blue") == 0.0
    assert m.variants_conflict("Xiaomi Redmi Note 9 Pro", "Xiaomi Redmi Note 9") == 0.0
    assert m.variants_conflict("iPhone 8 Plus black", "iPhone 8 black") == 0.0
    # a line number with a revision letter is one too (not a quantity), a decade is not
    six = _pair({"title": "Apple iPhone 6s 64GB Space Gray", "body": phone, "price": 450},
                {"title": "Apple iPhone 6s Plus 64GB Space Gray", "body": phone, "price": 450})
    assert "different model (6S / 6S PLUS)" in six.summary(6) and decide(six.score, CFG) is None, six.summary(6)
    assert m.variants_conflict("OnePlus 7T 128GB", "OnePlus 7T Pro 128GB") == 0.0
    assert m.variants_conflict("Xiaomi Mi 10T 128GB", "Xiaomi Mi 10T Pro 128GB") == 0.0
    assert m.variants_conflict("iPhone 6s+ 64GB", "iPhone 6s Plus 64GB") is None
    assert m.variants_conflict("Best of the 80s Plus", "Best of the 80s") is None
    # "plus" before another word is the conjunction (a headline, an ad's extra), and "4k" a quantity
    assert m.variants_conflict("Watch: New Trailer For 'Game Of Thrones' Season 4 Plus Plot Details",
                               "'Game of Thrones' season 4: Watch the new trailer") is None
    assert m.variants_conflict("Sofa 3 seater plus footstool", "Sofa 3 seater footstool") is None
    assert m.variants_conflict("Samsung 55 4K Ultra HD TV", "Samsung 55 4K HD TV") is None
    # one tier written two ways, or a repost that adds words after a punctuation mark: one model
    assert m.variants_conflict("Samsung Galaxy S21+ 128GB", "Samsung Galaxy S21 Plus 128GB") is None
    assert m.variants_conflict("iPhone 8+ 64GB", "iPhone 8 Plus 64GB") is None
    assert m.variants_conflict("iPhone 12 Pro", "iPhone 12 Pro - negotiable") is None
    assert m._variant_parts("iPhone 12, pro seller")[2] == ({"12"}, ("pro",), set())  # the comma ends the tier run
    assert m.variants_conflict("iPhone 11 Pro 64GB black", "11 iPhone Pro 64GB black") is None  # words moved
    assert m.variants_conflict("Trek Marlin 7 mountain bike", "Trek Marlin 7 mountain bike pro") is None  # describes
    # a long model number or a year is no line number; titles worded apart are not otherwise equal
    assert m.variants_conflict("MacBook Pro 13 2020", "MacBook Pro 13 2020 8GB") is None
    assert m.variants_conflict("Transcend 2GB 133x Ultra Speed Compact Flash Card - TS2GCF133",
                               "Transcend 2GB CompactFlash Card (133x) - TS2GCF133") is None
    repost = _pair({"title": "Samsung Galaxy S21+ 128GB black", "body": phone, "price": 450},
                   {"title": "Samsung Galaxy S21 Plus 128GB black - price drop", "body": phone, "price": 430})
    assert decide(repost.score, CFG) is not None, repost.summary(6)


def _title_only(title: str, **more: object) -> tuple[dict, dict]:
    """A record with a title (and ``more``) and no body, as the indexer writes it (``body`` None:
    the body's sketch is not compared, rather than the title's shingles standing for it)."""
    fields = {"title": title, "body": None, **more}
    return fields, compute_signature(fields).to_document()


def test_one_text_field_alone_that_is_not_the_same_text_is_never_auto_rejected() -> None:
    """``single_field_cap``: a short headline whose words are all in a longer one scores 100 on
    ``token_set`` with nothing else to compare; it goes to a moderator (89.9), saying so. The same
    text, or a second field counted (an equal price), is not capped; the cap can be switched off."""
    short, long_ = _title_only("Titanfall Review"), _title_only("Will 'Titanfall' Boost Xbox One? (Game Review)")
    ps = score_pair(*short, *long_, CFG)
    assert ps.reasons == {"title": {"metric": "token_set", "similarity": 1.0, "weight": 3.0}}
    assert ps.capped and ps.score == 89.9 and decide(ps.score, CFG) == "potential_duplicate"
    assert ps.summary() == "same title, nothing else to compare"
    same = score_pair(*short, *_title_only("titanfall REVIEW"), CFG)  # equal once normalised
    assert (same.score, same.capped) == (100.0, False) and decide(same.score, CFG) == "duplicate"
    priced = score_pair(*_title_only("Titanfall Review", price=40.0),
                        *_title_only("Will 'Titanfall' Boost Xbox One? (Game Review)", price=40.0), CFG)
    assert set(priced.reasons) >= {"title", "price"} and (priced.score, priced.capped) == (100.0, False)
    off = ScoringConfig.from_mapping({"single_field_cap": False})
    assert (score_pair(*short, *long_, off).score, score_pair(*short, *long_, off).capped) == (100.0, False)


def test_a_score_that_rounds_up_to_the_duplicate_threshold_is_capped_too() -> None:
    """The caps compare the rounded score, the one flags are decided on: 93.75 rounds to 93.8, a
    duplicate at a threshold of 93.8 unless capped (at 93.7, a potential duplicate)."""
    a = _title_only("Neil Young Set to Launch PonoMusic")
    b = _title_only("Neil Young to Launch Music Service PonoMusic")
    cfg = ScoringConfig.from_mapping({"duplicate_threshold": 93.8})
    ps = score_pair(*a, *b, cfg)
    assert ps.reasons["title"]["similarity"] == 0.9375  # 93.75 before rounding
    assert (ps.score, ps.capped, decide(ps.score, cfg)) == (93.7, True, "potential_duplicate")
    off = score_pair(*a, *b, ScoringConfig.from_mapping({"duplicate_threshold": 93.8, "single_field_cap": False}))
    assert (off.score, off.capped) == (93.8, False)


def test_single_field_cap_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError) as e:
        ScoringConfig.from_mapping({"single_field_cap": "yes"})
    assert "single_field_cap" in str(e.value)


def test_a_chinese_repost_is_found_and_another_model_is_not() -> None:
    """A Chinese ad's repost, written without spaces, scored 36.8 ("different model number
    (出售二手IPHONE12 / 128G黑色 转让IPHONE12)", "different text"): a run of Chinese characters glued to
    a model number made one "code" and one "word". Runs are now apart from the letters and digits
    around them and compared as character bigrams: the repost is a duplicate, the seller's iPhone 13
    is not."""
    body = "自用手机，无维修，电池健康百分之八十九，配原装充电器。"
    first = {"title": "出售二手iPhone12 128G 黑色 九成新", "body": body, "price": 3000}
    repost = _pair(first, {"title": "转让iPhone12 128G黑色 九成新 急出", "body": body, "price": 2900})
    assert repost.reasons["models"]["similarity"] == 1.0 and decide(repost.score, CFG) is not None, repost.summary(6)
    other = _pair(first, {"title": "出售二手iPhone13 128G 黑色 九成新", "body": body, "price": 3000})
    assert other.reasons["models"]["similarity"] == 0 and decide(other.score, CFG) is None, other.summary(6)
    assert m._text("出售二手iPhone12") == "出售 售二 二手 iphone12"
    white = _pair(first, {"title": "出售二手iPhone12 128G 白色 九成新", "body": body, "price": 3000})
    assert "different colour (黑色 / 白色)" in white.summary(6) and decide(white.score, CFG) != "duplicate"
