"""Labelled record sets for the demo, evaluation and benchmarks (read at run time, never copied).

* :func:`read_records_csv` reads any records CSV with a column mapping (``title=name,...``).
* :func:`read_pairs_csv` reads true pairs.
* :func:`abt_buy` loads the shipped Abt-Buy benchmark (Köpcke, Thor, Rahm, PVLDB 2010) from
  ``../shared/data/abt-buy``: both shops' listings as one list of ads plus the true pairs.
* :func:`default_data_dir` finds ``shared/data`` beside the checkout (or ``NEARSYNC_DATA``).
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.config import FIELD_ROLES, check_field_name
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
    pairs_outside: int = 0
    """True pairs read whose two ids are not both among the records, left out of :attr:`pairs`
    (a gold standard over a larger set, or ids the records file lacks)."""


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


THROWAWAY_BASE_BYTES = 2 << 30
THROWAWAY_BYTES_PER_INPUT_BYTE = 100


def throwaway_memory_bytes(files: list[Path]) -> int:
    """The memory (bytes) to ask for a throwaway cluster that will hold the records of the CSV
    ``files``, so that it goes to ``/dev/shm`` only when that much is free there
    (:class:`daemon.db.throwaway.ThrowawayPostgres`'s ``memory_bytes``): 2 GiB (PostgreSQL's
    default ``max_wal_size`` of 1 GB of WAL, the ~40 MB of a new cluster, slack) plus 100 bytes per
    byte of input. Abt-Buy's 0.5 MB of CSV left a 23 MB database and an 80 MB data directory
    after ``evaluate`` (2026-11-29): 47 and 160 per input byte, so the bound is generous.
    A file that cannot be read counts as empty (reading it reports the error).
    """
    size = 0
    for f in files:
        with contextlib.suppress(OSError):
            size += Path(f).stat().st_size
    return THROWAWAY_BASE_BYTES + THROWAWAY_BYTES_PER_INPUT_BYTE * size


def parse_mapping(text: str | None) -> dict[str, str]:
    """Parse ``title=name,body=description,authors=authors`` into ``{field: column}``.

    A field is a role of :data:`RECORD_ROLES` or any other field name
    (:func:`daemon.config.check_field_name`: ``authors``, ``year``): such a field is stored in each
    record's document and scored when the settings give it a metric (``[dedup.fields.authors]``).

    Raises:
        ConfigError: (key ``--map``) for a malformed item, a fixed role evaluate cannot load
            (``group``, ``created_at``), or a malformed or reserved field name.
    """
    if not text:
        return {}
    out: dict[str, str] = {}
    for item in text.split(","):
        if "=" not in item:
            raise ConfigError("--map", f"expected role=column, got {item!r}")
        role, col = (x.strip() for x in item.split("=", 1))
        if role not in RECORD_ROLES:
            if role in FIELD_ROLES:
                raise ConfigError("--map", f"role {role!r} cannot be loaded by evaluate (roles: "
                                           f"{', '.join(RECORD_ROLES)}, or a field name of your own)")
            check_field_name("--map", role)
        out[role] = col
    return out


_UTF8 = ("utf-8", "utf8", "utf-8-sig", "utf8-sig")
_BOM = b"\xef\xbb\xbf"


def decode_csv(path: Path, encoding: str, delimiter: str = ",", option: str = "--records") -> str:
    """The text of a CSV file, decoded strictly.

    A UTF-8 byte-order mark is dropped when ``encoding`` is UTF-8 (spreadsheets write one).

    Raises:
        ConfigError: (key ``option``) the file cannot be read; it starts with a UTF-8 byte-order
            mark while ``encoding`` is not UTF-8; or a byte is not valid in ``encoding`` (mixed
            encodings): the message names the file, the line and the column (header name) where
            decoding failed, and the encoding.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(option, f"cannot read {path}: {e.strerror or e}") from None
    utf8 = encoding.lower().replace("_", "-") in _UTF8
    if data.startswith(_BOM):
        if not utf8:
            raise ConfigError(option, f"{path}: line 1 starts with a UTF-8 byte-order mark but --encoding is "
                                      f"{encoding}: the file is UTF-8, give --encoding utf-8")
        data = data[len(_BOM):]
    enc = "utf-8" if utf8 else encoding
    try:
        return data.decode(enc)
    except LookupError:
        raise ConfigError("--encoding", f"unknown encoding {encoding!r}") from None
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        start = data.rfind(b"\n", 0, e.start) + 1
        prefix = data[start:e.start].decode(enc, "replace")
        header = next(csv.reader([data.split(b"\n", 1)[0].decode(enc, "replace")], delimiter=delimiter), [])
        index = max(0, len(next(csv.reader([prefix + "x"], delimiter=delimiter), [""])) - 1)
        column = header[index].strip() if index < len(header) else f"#{index + 1}"
        raise ConfigError(option, f"{path}: line {line}, column {column!r}: byte {data[e.start:e.start + 1]!r} is "
                                  f"not valid {encoding} (mixed encodings? convert the file, or give the right "
                                  "--encoding)") from None


