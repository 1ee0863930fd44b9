"""The news-headlines evaluation set (``python -m daemon.evaluation.news``): records and same-story pairs."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from daemon.evaluation.news import NEWS_FILE, main, write_news_set
from data_paths import DATA_DIR, require


def _rows(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.reader(f))


def test_a_row_without_story_or_title_is_left_out_and_pairs_stay_within_stories(tmp_path: Path) -> None:
    src = tmp_path / "data" / NEWS_FILE
    src.parent.mkdir(parents=True)
    src.write_text("ID,TITLE,URL,PUBLISHER,CATEGORY,STORY,HOSTNAME,TIMESTAMP\n"
                   "1,Fed holds rates,u,P1,b,s1,h1,1\n2,\"Fed keeps rates, again\",u,P2,b,s1,h2,2\n"
                   "3,Titanfall review,u,P3,t,s2,h3,3\n4,Fed on hold,u,P4,b,s1,h4,4\n5,,u,P5,b,s2,h5,5\n"
                   "6,Cut off mid-URL,http://exa", encoding="utf-8")
    records, pairs, n, m = write_news_set(tmp_path / "data", tmp_path / "out")
    assert (n, m) == (4, 3)
    assert _rows(records)[1:] == [["1", "Fed holds rates", "P1", "h1"], ["2", "Fed keeps rates, again", "P2", "h2"],
                                  ["3", "Titanfall review", "P3", "h3"], ["4", "Fed on hold", "P4", "h4"]]
    assert _rows(pairs) == [["a", "b"], ["1", "2"], ["1", "4"], ["2", "4"]]


def test_a_missing_file_is_a_usage_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "out"), "--data", str(tmp_path)])
    assert e.value.code == 2 and str(tmp_path / NEWS_FILE) in capsys.readouterr().err


def test_the_shared_headlines_give_87_stories_and_their_pairs(tmp_path: Path) -> None:
    require(*NEWS_FILE.parts)
    records, pairs, n, m = write_news_set(DATA_DIR, tmp_path)
    story_sizes = Counter()
    with (DATA_DIR / NEWS_FILE).open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            if row.get("STORY"):
                story_sizes[row["STORY"]] += 1
    assert n == 6366 == sum(story_sizes.values()) and len(story_sizes) == 87
    assert m == sum(k * (k - 1) // 2 for k in story_sizes.values()) == 397104
    assert len(_rows(records)) == n + 1 and len(_rows(pairs)) == m + 1
