"""Normalisation, tokenisation, entity extraction and configuration validation."""

from __future__ import annotations

import pytest

from daemon.errors import ConfigError
from daemon.signatures import (
    SignatureParams,
    TextOptions,
    emails,
    model_numbers,
    normalise_text,
    phone_numbers,
    sentences,
    tokens,
)
from daemon.signatures.extract import is_calendar, is_price, title_codes

RAW = TextOptions(stem=False, stopwords=False)


def test_normalise_nfkc_case_markup_accents() -> None:
    assert normalise_text("<p>Caf&eacute; <b>ÉTÉ</b></p>") == "cafe ete"
    assert normalise_text("ﬁne Ｆｕｌｌ") == "fine full"  # NFKC ligature and full-width forms
    assert normalise_text("Straße") == "strasse"  # case folding
    assert normalise_text("Crème", fold_accents=False) == "crème"
    assert normalise_text("a<script>var x = 1;</script>b") == "a b"
    assert normalise_text("  many \t\n spaces ") == "many spaces"


def test_model_numbers_survive_tokenisation() -> None:
    toks = tokens("Sony Bravia KDL-40V4100 and EZXS88W", RAW)
    assert "kdl-40v4100" in toks and "kdl40v4100" in toks
    assert "ezxs88w" in toks
    assert tokens("33-1/3 RPM, 2.5 inch", RAW)[:1] == ["33-1/3"]
    assert "2.5" in tokens("2.5 inch", RAW)
    assert tokens("wide-range drivers", RAW) == ["wide", "range", "drivers"]


def test_stopwords_stemming_languages_and_synonyms() -> None:
    assert tokens("The speakers of the house") == ["speaker", "hous"]
    assert tokens("Les enceintes de la maison", TextOptions(language="french")) == ["enceint", "maison"]
    assert tokens("été", TextOptions(language="french", stem=False)) == []  # folded stop word
    # German, Spanish and Italian sites: their function words dropped, their Snowball stemmers
    assert tokens("Verkaufe meinen Golf mit neuen Reifen", TextOptions(language="german")) == [
        "verkauf", "mein", "golf", "neu", "reif"]
    assert tokens("Vendo mi coche con neumáticos nuevos", TextOptions(language="spanish")) == [
        "vend", "coch", "neumat", "nuev"]
    assert tokens("Vendo la mia auto con gomme nuove", TextOptions(language="italian")) == [
        "vend", "mia", "aut", "gomm", "nuov"]
    assert SignatureParams.from_mapping({"fields": {"title": {"language": "german"}}}).text_options("title").language == "german"
    opts = TextOptions(stem=False, synonyms=(("st.", "saint"), ("cathedral", "cathedral church")))
    assert tokens("St. Fin Barre's Cathedral", opts) == ["saint", "fin", "barre", "cathedral", "church"]
    with pytest.raises(ValueError):
        TextOptions(language="klingon")


def test_tokens_of_degenerate_text() -> None:
    for text in ("", "   ", "!!! ... ???", "😀🎉👍", "\x00\x00", "\ud800\udfff"):
        assert tokens(text) == []
    assert tokens("abc\x00def") == ["abc", "def"]
    assert tokens("caf\ud800e") == ["caf", "e"]
    with pytest.raises(TypeError):
        normalise_text(None)  # type: ignore[arg-type]


def test_chinese_and_japanese_runs_become_bigrams_apart_from_latin_codes() -> None:
    """Chinese and Japanese put no space between words: a run of their characters is split from the
    letters and digits around it and tokenised as its character bigrams (as Lucene's CJK analyzer
    does), so a model number glued to it (``出售二手iPhone12``) is found, and two texts sharing most
    words share most tokens; accents are folded, not the kana's voicing marks (``ブ`` stays, not ``フ``).
    Other scripts and ASCII text tokenise as before."""
    text = "出售二手iPhone12 128G 黑色，自用手机。"
    assert tokens(text, RAW) == ["出售", "售二", "二手", "iphone12", "128g", "黑色", "自用", "用手", "手机"]
    assert "IPHONE12" in {m.upper() for m in model_numbers(text)}
    assert tokens("【美品】iPhone12 ブラック・SIMフリー", RAW) == [
        "美品", "iphone12", "ブラ", "ラッ", "ック", "sim", "フリ", "リー"]
    assert normalise_text("ブラック バッグ パソコン café") == "ブラック バッグ パソコン cafe"  # a voicing mark is no accent
    assert tokens("Продам iPhone 12, café", RAW) == ["продам", "iphone", "12", "cafe"]
    assert tokens("кофе-машина kdl-40v4100", RAW) == ["кофе", "машина", "kdl-40v4100", "kdl40v4100"]


