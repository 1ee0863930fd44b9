"""From a 0-100 score to the moderation flag (seed 003: auto-reject vs manual moderation)."""

from __future__ import annotations

from typing import Literal

from daemon.scoring.config import ScoringConfig

Decision = Literal["duplicate", "potential_duplicate"]


def decide(score: float, cfg: ScoringConfig) -> Decision | None:
    """Map a pair score to a flag.

    Args:
        score: pair score, 0-100 (:attr:`PairScore.score`).
        cfg: gives ``duplicate_threshold`` and ``potential_threshold`` (both inclusive).
    Returns:
        ``"duplicate"`` (auto-reject) when ``score >= duplicate_threshold``,
        ``"potential_duplicate"`` (a moderator decides) when ``score >= potential_threshold``,
        else None (not flagged).
    """
    if score >= cfg.duplicate_threshold:
        return "duplicate"
    if score >= cfg.potential_threshold:
        return "potential_duplicate"
    return None
