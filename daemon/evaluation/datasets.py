"""Labelled record sets for the demo, evaluation and benchmarks (read at run time, never copied).

* :func:`read_records_csv` reads any records CSV with a column mapping (``title=name,...``).
* :func:`read_pairs_csv` reads true pairs.
* :func:`abt_buy` loads the shipped Abt-Buy benchmark (Köpcke, Thor, Rahm, PVLDB 2010) from
  ``../shared/data/abt-buy``: both shops' listings as one list of ads plus the true pairs.
* :func:`default_data_dir` finds ``shared/data`` beside the checkout (or ``NEARSYNC_DATA``).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.errors import ConfigError

RECORD_ROLES = ("title", "body", "price", "category", "user", "lat", "lon", "source")


@dataclass
class Record:
    """One labelled record: ``key`` is its id in the source file (``source:id`` when merged)."""

    key: str
    fields: dict[str, Any]


@dataclass
class Dataset:
    """Records plus true pairs (unordered pairs of record keys)."""

    name: str
    records: list[Record]
    pairs: set[tuple[str, str]] = field(default_factory=set)


def default_data_dir() -> Path | None:
    """``$NEARSYNC_DATA``, else ``../shared/data`` beside the checkout (or the CWD); None if absent."""
    env = os.environ.get("NEARSYNC_DATA")
    if env:
        return Path(env) if Path(env).is_dir() else None
    here = Path(__file__).resolve().parents[2]
    for candidate in (here.parent / "shared" / "data", Path.cwd().parent / "shared" / "data", Path.cwd() / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    return None


def parse_mapping(text: str | None) -> dict[str, str]:
    """Parse ``title=name,body=description`` into ``{role: column}``.

    Raises:
        ConfigError: (key ``--map``) for a malformed item or an unknown role.
    """
    if not text:
        return {}
    out: dict[str, str] = {}
    for item in text.split(","):
        if "=" not in item:
            raise ConfigError("--map", f"expected role=column, got {item!r}")
        role, col = (x.strip() for x in item.split("=", 1))
        if role not in RECORD_ROLES:
            raise ConfigError("--map", f"unknown role {role!r} (roles: {', '.join(RECORD_ROLES)})")
        out[role] = col
    return out


def read_records_csv(path: Path, *, mapping: Mapping[str, str], id_column: str = "id", encoding: str = "utf-8",
                     key_prefix: str = "", extra: Mapping[str, Any] | None = None) -> list[Record]:
    """Read records from a CSV file.

    Args:
        mapping: role -> column (roles as in :data:`RECORD_ROLES`); unmapped roles are absent.
        id_column: the id column. encoding: file encoding (undecodable bytes are replaced).
        key_prefix: prepended to each id to make keys unique across files (e.g. ``"abt:"``).
        extra: constant fields added to every record (e.g. ``{"source": "abt"}``).

    Raises:
        ConfigError: (key ``--id`` / ``--map``) when a named column is not in the file.
    """
    with path.open(newline="", encoding=encoding, errors="replace") as f:
        reader = csv.DictReader(f)
        cols = set(reader.fieldnames or [])
        if id_column not in cols:
            raise ConfigError("--id", f"{path.name} has no column {id_column!r} (columns: {sorted(cols)})")
        for role, col in mapping.items():
            if col not in cols:
                raise ConfigError("--map", f"{path.name} has no column {col!r} for {role} (columns: {sorted(cols)})")
        out = []
        for row in reader:
            fields: dict[str, Any] = {role: (row.get(col) or None) for role, col in mapping.items()}
            fields |= dict(extra or {})
            out.append(Record(f"{key_prefix}{row[id_column].strip()}", fields))
        return out


def read_pairs_csv(path: Path, *, encoding: str = "utf-8", prefixes: tuple[str, str] = ("", "")) -> set[tuple[str, str]]:
    """True pairs from a two-column CSV (header row first); returned as sorted key tuples."""
    with path.open(newline="", encoding=encoding, errors="replace") as f:
        reader = csv.reader(f)
        next(reader, None)
        pairs = set()
        for row in reader:
            if len(row) >= 2 and row[0].strip() and row[1].strip():
                a, b = prefixes[0] + row[0].strip(), prefixes[1] + row[1].strip()
                pairs.add((a, b) if a <= b else (b, a))
        return pairs


def abt_buy(data_dir: Path, *, limit: int | None = None) -> Dataset:
    """The Abt-Buy benchmark: Abt.csv + Buy.csv as one list (keys ``abt:<id>``, ``buy:<id>``) and
    the perfect mapping as true pairs. ``limit`` keeps the first N listings of each shop (and the
    pairs among them).

    Raises:
        FileNotFoundError: the files are not in ``data_dir/abt-buy``.
    """
    d = data_dir / "abt-buy"
    abt = read_records_csv(d / "Abt.csv", mapping={"title": "name", "body": "description", "price": "price"},
                           encoding="cp1252", key_prefix="abt:", extra={"source": "abt", "user": "abt"})
    buy = read_records_csv(d / "Buy.csv", mapping={"title": "name", "body": "description", "price": "price",
                                                   "category": "manufacturer"},
                           encoding="cp1252", key_prefix="buy:", extra={"source": "buy", "user": "buy"})
    if limit:
        abt, buy = abt[:limit], buy[:limit]
    keys = {r.key for r in abt + buy}
    pairs = {p for p in read_pairs_csv(d / "abt_buy_perfectMapping.csv", prefixes=("abt:", "buy:"))
             if p[0] in keys and p[1] in keys}
    return Dataset("abt-buy", abt + buy, pairs)