def read_records_csv(path: Path, *, mapping: Mapping[str, str], id_column: str = "id", encoding: str = "utf-8",
                     key_prefix: str = "", extra: Mapping[str, Any] | None = None, delimiter: str = ",",
                     strict: bool = False) -> list[Record]:
    """Read records from a CSV file.

    Args:
        mapping: field -> column (roles of :data:`RECORD_ROLES` or other field names, see
            :func:`parse_mapping`); unmapped fields are absent, an empty cell is None.
        id_column: the id column. encoding: file encoding.
        key_prefix: prepended to each id to make keys unique across files (e.g. ``"abt:"``).
        extra: constant fields added to every record (e.g. ``{"source": "abt"}``).
        delimiter: the field separator (one character, e.g. ``","`` or ``"%"``).
        strict: decode strictly (:func:`decode_csv`) and reject an empty or repeated id; when False
            (the shipped data sets), undecodable bytes are replaced.

    Raises:
        ConfigError: (key ``--id`` / ``--map`` / ``--records``) naming the file, line and column: a
            named column is not in the header; with ``strict``, an empty id, an id already seen (and
            where), bytes that are not valid in ``encoding``, or text that is not valid CSV (RFC 4180
            quoting: a quote opened and never closed, which would take the rest of the file as one
            value, or text after a closing quote).
    """
    if strict:
        text = decode_csv(path, encoding, delimiter)
    else:
        with path.open(newline="", encoding=encoding, errors="replace") as f:
            text = f.read()
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter, strict=strict)
    ended = [0]  # the line on which the last whole row (or the header) ended
    try:
        return _records(path, reader, mapping, id_column, key_prefix, extra, strict, ended)
    except csv.Error as e:  # strict only: a quote never closed would swallow the rest of the file
        hint = ("a quote opened there is never closed" if "end of data" in str(e)
                else 'a quote inside a quoted value is written twice, ""')
        raise ConfigError("--records", f"{path}: line {ended[0] + 1}: not valid CSV ({e}: {hint})") from None


def _records(path: Path, reader: csv.DictReader[str], mapping: Mapping[str, str], id_column: str, key_prefix: str,
             extra: Mapping[str, Any] | None, strict: bool, ended: list[int]) -> list[Record]:
    """The records of ``reader`` (:func:`read_records_csv`, which documents the arguments and the
    errors), keeping in ``ended[0]`` the line on which the last whole row ended. Raises csv.Error on
    invalid CSV when ``reader`` is strict."""
    cols = [c.strip() if c else c for c in (reader.fieldnames or [])]
    ended[0] = reader.line_num
    reader.fieldnames = cols
    if id_column not in cols:
        raise ConfigError("--id", f"{path}: line 1: no column {id_column!r} (columns: {cols})")
    for role, col in mapping.items():
        if col not in cols:
            raise ConfigError("--map", f"{path}: line 1: no column {col!r} for {role} (columns: {cols})")
    out = []
    seen: dict[str, int] = {}
    for row in reader:
        rid = (row.get(id_column) or "").strip()
        if strict:
            if not rid:
                raise ConfigError("--id", f"{path}: line {reader.line_num}, column {id_column!r}: empty id")
            if rid in seen:
                raise ConfigError("--id", f"{path}: line {reader.line_num}, column {id_column!r}: id {rid!r} "
                                          f"already on line {seen[rid]}")
            seen[rid] = reader.line_num
        fields: dict[str, Any] = {role: (row.get(col) or None) for role, col in mapping.items()}
        fields |= dict(extra or {})
        out.append(Record(f"{key_prefix}{rid}", fields))
        ended[0] = reader.line_num
    return out


def read_pairs_csv(path: Path, *, encoding: str = "utf-8", prefixes: tuple[str, str] = ("", ""),
                   delimiter: str = ",") -> set[tuple[str, str]]:
    """True pairs from a two-column CSV (header row first); returned as sorted key tuples.

    ``prefixes`` are prepended to the first and second column's ids (to match the keys of
    :func:`read_records_csv`'s ``key_prefix``). A UTF-8 byte-order mark is ignored.
    """
    with path.open(newline="", encoding="utf-8-sig" if encoding.lower().replace("_", "-") in _UTF8 else encoding,
                   errors="replace") as f:
        reader = csv.reader(f, delimiter=delimiter)
        next(reader, None)
        pairs = set()
        for row in reader:
            if len(row) >= 2 and row[0].strip() and row[1].strip():
                a, b = prefixes[0] + row[0].strip(), prefixes[1] + row[1].strip()
                pairs.add((a, b) if a <= b else (b, a))
        return pairs


