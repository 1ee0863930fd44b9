"""``nearsync compare``: the score, flag and per-field reasons of two records, offline.

What a moderator or an integrator asks when tuning: what would the dedup worker make of these two
ads, and why? The two records are scored exactly as the worker scores a candidate pair
(:func:`daemon.scoring.score_pair` on the signatures the indexer would compute, with the profile and
the ``[signatures]`` / ``[dedup]`` settings of the configuration), without a database, an index or a
corpus snapshot: token rarity and the common-code rule, which need the snapshot of an indexed
table, are left out, so a pair's score can differ from the worker's by the rarity share of the
title (a quarter of it at most, ``[dedup] rarity``).

With ``--ids`` the two records are instead two indexed documents of the tracked table
(:func:`compare_indexed`): their fields and signatures as the index holds them and the table's
active corpus snapshot, so the score is the one the worker gives the pair now.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from daemon.backends.base import IndexBackend
from daemon.capture.documents import coerce_numbers
from daemon.config import Settings
from daemon.db import rarity as rarity_store
from daemon.dedup.settings import dedup_options, typed_fields
from daemon.errors import ConfigError, RecordError
from daemon.scoring import PairScore, ScoringConfig, decide, score_pair
from daemon.signatures import SignatureParams, compute_signature


@dataclass(frozen=True)
class Comparison:
    """The outcome of :func:`compare_records`.

    Attributes:
        score: the pair score, 0-100. decision: ``"duplicate"``, ``"potential_duplicate"`` or None.
        summary: the moderator's one-line explanation (as stored with a link).
        reasons: field -> ``{"metric", "similarity" (0-1), "weight", ...}`` (as stored with a link).
        duplicate_threshold / potential_threshold: the thresholds the decision used (0-100).
        snapshot: the version of the corpus snapshot scored with (:func:`compare_indexed`), or None.
    """

    score: float
    decision: str | None
    summary: str
    reasons: dict[str, dict[str, Any]]
    duplicate_threshold: float
    potential_threshold: float
    snapshot: int | None = None

    @classmethod
    def of(cls, pair: PairScore, cfg: ScoringConfig) -> Comparison:
        """The comparison of a scored pair under ``cfg`` (its thresholds and snapshot)."""
        return cls(score=pair.score, decision=decide(pair.score, cfg), summary=pair.summary(), reasons=pair.reasons,
                   duplicate_threshold=cfg.duplicate_threshold, potential_threshold=cfg.potential_threshold,
                   snapshot=None if cfg.snapshot is None else cfg.snapshot.version)

    def as_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every attribute."""
        return {"score": self.score, "decision": self.decision, "summary": self.summary, "reasons": self.reasons,
                "duplicate_threshold": self.duplicate_threshold, "potential_threshold": self.potential_threshold,
                "snapshot": self.snapshot}


def read_record(value: str, name: str) -> dict[str, Any]:
    """One record from the command line: a JSON object, given inline or as ``@FILE``.

    Args:
        value: ``'{"title": "...", "price": 450}'`` or ``@path/to/record.json``.
        name: the argument's name for errors (``A`` or ``B``).
    Returns:
        The object, its keys the record's fields by role (``title``, ``body``, ``price``, ``lat``,
        ``lon``, ``user``, ``category`` or any field ``[dedup.fields]`` scores).
    Raises:
        ConfigError: the file cannot be read, the text is not JSON, or it is not an object.
    """
    text = value
    if value.startswith("@"):
        try:
            text = Path(value[1:]).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(name, f"cannot read {value[1:]}: {e.strerror or e}") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(name, f"is not JSON ({e.msg} at character {e.pos}): give an object such as "
                                f"'{{\"title\": \"iPhone 12 64GB\", \"price\": 450}}' or @FILE") from None
    if not isinstance(record, dict):
        raise ConfigError(name, f"must be a JSON object of fields, got {type(record).__name__}")
    return record