def test_a_number_with_thousands_separators_is_one_token_without_them() -> None:
    """``85,000`` (English), ``85.000`` (German, Spanish) and ``85000`` are one token, so another
    site's copy of an ad or a repost that writes its numbers the other way shares its shingles; a
    decimal number and a run of separators that is no grouping stay as they were."""
    assert tokens("85,000 miles", RAW) == tokens("85.000 miles", RAW) == tokens("85000 miles", RAW) == ["85000", "miles"]
    assert tokens("£1,850 pcm", RAW) == ["1850", "pcm"] and tokens("1,234,567", RAW) == ["1234567"]
    assert tokens("1.4 TSI", RAW) == ["1.4", "tsi"] and tokens("3,5 t", RAW) == ["3", "5", "t"]
    assert tokens("2.000,50", RAW) == ["2.000", "50"] and tokens("10,5,12", RAW) == ["10", "5", "12"]


def test_sentences() -> None:
    assert sentences("one two. three four! five/ six\nseven") == ["one two.", "three four!", "five", "six", "seven"]


def test_extraction() -> None:
    text = normalise_text("Sony KDL-40V4100, call +33 6 12-34-56-78 or (555) 123-4567; mail Jean.Dupont@Example.FR. Year 2008, 5-1/2' woofers")
    assert model_numbers(text) == ["kdl40v4100"]
    assert phone_numbers(text) == ["33612345678", "5551234567"]
    assert emails(text) == ["jean.dupont@example.fr"]
    assert phone_numbers("price 1234567") == []  # 7 digits: not a phone
    assert model_numbers("ab1") == []  # shorter than 4
    assert model_numbers("40in 16gb 1080p 2nd 128mb") == []  # quantities, not models


@pytest.mark.parametrize(("text", "phones"), [
    # national and international writings of phones (FR, UK, US, ES, IT, IN, NO, DE) stay phones
    ("call 06 12 34 56 78", ["0612345678"]), ("+33 6 12 34 56 78", ["33612345678"]),
    ("call 07700 900123", ["07700900123"]), ("+44 7700 900123", ["447700900123"]),
    ("(201) 555-0123", ["2015550123"]), ("612 345 678", ["612345678"]), ("tel: 91 123 45 67", ["911234567"]),
    ("347 1234567", ["3471234567"]), ("98765 43210", ["9876543210"]), ("4123 4567", ["41234567"]),
    ("030 12345678", ["03012345678"]), ("0612345678", ["0612345678"]), ("+45 2012 3456", ["4520123456"]),
    # a year before a phone is not part of it
    ("vw golf 2015 06 12 34 56 78", ["0612345678"]),
    # numbers side by side in a title are not a phone: a year and a mileage or a price, a rent and
    # a postcode, two years, a mileage and a price, a part number of six and four digits
    ("vw golf 2015 85000", []), ("vw golf 2015 9500", []), ("2 bed flat 1500 75011 paris", []),
    ("lot of 12 dvds 1995 2005", []), ("renault clio 2012 120000 9000", []), ("golf 2015 85000 km 9500", []),
    ("logitech harmony 890 remote - 966193-0403", []),
])
def test_phone_numbers_are_grouped_as_phones(text: str, phones: list[str]) -> None:
    """A run of digit groups is a phone when grouped as phones are written (``_phone_shaped``), a
    year in front of it left out; numbers that merely stand side by side in a title are none."""
    assert phone_numbers(normalise_text(text)) == phones


@pytest.mark.parametrize(("word", "calendar"), [
    ("3/10/14", True), ("10.03.2014", True), ("31-12-1999", True), ("2014-03-10", True), ("2024/11/27", True),
    ("2006-2011", True), ("2006-11", True), ("1951-1993", True),
    ("13/13/14", False), ("32/01/14", False), ("3/10-14", False), ("2014-13-01", False), ("2014-02-32", False),
    ("12.345.678", False), ("3780001", False), ("33-1/3", False), ("45-67-89", False), ("1-2-3-4-5", False),
    ("1850-1900", False), ("2006-2011-2015", False)])