def abt_buy_files(data_dir: Path) -> tuple[Path, Path, Path]:
    """The Abt-Buy files under ``data_dir/abt-buy`` that :func:`abt_buy` reads: Abt's listings,
    Buy's listings and the perfect mapping (they may not exist)."""
    d = data_dir / "abt-buy"
    return d / "Abt.csv", d / "Buy.csv", d / "abt_buy_perfectMapping.csv"


def missing_abt_buy_files(data_dir: Path | None) -> list[str]:
    """What :func:`abt_buy` would not find: the paths (as strings) of the files of
    :func:`abt_buy_files` that are not regular files, or ``["$NEARSYNC_DATA or ../shared/data"]``
    when ``data_dir`` is ``None`` (no data directory was found); ``[]`` when the set is complete.
    ``nearsync evaluate`` names these in its error, the demo in its note before it falls back to
    generated ads."""
    if data_dir is None:
        return ["$NEARSYNC_DATA or ../shared/data"]
    return [str(f) for f in abt_buy_files(data_dir) if not f.is_file()]


def abt_buy(data_dir: Path, *, limit: int | None = None) -> Dataset:
    """The Abt-Buy benchmark: Abt.csv + Buy.csv as one list (keys ``abt:<id>``, ``buy:<id>``) and
    the perfect mapping as true pairs. ``limit`` keeps the first N listings of each shop (and the
    pairs among them).

    Raises:
        FileNotFoundError: the files are not in ``data_dir/abt-buy``.
    """
    abt_csv, buy_csv, mapping_csv = abt_buy_files(data_dir)
    abt = read_records_csv(abt_csv, mapping={"title": "name", "body": "description", "price": "price"},
                           encoding="cp1252", key_prefix="abt:", extra={"source": "abt", "user": "abt"})
    buy = read_records_csv(buy_csv, mapping={"title": "name", "body": "description", "price": "price",
                                                   "category": "manufacturer"},
                           encoding="cp1252", key_prefix="buy:", extra={"source": "buy", "user": "buy"})
    if limit:
        abt, buy = abt[:limit], buy[:limit]
    keys = {r.key for r in abt + buy}
    pairs = {p for p in read_pairs_csv(mapping_csv, prefixes=("abt:", "buy:"))
             if p[0] in keys and p[1] in keys}
    return Dataset("abt-buy", abt + buy, pairs)


def write_labelled_set(out_dir: Path, columns: tuple[str, ...], records: list[dict[str, Any]],
                       pairs: set[tuple[str, str]]) -> tuple[Path, Path]:
    """Write a generated labelled set as ``nearsync evaluate`` reads one: ``out_dir/records.csv``
    (``columns`` in that order, a header first; None written as an empty cell) and
    ``out_dir/pairs.csv`` (``a,b``, the true pairs sorted), UTF-8; ``out_dir`` is created.

    Returns:
        The two paths. Raises OSError when ``out_dir`` cannot be written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    rec, pp = out_dir / "records.csv", out_dir / "pairs.csv"
    with rec.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerows([("" if r[c] is None else r[c]) for c in columns] for r in records)
    with pp.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["a", "b"])
        w.writerows(sorted(pairs))
    return rec, pp


def with_reposts(rng: random.Random, originals: list[dict[str, Any]],
                 repost: Callable[[dict[str, Any]], dict[str, Any]]) -> tuple[list[dict[str, Any]], set[tuple[str, str]]]:
    """The reposts of a generated repost set: ``originals`` shuffled and numbered ``o0``, ``o1``...
    (in place), then each reposted twice (probability 0.15), once (0.40) or not at all, by
    ``repost(original)`` (a new dict), numbered ``r0``, ``r1``... and shuffled.

    Args:
        rng: the set's seeded generator (the same calls in the same order: the same set).
        originals: the ads as dicts. repost: makes one repost of an ad.
    Returns:
        ``(reposts, pairs)``: the reposts, and the true pairs ``(original id, repost id)``.
    """
    rng.shuffle(originals)
    for k, ad in enumerate(originals):
        ad["id"] = f"o{k}"
    reposts: list[dict[str, Any]] = []
    pairs: set[tuple[str, str]] = set()
    for ad in originals:
        x = rng.random()
        for _ in range(2 if x < 0.15 else 1 if x < 0.55 else 0):
            copy = repost(ad)
            copy["id"] = f"r{len(reposts)}"
            reposts.append(copy)
            pairs.add((ad["id"], copy["id"]))
    rng.shuffle(reposts)
    return reposts, pairs
