"""The chaos suite (bench/chaos/run.py) with real daemons, workers and PostgreSQL restarts.

The short run (about 1–2 minutes: two kill -9 of a daemon, two of a worker, a fast and an immediate
PostgreSQL restart, poison records, two daemons and two workers) is part of the default suite; the
soak (about 22 minutes against osmem, 20 faults of each kind, 30 s index outages included) is ``slow`` (``-m slow`` or ``NEARSYNC_SLOW=1``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.chaos.run import ChaosConfig, Report, run_chaos
from tests.conftest import slow_enabled


def check(report: Report, cfg: ChaosConfig) -> None:
    """The invariants of a chaos run (printed first, so a failure shows the figures)."""
    print(json.dumps(report.summary(), indent=2))
    assert report.changes_applied > 0 and report.poison_inserted > 0
    assert report.faults == {k: cfg.faults_per_kind for k in cfg.kinds()}
    assert report.pending_after_drain == 0
    assert report.lost_changes == 0, report.lost_detail
    assert report.poison_not_dead_lettered == 0
    assert report.dead_letters >= report.poison_inserted
    assert report.flags > 0
    assert report.duplicate_flags == 0
    assert report.stale_flags == 0, report.stale_flag_examples
    # Flags are a function of the data: the same as a clean single-worker pass over the final table.
    assert (report.flags_missing_vs_clean, report.flags_extra_vs_clean, report.flags_differing_vs_clean) == (0, 0, 0), \
        report.flag_mismatch_examples


async def test_chaos_short_loses_nothing_and_flags_nothing_twice(tmp_path: Path) -> None:
    cfg = ChaosConfig(duration_s=40, faults_per_kind=2, seed=3, rate=100, work_dir=tmp_path)
    check(await run_chaos(cfg), cfg)


@pytest.mark.slow
@pytest.mark.timeout(2700)
async def test_chaos_soak(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The documented soak: 20 faults of each kind, index outages included (about 22 minutes)."""
    if not slow_enabled(request.config):
        pytest.skip("slow: run with -m slow or NEARSYNC_SLOW=1")
    cfg = ChaosConfig(duration_s=900, faults_per_kind=20, seed=7, rate=10, backend="opensearch", work_dir=tmp_path)
    check(await run_chaos(cfg), cfg)