def test_dates_and_year_spans_are_no_catalogue_numbers(word: str, calendar: bool) -> None:
    """A date (day-month-year either way round, or year-month-day) or a span of years is recognised by
    the calendar's ranges, and only then left out of the title's codes."""
    assert is_calendar(word) is calendar
    codes = title_codes(normalise_text(f"Brake pads {word} kit"))
    joined = word.replace("/", "").replace("-", "").replace(".", "")
    assert (joined in codes) is (not calendar and 5 <= len(joined) <= 12)


# ----------------------------------------------------------------------------------- configuration


def test_defaults_and_round_values() -> None:
    assert SignatureParams.from_mapping({}) == SignatureParams()
    assert SignatureParams.from_mapping(None) == SignatureParams()
    p = SignatureParams.from_mapping(
        {
            "fields": {"title": {"language": "french", "synonyms": {"st.": "saint"}}, "extra": {"stem": False}},
            "minhash": {"num_perm": 64},
            "lsh": {"threshold": 0.8},
            "simhash": {"blocks": 6, "max_distance": 3},
            "super": {"rules": [["title", "geo"], ["user", "model"]]},
            "seed": 42,
        }
    )
    assert p.num_perm == 64 and p.bands_rows[0] * p.bands_rows[1] <= 64
    assert p.text_options("title").language == "french"
    assert p.extra_fields == ("extra",)
    assert p.fingerprint() != SignatureParams().fingerprint()
    assert SignatureParams().fingerprint() == SignatureParams.from_mapping({}).fingerprint()
    assert len(SignatureParams().fingerprint()) == 12


