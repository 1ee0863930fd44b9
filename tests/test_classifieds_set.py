"""The generated classified-ads evaluation set (``python -m daemon.evaluation.classifieds``)."""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from pathlib import Path

import pytest

from daemon.evaluation.classifieds import build_classifieds, main


def test_the_set_is_seeded_and_its_pairs_stay_within_one_seller() -> None:
    """Same seed, same set; another seed, another; every true pair is one seller's original and
    its repost, of one category."""
    records, pairs = build_classifieds(seed=41, sellers=120)
    again, again_pairs = build_classifieds(seed=41, sellers=120)
    other, _ = build_classifieds(seed=42, sellers=120)
    assert records == again and pairs == again_pairs and records != other
    by_id = {r["id"]: r for r in records}
    assert len(by_id) == len(records) and pairs
    for a, b in pairs:
        assert a.startswith("o") and b.startswith("r")
        assert by_id[a]["user"] == by_id[b]["user"] and by_id[a]["category"] == by_id[b]["category"]


def test_the_set_holds_the_patterns_it_is_built_around() -> None:
    """Prices in titles, the three ways of writing a mileage, a phone in both writings, one seller's
    look-alike items that are no pair (the hard negatives, among them items alike but for a floor,
    a gearbox, a cut or a tier), and rooms written as a word."""
    records, pairs = build_classifieds(seed=41, sellers=400)
    titles = [r["title"] for r in records]
    assert any(t.endswith(" €") for t in titles) and any("€/month" in t or "/month" in t for t in titles)
    assert any(re.search(r"\d{5,6} km", t) for t in titles) and any(re.search(r"\d{2,3} \d{3} km", t) for t in titles)
    assert any(re.search(r"km \d{2,3}\.\d{3}", t) for t in titles)
    bodies = " ".join(r["body"] for r in records)
    assert re.search(r"Call 0[67] \d\d", bodies) and re.search(r"Call \+33 [67] \d\d", bodies)
    linked = defaultdict(set)
    for a, b in pairs:
        linked[a].add(b)
        linked[b].add(a)
    originals_by_user = defaultdict(list)
    for r in records:
        if r["id"].startswith("o"):
            originals_by_user[(r["user"], r["category"])].append(r)
    stocks = [ads for ads in originals_by_user.values() if len(ads) >= 2]
    assert len(stocks) > 50  # sellers with look-alike items of one kind, none of them a pair
    assert all(b["id"] not in linked[a["id"]] for ads in stocks for a in ads for b in ads if a is not b)
    # items alike but for one word: a floor, a gearbox, a cut, a tier
    twins = {"floor": r"\d(st|nd|rd|th) floor", "gearbox": r" (manual|automatic) ", "cut": r" (mens|womens) size"}
    for kind, pattern in twins.items():
        assert any(sum(bool(re.search(pattern, a["title"])) for a in ads) >= 2 for ads in stocks), kind
    tiers = (("iPhone 6s \\d", "iPhone 6s Plus \\d"), ("Galaxy S21 \\d", "Galaxy S21\\+ \\d"),
             ("iPhone 12 \\d", "iPhone 12 Pro \\d"))
    assert any(any(re.search(base, a["title"]) for a in ads) and any(re.search(tier, a["title"]) for a in ads)
               for ads in stocks for base, tier in tiers)
    # a flat's rooms written as a word, and a repost that writes them the other way
    flats = {r["id"]: r for r in records if r["category"] == "flat"}
    worded = lambda t: re.match(r"(One|Two|Three|Four) bed", re.sub(r"^\W*(URGENT|PRICE REDUCED|Must go!)\W*", "", t))
    assert any(worded(r["title"]) for r in flats.values())
    assert any(a in flats and bool(worded(flats[a]["title"])) != bool(worded(flats[b]["title"])) for a, b in pairs)


def test_the_command_writes_both_files_and_checks_its_options(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "out"), "--seed", "7", "--sellers", "30"]) == 0
    with (tmp_path / "out" / "records.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["id", "user", "category", "title", "body", "price"] and len(rows) > 30
    with (tmp_path / "out" / "pairs.csv").open(encoding="utf-8", newline="") as f:
        assert next(csv.reader(f)) == ["a", "b"]
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "x"), "--sellers", "0"])
    assert e.value.code == 2 and "--sellers must be at least 1" in capsys.readouterr().err
