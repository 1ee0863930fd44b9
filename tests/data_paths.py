"""Where the shared test data lives (``../shared/data`` beside the repository) and small loaders.

Tests call :func:`require` (or the loaders), which skip with a clear reason when the data is absent.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"
"""``<repo>/../shared/data``: read at run time, never copied into the project."""


def require(*parts: str) -> Path:
    """Path of a shared data file; skips the calling test when it does not exist."""
    path = DATA_DIR.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data file {path} is absent (expected ../shared/data beside the repository)")
    return path


def read_csv(*parts: str, encoding: str = "cp1252") -> list[dict[str, str]]:
    """Rows of a shared CSV file as dicts (Abt-Buy files are cp1252 / latin-1, quoted, CRLF)."""
    with open(require(*parts), encoding=encoding, errors="replace", newline="") as f:
        return list(csv.DictReader(f))


def abt_buy_descriptions() -> list[str]:
    """Non-empty product descriptions of Abt.csv then Buy.csv, in file order."""
    rows = read_csv("abt-buy", "Abt.csv") + read_csv("abt-buy", "Buy.csv")
    return [r["description"].strip() for r in rows if (r.get("description") or "").strip()]


def abt_buy_records() -> list[dict[str, str]]:
    """Abt and Buy rows as ``{"title", "body"}`` records (name → title, description → body)."""
    rows = read_csv("abt-buy", "Abt.csv") + read_csv("abt-buy", "Buy.csv")
    return [{"title": r.get("name") or "", "body": r.get("description") or ""} for r in rows]


def texts_of_words(n_words: int, count: int) -> list[str]:
    """Up to ``count`` texts of exactly ``n_words`` words, built by concatenating consecutive real
    Abt-Buy descriptions (each description used once)."""
    out: list[str] = []
    words: list[str] = []
    for desc in abt_buy_descriptions():
        words.extend(desc.split())
        if len(words) >= n_words:
            out.append(" ".join(words[:n_words]))
            words = []
            if len(out) >= count:
                break
    return out


def news_records() -> list[dict[str, str]]:
    """The news-stories rows (UCI News Aggregator, first 6,367) as records: headline → title, the
    publisher → body, the category letter → category, the host name → user."""
    rows = read_csv("news-stories", "uci-news-aggregator_first6367rows.csv", encoding="utf-8")
    return [{"title": r.get("TITLE") or "", "body": r.get("PUBLISHER") or "", "category": r.get("CATEGORY") or "",
             "user": r.get("HOSTNAME") or ""} for r in rows]