@pytest.mark.parametrize(
    ("config", "key", "fragment"),
    [
        ({"minhash": {"num_perm": "x"}}, "signatures.minhash.num_perm", "must be a positive integer, got 'x'"),
        ({"minhash": {"num_perm": 0}}, "signatures.minhash.num_perm", "between 1 and"),
        ({"minhash": {"num_perms": 3}}, "signatures.minhash.num_perms", "unknown key"),
        ({"bogus": 1}, "signatures.bogus", "unknown key"),
        ({"lsh": {"threshold": 1.5}}, "signatures.lsh.threshold", "between 0 and 1"),
        ({"lsh": {"bands": 4}}, "signatures.lsh.rows", "together"),
        ({"lsh": {"bands": 20, "rows": 10}}, "signatures.lsh.rows", "exceeds"),
        ({"lsh": {"keys": "no"}}, "signatures.lsh.keys", "true or false"),
        ({"lsh": {"keys": 0}}, "signatures.lsh.keys", "true or false"),
        ({"fields": {"title": {"language": "klingon"}}}, "signatures.fields.title.language", "one of"),
        ({"fields": {"body": {"stem": "yes"}}}, "signatures.fields.body.stem", "true or false"),
        ({"fields": {"body": {"colour": 1}}}, "signatures.fields.body.colour", "unknown key"),
        ({"fields": {"title": {"synonyms": {"st": 3}}}}, "signatures.fields.title.synonyms.st", "non-empty"),
        ({"simhash": {"features": "trigrams"}}, "signatures.simhash.features", "one of"),
        ({"simhash": {"blocks": 4, "max_distance": 4}}, "signatures.simhash.max_distance", "between 0 and 3"),
        ({"geohash": {"precision": 13}}, "signatures.geohash.precision", "between 1 and 12"),
        ({"super": {"rules": [["title", "price"]]}}, "signatures.super.rules[0]", "one of"),
        ({"super": {"rules": "title"}}, "signatures.super.rules", "list"),
        ({"bottomk": {"k": True}}, "signatures.bottomk.k", "positive integer"),
        ({"seed": -1}, "signatures.seed", "between 0"),
        ({"shingles": 3}, "signatures.shingles", "mapping"),
    ],
)
def test_config_errors_name_the_key(config: dict, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        SignatureParams.from_mapping(config)
    assert info.value.key == key
    assert key in str(info.value)
    assert fragment in info.value.message


def test_lsh_keys_setting_and_its_fingerprint() -> None:
    """``lsh.keys``: true is the default and its fingerprint; false is another fingerprint, which
    the LSH layout (no longer producing any key) does not change."""
    on = SignatureParams.from_mapping({"lsh": {"keys": True}})
    off = SignatureParams.from_mapping({"lsh": {"keys": False}})
    assert on == SignatureParams() and on.fingerprint() == SignatureParams().fingerprint()
    assert off.lsh_keys is False and off.fingerprint() != on.fingerprint()
    assert off.bands_rows == on.bands_rows  # the MinHash layout itself is unchanged
    for lsh in ({"keys": False, "threshold": 0.8}, {"keys": False, "bands": 1, "rows": 128}):
        assert SignatureParams.from_mapping({"lsh": lsh}).fingerprint() == off.fingerprint()
    assert SignatureParams.from_mapping({"lsh": {"threshold": 0.8}}).fingerprint() != on.fingerprint()


def test_config_prefix_is_used() -> None:
    with pytest.raises(ConfigError) as info:
        SignatureParams.from_mapping({"minhash": {"num_perm": -3}}, prefix="dedup.signatures")
    assert info.value.key == "dedup.signatures.minhash.num_perm"


def test_word_cache_overflow_does_not_lose_tokens(monkeypatch) -> None:
    """Regression: the memo was cleared before its final lookup when it overflowed (KeyError)."""
    from daemon.signatures import text as text_mod

    monkeypatch.setattr(text_mod, "WORD_CACHE_SIZE", 5)
    opts = text_mod.TextOptions()
    words = [f"listing{i}" for i in range(20)]
    assert text_mod.tokens_from_words(words, opts) == text_mod.tokens_from_words(list(words), opts)
    assert len(text_mod.tokens_from_words(words, opts)) == 20


def test_memo_overflow_with_known_and_new_pieces(monkeypatch) -> None:
    """Regression: a text mixing memoised and new pieces that overflows the memo lost the memoised
    ones (KeyError 'listing' in the 1,000,000-change backpressure run)."""
    from daemon.signatures import extract as extract_mod
    from daemon.signatures import text as text_mod

    monkeypatch.setattr(text_mod, "WORD_CACHE_SIZE", 10)
    monkeypatch.setattr(extract_mod, "PIECE_CACHE_SIZE", 10)
    opts = text_mod.TextOptions(stem=False, stopwords=False)
    first = ["listing", "model", "kdl-40v4100"]
    assert text_mod.tokens_from_words(first, opts) == ["listing", "model", "kdl-40v4100", "kdl40v4100"]
    assert extract_mod.model_numbers_from_words(first) == ["kdl40v4100"]
    later = first + [f"word{i}" for i in range(12)]  # known pieces + enough new ones to overflow
    assert text_mod.tokens_from_words(later, opts)[:4] == ["listing", "model", "kdl-40v4100", "kdl40v4100"]
    assert extract_mod.model_numbers_from_words(later)[0] == "kdl40v4100"


def test_final_form_memo_gives_the_unmemoised_tokens(monkeypatch) -> None:
    """The token -> stem memo under the piece memo changes no token: punctuated pieces sharing a
    token, stop words, model numbers and a memo that overflows give what a fresh process gives."""
    from daemon.signatures import text as text_mod

    opts = text_mod.TextOptions()
    pieces = ["running,", "(running)", "running", "the", "the,", "kdl-40v4100.", "wide-range"]
    expected = [w for t in text_mod._expand(text_mod.words(" ".join(pieces)))
                for w in [text_mod._final_form(t, opts)] if w]
    text_mod._candidate_cache(opts).clear()
    text_mod._final_form_cache(opts).clear()
    assert text_mod.tokens_from_words(pieces, opts) == expected
    assert text_mod._final_form_cache(opts)["running"] == "run"
    monkeypatch.setattr(text_mod, "WORD_CACHE_SIZE", 3)
    text_mod._candidate_cache(opts).clear()
    assert text_mod.tokens_from_words(pieces + [f"listing{i}" for i in range(6)], opts)[:len(expected)] == expected
    assert len(text_mod._final_form_cache(opts)) <= 4


@pytest.mark.parametrize(("word", "price", "is_it"), [
    ("45000", 45000.0, True), ("45.000", 45000.0, True), ("1299.99", 1299.99, True), ("12999", 12999.0, True),
    ("45000", 45000.004, True), ("45000", 45000.01, False), ("45000", None, False), ("1299.99", 129999.0, True),
    ("3780001", 399.0, False), ("12.345.678", 12.345, False), ("2014-03-10", 20140310.0, True)])
def test_a_title_number_equal_to_the_records_price_is_that_price(word: str, price: float | None, is_it: bool) -> None:
    """Its digits, or the word read as one decimal number, equal the price to the cent."""
    joined = word.replace(".", "").replace("-", "").replace("/", "")
    assert is_price(word, joined, price) is is_it
    if price is not None and not is_calendar(word):
        assert (joined in title_codes(normalise_text(f"Phone {word}"), price=price)) is not is_it