def compare_records(settings: Settings, a: dict[str, Any], b: dict[str, Any]) -> Comparison:
    """Score two records as the dedup worker scores a candidate pair (module docstring).

    Args:
        settings: the configuration (profile applied): its ``[signatures]`` sign the two records,
            its ``[dedup]`` fields, weights and thresholds score them.
        a, b: the records' fields by role (:func:`read_record`); ``a`` counts as the earlier one.
            A mapped field a record lacks is None, as the indexer reads a NULL column.
    Returns:
        A :class:`Comparison`.
    Raises:
        ConfigError: an invalid ``[signatures]`` or ``[dedup]`` setting (the key is named), or a
            value the indexer would dead-letter (key ``A`` or ``B``: a price that is not a number, a
            latitude out of range).
    """
    params = SignatureParams.from_mapping(settings.signatures)
    cfg = dedup_options(settings).scoring
    a, b = _as_indexed(settings, a, "A"), _as_indexed(settings, b, "B")
    pair: PairScore = score_pair(a, compute_signature(a, params).to_document(),
                                 b, compute_signature(b, params).to_document(), cfg)
    return Comparison.of(pair, cfg)


async def compare_indexed(settings: Settings, backend: IndexBackend, conn: psycopg.AsyncConnection[Any],
                          a_id: str, b_id: str) -> Comparison:
    """Score two indexed records of the tracked table as the dedup worker scores the pair now: their
    documents as the index holds them, the configuration's fields and thresholds, and the table's
    active corpus snapshot (token rarity, common codes) when ``[dedup] rarity`` uses one.

    Args:
        settings: the configuration (profile applied). backend: the opened index backend.
        conn: a connection to the database (reads the active snapshot).
        a_id, b_id: the two records' primary keys as text.
    Returns:
        A :class:`Comparison` (``snapshot``: the version used, or None without one).
    Raises:
        ConfigError: a record that has no live document in the index (key ``ids``), or an invalid
            ``[dedup]`` setting. psycopg.Error, TransientIndexError: the database or the index failed.
    """
    table = settings.source.qualified
    docs = await backend.get(table, [a_id, b_id])
    for rid in (a_id, b_id):
        if rid not in docs:
            raise ConfigError("ids", f"record {rid!r} of {table} has no document in the index (deleted, not "
                                     f"indexed yet, or not a record of that table)")
    cfg = await rarity_store.following(conn, table, dedup_options(settings).scoring)
    a, b = docs[a_id], docs[b_id]
    return Comparison.of(score_pair(a.fields, a.signature, b.fields, b.signature, cfg), cfg)


def format_comparison(c: Comparison) -> str:
    """The text ``nearsync compare`` prints: the score and flag, the summary, then a row per
    compared field (metric, weight, similarity, and whether it counted)."""
    flag = c.decision or "not flagged"
    snapshot = "" if c.snapshot is None else f"; corpus snapshot {c.snapshot}"
    lines = [f"score {c.score:.1f}: {flag} (duplicate >= {c.duplicate_threshold:g}, "
             f"potential_duplicate >= {c.potential_threshold:g}{snapshot})", c.summary, "",
             f"{'field':<12} {'metric':<14} {'weight':>6} {'similarity':>10}  counted"]
    for name, r in sorted(c.reasons.items(), key=lambda kv: (-float(kv[1].get("weight", 0)), kv[0])):
        counted = "no" if r.get("counted") is False else "yes"
        lines.append(f"{name:<12} {str(r.get('metric', '')):<14} {float(r.get('weight', 0)):>6g} "
                     f"{float(r.get('similarity', 0)):>10.4f}  {counted}")
    return "\n".join(lines)


def _as_indexed(settings: Settings, record: dict[str, Any], name: str) -> dict[str, Any]:
    """``record`` as the indexer reads a row: every mapped field present (None when the record
    lacks it) and the numbers coerced (:func:`~daemon.capture.documents.coerce_numbers`).
    Raises: ConfigError (key ``name``) for a value the indexer would dead-letter."""
    fields = {**{role: None for role in settings.source.fields}, **record}
    try:
        return coerce_numbers(fields, typed_fields(settings))
    except RecordError as e:
        raise ConfigError(name, str(e)) from None
