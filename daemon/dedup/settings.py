"""The ``[dedup]`` settings: worker options plus the scoring configuration.

Worker keys (this module): ``enabled`` (the indexer queues indexed records for the worker;
default false), ``min_match`` (keys a candidate must share, default 1), ``best_match_per_source``
(keep a link only if each side is the other's best match in its source: the one-to-one assumption
of clean-clean entity resolution, for feeds that list each item once; default false),
``cross_source_only`` (never link two records of the same ``source``: each feed is free of
duplicates; default false),
``max_component`` (records re-clustered at most per change, default 2000),
``exhaustive_below`` (see :data:`EXHAUSTIVE_BELOW`; 0 turns it off), ``max_block`` (see
:data:`MAX_BLOCK`; 0 turns block purging off), ``sweep_per_s`` (see :data:`SWEEP_PER_S`; 0 turns
the sweep off). Every other key is the
scoring configuration (:class:`daemon.scoring.ScoringConfig`: thresholds, fields, scope, clusters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from daemon.config import FIELD_ROLES, RESERVED_FIELD_NAMES, Settings
from daemon.errors import ConfigError
from daemon.scoring import ScoringConfig
from daemon.scoring.numbers import NUMBER_RANGES, TYPED_METRICS

WORKER_KEYS = {"enabled", "min_match", "best_match_per_source", "cross_source_only", "max_component",
               "exhaustive_below", "max_block", "sweep_per_s"}

EXHAUSTIVE_BELOW = 200
"""Default ``exhaustive_below``: a record whose scope (one user's ads, one group, one category, or the
whole table for a global scope) holds fewer documents than this is compared with *every* document
of the scope, not only with those sharing a candidate key (blocking). Seed 003's marketplace
compared each new ad with all of its user's ads; that is affordable while a scope is small, and it
makes candidate recall 1 there whatever the keys miss (a copy without its body, a shortened title).
200 covers the ads of nearly every seller of a classified-ads site while bounding the extra work to
200 pair scores per record; larger scopes rely on the keys (and ``candidate_cap``)."""

MAX_BLOCK = 500
"""Default ``max_block``: block purging (:mod:`daemon.signatures.blocks`). A super token (a pair of
sampled title words, or a rule's sampled words and cells) whose block (the documents of the scope
holding it) held more than this many documents when the active corpus snapshot was built
(``nearsync rarity refresh``) is left out of candidate lookups. Such a key is a pair of common
words ("digital camera"): it names hundreds of products at once, so it cannot tell a record's
duplicates from the rest, while reading its block is most of a lookup's cost in a large catalogue.
LSH band, simhash and identity keys are never left out, so a large group of copies still finds
itself. 500 is ten times the ``candidate_cap`` (50): a block that large can
never be scored whole anyway, so the cap, not the key, decides which of its members are scored,
by the other keys they share. The record's other keys (rarer word pairs, model numbers, LSH bands of
its text) still find its duplicates. Measured on the generated product corpus
(``bench/bench_blocking.py --max-block``): at 100,000 listings 30% fewer entries read per lookup and
the true duplicates among the top 50 candidates 0.764 → 0.776; at 1,000,000, 79% fewer and 0.638 →
0.686; Abt-Buy (2,173 listings) has no block that large. Nothing is purged until a snapshot lists
large blocks."""


SWEEP_PER_S = 20.0
"""Default ``sweep_per_s``: records per second, at most, that each ``nearsync dedup`` worker
processes again while the dedup queue is idle (:mod:`daemon.dedup.sweep`), in record id order (as
text), a pass over the table after another until a pass runs with nothing changed (then it rests
until something the flags depend on changes). Two rules depend on what was indexed when a record was
processed: the candidate cap (a record is compared with its best ``candidate_cap`` candidates
*then*; a better one indexed later is not compared from its side) and ``exhaustive_below`` (a scope
that has grown past it is no longer compared whole). While a catalogue grows, 0.6-0.7% of the
flags of a pass over the final table differ from those made on arrival (``bench/bench_history.py``);
a pass over the settled table gives exactly the clean pass's links, clusters and flags. The sweep
makes that pass without an operator (``nearsync dedup --requeue`` does it at once). 20 per second
completes a pass over 100,000 records in ~1.4 h with one worker (N workers share a pass and sweep N
times as fast), over 1,000,000 in ~14 h, and bounds the cost to what those records' dedup takes,
only while the queue is idle and never more than half of the worker's time (docs/benchmarks.md: on
20,000 near-duplicate-dense product listings 19 records/s, 20-21% of a core in the worker and
14-15% in PostgreSQL). A change arriving meanwhile waits for the chunk
in hand: a quarter of a second's worth of records. 0 turns the sweep off."""

