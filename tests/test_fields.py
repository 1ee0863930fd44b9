"""Fields of the user's own (issue 17, item 5): any column can be mapped, stored and scored.

Unit tests of the names, the ``numeric`` and ``date`` metrics, the value rules and the config
errors; the column's way through the daemon is in ``tests/test_dedup.py``, ``evaluate --map`` in
``tests/test_evaluate.py``, the CLI's one-line errors in ``tests/test_cli_errors.py``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from daemon.capture.documents import coerce_numbers
from daemon.config import check_field_name, settings_from_mapping
from daemon.dedup.settings import dedup_options, typed_fields
from daemon.errors import ConfigError, RecordError
from daemon.evaluation.datasets import parse_mapping
from daemon.http.models import InvalidInput, build_models, validate
from daemon.scoring import ScoringConfig, score_pair
from daemon.scoring.numbers import date_similarity, numeric_similarity, parse_date, typed_value

MAPPED = {"tracked_columns": ["title", "body", "user_id", "authors_col", "year_col", "seen_col"],
          "fields": {"title": "title", "body": "body", "user": "user_id", "authors": "authors_col",
                     "year": "year_col", "seen": "seen_col"}}
SCORED = {"fields": {"authors": {"metric": "token_set", "weight": 2.0}, "year": {"metric": "numeric", "weight": 1.0},
                     "seen": {"metric": "date", "weight": 1.0, "max_days": 10}}}


def settings(source: dict[str, Any] | None = None, dedup: dict[str, Any] | None = None) -> Any:
    return settings_from_mapping({"source": MAPPED if source is None else source, "dedup": dedup or {}}, env={})


def test_a_field_of_ones_own_is_mapped_and_typed_by_its_metric() -> None:
    s = settings(dedup=SCORED)
    assert s.source.custom_fields == ("authors", "year", "seen")
    metrics = {f.name: f.metric for f in dedup_options(s).scoring.fields}
    assert metrics.items() >= {"authors": "token_set", "year": "numeric", "seen": "date"}.items()
    assert typed_fields(s) == {"year": "numeric", "seen": "date"}
    assert typed_fields(settings()) == {}  # mapped but not scored: stored as read


@pytest.mark.parametrize(("name", "says"), [
    ("Authors", "lower-case letters"), ("2nd_author", "lower-case letters"), ("a-b", "lower-case letters"),
    ("x" * 41, "at most 40"), ("tokens", "reserved"), ("models", "reserved"), ("id", "reserved"),
])
def test_a_bad_field_name_is_one_error_naming_the_key(name: str, says: str) -> None:
    with pytest.raises(ConfigError) as e:
        settings({"tracked_columns": ["title", "c"], "fields": {"title": "title", name: "c"}})
    assert e.value.key == f"source.fields.{name}" and says in e.value.message
    with pytest.raises(ConfigError) as e:
        parse_mapping(f"title=title,{name}=c")
    assert e.value.key == "--map" and says in e.value.message
    assert check_field_name("k", "title") == "title" and check_field_name("k", "isbn_13") == "isbn_13"


@pytest.mark.parametrize(("dedup", "key", "says"), [
    ({"fields": {"authors": {"metric": "fuzzy", "weight": 1}}}, "dedup.fields.authors.metric", "must be one of"),
    ({"fields": {"authors": {"weight": 1}}}, "dedup.fields.authors.metric", "no default metric"),
    ({"fields": {"isbn": {"metric": "exact", "weight": 1}}}, "dedup.fields.isbn", "not mapped to a column"),
    ({"fields": {"year": {"metric": "numeric", "weight": 1, "tolerance": 0}}}, "dedup.fields.year.tolerance", ">"),
    ({"fields": {"year": {"metric": "numeric", "weight": 1, "relative": "yes"}}}, "dedup.fields.year.relative",
     "boolean"),
    ({"fields": {"seen": {"metric": "date", "weight": 1, "max_days": -1}}}, "dedup.fields.seen.max_days", ">"),
])
def test_a_bad_scored_field_is_one_error_naming_the_key(dedup: dict[str, Any], key: str, says: str) -> None:
    with pytest.raises(ConfigError) as e:
        dedup_options(settings(dedup=dedup))
    assert e.value.key == key and says in e.value.message, e.value
    if key == "dedup.fields.isbn":
        assert "source.fields.isbn" in e.value.message and "--map isbn=" in e.value.message


def test_fixed_roles_and_labels_need_no_mapping() -> None:
    # a fixed role not mapped is simply no evidence (as before); jaccard/geo names are labels
    dedup = {"fields": {"category": {"metric": "exact", "weight": 1}, "text2": {"metric": "jaccard", "weight": 1}}}
    assert dedup_options(settings_from_mapping({"dedup": dedup}, env={})).scoring.field("text2") is not None


def test_numeric_similarity_absolute_and_relative() -> None:
    assert numeric_similarity(1999, 1999, 2) == 1.0
    assert numeric_similarity(1999, 2000, 2) == 0.5 and numeric_similarity(2000, 1999, 2) == 0.5
    assert numeric_similarity(1999, 2001, 2) == 0.0 and numeric_similarity(1990, 2001, 2) == 0.0
    assert numeric_similarity(100, 95, 0.1, relative=True) == pytest.approx(0.5)
    assert numeric_similarity(0, 0, 0.1, relative=True) == 1.0


def test_date_parsing_and_similarity() -> None:
    assert parse_date("1970-01-02") == 1.0 and parse_date(dt.date(1970, 1, 11)) == 10.0
    assert parse_date("1970-01-01T12:00:00Z") == 0.5 == parse_date("1970-01-01 14:00:00+02:00")
    assert parse_date("1970-01-01T12:00:00") == 0.5  # no zone: UTC
    assert parse_date("  ") is None and parse_date(None) is None
    for bad in ("yesterday", "2024-13-01", 20240101, True, "2024-01-01" + "x" * 40):
        with pytest.raises(ValueError):
            parse_date(bad)
    assert date_similarity(0.0, 15.0, 30.0) == 0.5 and date_similarity(0.0, 45.0, 30.0) == 0.0


def test_typed_values_of_a_row_are_coerced_or_dead_lettered_naming_the_field() -> None:
    typed = {"year": "numeric", "seen": "date"}
    out = coerce_numbers({"title": "t", "year": "1,999", "seen": dt.date(2024, 3, 1)}, typed)
    assert out == {"title": "t", "price": None, "lat": None, "lon": None, "year": 1999.0, "seen": "2024-03-01"}
    assert coerce_numbers({"year": " ", "seen": None}, typed)["year"] is None
    for fields, name in (({"year": "MCMXCIX"}, "year"), ({"year": float("nan")}, "year"),
                         ({"seen": "last week"}, "seen"), ({"year": True}, "year")):
        with pytest.raises(RecordError) as e:
            coerce_numbers(fields, typed)
        assert str(e.value).startswith(f"{name}: "), e.value
    assert typed_value("date", "2024-03-01T10:00:00+01:00") == "2024-03-01T10:00:00+01:00"


def test_the_check_api_accepts_any_mapped_field_and_types_scored_ones() -> None:
    models = build_models(["title", "authors", "year", "seen"], reject_unknown=True, max_set=10,
                          default_threshold=0.9, typed={"year": "numeric", "seen": "date"})
    ad = validate(models.ad, {"title": "t", "authors": "A. B", "year": "2001", "seen": "2024-03-01"})
    assert ad.model_dump(exclude={"id"}) == {"title": "t", "authors": "A. B", "year": 2001.0, "seen": "2024-03-01"}
    for body, field in (({"title": "t", "year": "soon"}, "year"), ({"title": "t", "seen": 3}, "seen")):
        with pytest.raises(InvalidInput) as e:
            validate(models.ad, body)
        assert e.value.field == field


def test_any_text_metric_scores_a_field_of_ones_own() -> None:
    a = {"title": "Query optimisation in practice", "authors": "Jane Smith, Li Wei", "year": 1999.0,
         "venue": "VLDB", "seen": "2024-03-01"}
    b = {"title": "Query optimisation in practice", "authors": "Li Wei, Jane Smith", "year": 2000.0,
         "venue": "VLDB Journal", "seen": "2024-03-06T00:00:00Z"}
    for metric in ("token_set", "jaro_winkler", "levenshtein", "exact"):
        cfg = ScoringConfig.from_mapping({"fields": {"title": {"metric": "token_set", "weight": 3},
                                                     "venue": {"metric": metric, "weight": 1}}})
        r = score_pair(a, {}, b, {}, cfg)
        assert r.reasons["venue"]["metric"] == metric, metric
        sim = r.reasons["venue"]["similarity"]
        assert sim == {"token_set": 1.0, "exact": 0.0}[metric] if metric in ("token_set", "exact") else 0.3 < sim < 1.0
    cfg = ScoringConfig.from_mapping(SCORED)
    r = score_pair(a, {}, b, {}, cfg)
    assert r.reasons["authors"]["similarity"] == 1.0 and r.reasons["year"]["similarity"] == 0.5
    assert r.reasons["seen"]["similarity"] == 0.5
    assert r.details["authors"] == "same authors" and r.details["year"] == "year 1999 / 2000"
    assert r.details["seen"] == "seen 5 days apart"
    # missing or blank on either side: no evidence
    for missing in ({"year": None, "seen": "", "authors": "  "}, {"year": "n/a", "seen": "soon"}):
        r = score_pair(a | missing, {}, b, {}, cfg)
        assert not {"year", "seen"} & set(r.reasons)
    assert "authors" not in score_pair(a | {"authors": " "}, {}, b, {}, cfg).reasons
