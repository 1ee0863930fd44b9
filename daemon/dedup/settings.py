"""The ``[dedup]`` settings: worker options plus the scoring configuration.

Worker keys (this module): ``enabled`` (the indexer queues indexed records for the worker;
default false), ``min_match`` (keys a candidate must share, default 1), ``best_match_per_source``
(keep a link only if each side is the other's best match in its source: the one-to-one assumption
of clean-clean entity resolution, for feeds that list each item once; default false),
``cross_source_only`` (never link two records of the same ``source``: each feed is free of
duplicates; default false),
``max_component`` (records re-clustered at most per change, default 2000),
``exhaustive_below`` (see :data:`EXHAUSTIVE_BELOW`; 0 turns it off). Every other key is the
scoring configuration (:class:`daemon.scoring.ScoringConfig`: thresholds, fields, scope, clusters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from daemon.config import Settings
from daemon.errors import ConfigError
from daemon.scoring import ScoringConfig

WORKER_KEYS = {"enabled", "min_match", "best_match_per_source", "cross_source_only", "max_component",
               "exhaustive_below"}

EXHAUSTIVE_BELOW = 200
"""Default ``exhaustive_below``: a record whose scope (one user's ads, one group, one category, or the
whole table for a global scope) holds fewer documents than this is compared with *every* document
of the scope, not only with those sharing a candidate key (blocking). Seed 003's marketplace
compared each new ad with all of its user's ads; that is affordable while a scope is small, and it
makes candidate recall 1 there whatever the keys miss (a copy without its body, a shortened title).
200 covers the ads of nearly every seller of a classified-ads site while bounding the extra work to
200 pair scores per record; larger scopes rely on the keys (and ``candidate_cap``)."""


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


def dedup_options(settings: Settings) -> DedupOptions:
    """Validate ``[dedup]``. Raises ConfigError naming the key (e.g. ``dedup.min_match``)."""
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
    scoring = ScoringConfig.from_mapping(raw, prefix="dedup")
    if scoring.scope != "global" and scoring.scope not in settings.source.fields:
        raise ConfigError("dedup.scope", f"scope {scoring.scope!r} needs source.fields.{scoring.scope} to name a column")
    return DedupOptions(enabled=worker.get("enabled", False), min_match=worker["min_match"],
                        best_match_per_source=worker.get("best_match_per_source", False),
                        cross_source_only=worker.get("cross_source_only", False),
                        max_component=worker["max_component"], scoring=scoring,
                        exhaustive_below=worker["exhaustive_below"])