MAX_SWEEP_PER_S = 10_000.0
"""The largest ``sweep_per_s`` accepted (records per second)."""


@dataclass(frozen=True)
class DedupOptions:
    """Validated ``[dedup]`` settings (see the module docstring)."""

    enabled: bool
    min_match: int
    best_match_per_source: bool
    cross_source_only: bool
    max_component: int
    scoring: ScoringConfig
    exhaustive_below: int = EXHAUSTIVE_BELOW
    max_block: int = MAX_BLOCK
    sweep_per_s: float = SWEEP_PER_S

    @property
    def uses_snapshot(self) -> bool:
        """Whether the worker reads the table's corpus snapshot (``nearsync rarity refresh``): for
        token rarity (``rarity`` above 0) or block purging (``max_block`` above 0)."""
        return self.scoring.rarity > 0 or self.max_block > 0


VALUE_METRICS = ("token_set", "levenshtein", "jaro_winkler", "exact", "price", "numeric", "date")
"""Metrics that read the value of the field they are named after (``fields[name]``); the others
read the signature or fixed roles (``jaccard``, ``simhash``, ``geo``, ``numbers``, ``colours``,
``variants``, ``price_gap``), so their field name is only a label."""


def typed_fields(settings: Settings) -> dict[str, str]:
    """Mapped fields scored with a metric of :data:`daemon.scoring.numbers.TYPED_METRICS`, other
    than the number roles (``price``, ``lat``, ``lon``, always read as numbers): field -> metric
    (``{"year": "numeric"}``). Their values must parse: see
    :func:`daemon.capture.documents.coerce_numbers` and the check API's models.

    Raises:
        ConfigError: an invalid ``[dedup]`` table (the key is named).
    """
    return {spec.name: spec.metric for spec in dedup_options(settings).scoring.fields
            if spec.metric in TYPED_METRICS and spec.name in settings.source.fields
            and spec.name not in NUMBER_RANGES}


def dedup_options(settings: Settings) -> DedupOptions:
    """Validate ``[dedup]``. Raises ConfigError naming the key (e.g. ``dedup.min_match``, or
    ``dedup.fields.authors`` for a field that reads a column no ``source.fields`` entry maps)."""
    raw: dict[str, Any] = dict(settings.dedup)
    worker = {k: raw.pop(k) for k in list(raw) if k in WORKER_KEYS}
    for key in ("enabled", "best_match_per_source", "cross_source_only"):
        if key in worker and not isinstance(worker[key], bool):
            raise ConfigError(f"dedup.{key}", f"must be true or false, got {worker[key]!r}")
    for key, default in (("min_match", 1), ("max_component", 2000)):
        v = worker.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"dedup.{key}", f"must be a positive integer, got {v!r}")
        worker[key] = v
    v = worker.get("exhaustive_below", EXHAUSTIVE_BELOW)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 100_000:
        raise ConfigError("dedup.exhaustive_below", f"must be an integer from 0 (off) to 100000, got {v!r}")
    worker["exhaustive_below"] = v
    v = worker.get("max_block", MAX_BLOCK)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 100_000_000:
        raise ConfigError("dedup.max_block", f"must be an integer from 0 (off) to 100000000, got {v!r}")
    worker["max_block"] = v
    v = worker.get("sweep_per_s", SWEEP_PER_S)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_SWEEP_PER_S:
        raise ConfigError("dedup.sweep_per_s",
                          f"must be a number of records per second from 0 (off) to {MAX_SWEEP_PER_S:g}, got {v!r}")
    worker["sweep_per_s"] = float(v)
    scoring = ScoringConfig.from_mapping(raw, prefix="dedup")
    if scoring.scope != "global" and scoring.scope not in settings.source.fields:
        raise ConfigError("dedup.scope", f"scope {scoring.scope!r} needs source.fields.{scoring.scope} to name a column")
    for spec in scoring.fields:
        if (spec.metric in VALUE_METRICS and spec.name not in FIELD_ROLES and spec.name not in RESERVED_FIELD_NAMES
                and spec.name not in settings.source.fields):
            raise ConfigError(f"dedup.fields.{spec.name}",
                              f"field {spec.name!r} is not mapped to a column: add source.fields.{spec.name} = "
                              f"\"<column>\" (nearsync evaluate: --map {spec.name}=<column>)")
    return DedupOptions(enabled=worker.get("enabled", False), min_match=worker["min_match"],
                        best_match_per_source=worker.get("best_match_per_source", False),
                        cross_source_only=worker.get("cross_source_only", False),
                        max_component=worker["max_component"], scoring=scoring,
                        exhaustive_below=worker["exhaustive_below"], max_block=worker["max_block"],
                        sweep_per_s=worker["sweep_per_s"])
