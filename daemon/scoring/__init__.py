"""Pure pair scoring for near-duplicate detection (no I/O).

Public API: :class:`ScoringConfig` (``from_mapping``), :func:`score_pair` -> :class:`PairScore`,
:class:`Side` and :func:`score_sides` (the same on records prepared once; :func:`score_sides_at_least`
stops early on a pair below a floor, and :func:`lead_screen` applies its first check to a candidate's few lead-field
inputs before its document is read; :func:`pair_scorer` is either one with the config looked up once),
:func:`score_matrix`, :func:`evidence_against` (a pair's evidence against a match), :func:`decide`, and the per-field metrics in :mod:`daemon.scoring.metrics`.

May import: :mod:`daemon.signatures` (sketch comparisons), rapidfuzz, numpy and :mod:`daemon.errors`;
nothing with I/O (``.importlinter``).
"""

from daemon.scoring.combine import (
    LeadScreen, PairScore, PairScorer, evidence_against, field_similarity, lead_screen, pair_scorer, score_matrix,
    score_pair, score_sides, score_sides_at_least, side_similarity,
)
from daemon.scoring.config import ClusterConfig, FieldSpec, ScoringConfig
from daemon.scoring.decision import Decision, decide
from daemon.scoring.side import Side

__all__ = [
    "ClusterConfig", "Decision", "FieldSpec", "LeadScreen", "PairScore", "PairScorer", "ScoringConfig", "Side",
    "decide", "evidence_against", "field_similarity", "lead_screen", "pair_scorer", "score_matrix", "score_pair", "score_sides",
    "score_sides_at_least", "side_similarity",
]
