"""The chaos suite (bench/chaos/run.py) with real daemons, workers and PostgreSQL restarts.

The short run (about 1–2 minutes: two kill -9 of a daemon, two of a worker, a fast and an immediate
PostgreSQL restart, poison records, two daemons and two workers) is part of the default suite; the
soak (about 22 minutes against osmem, 20 faults of each kind, 30 s index outages included) is ``slow`` (``-m slow`` or ``NEARSYNC_SLOW=1``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.chaos.run import ChaosConfig, Report, named_semaphores, run_chaos, unlink_orphaned_semaphores
from tests.conftest import slow_enabled


def check(report: Report, cfg: ChaosConfig) -> None:
    """The invariants of a chaos run (:meth:`Report.violations`; the figures are printed first, so a
    failure shows them). Flags must equal a clean single-worker pass over the final table."""
    print(json.dumps(report.summary(), indent=2))
    assert report.violations(cfg) == []


async def test_chaos_short_loses_nothing_and_flags_nothing_twice(tmp_path: Path) -> None:
    """The short run's invariants; and its group kills leave no orphaned semaphore in /dev/shm (the
    run unlinks those whose resource tracker it killed: nothing is left for a second pass to find)."""
    before = named_semaphores()
    cfg = ChaosConfig(duration_s=40, faults_per_kind=2, seed=3, rate=100, work_dir=tmp_path)
    check(await run_chaos(cfg), cfg)
    assert unlink_orphaned_semaphores(before) == 0


@pytest.mark.slow
@pytest.mark.timeout(2700)
async def test_chaos_soak(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The documented soak: 20 faults of each kind, index outages included (about 22 minutes)."""
    if not slow_enabled(request.config):
        pytest.skip("slow: run with -m slow or NEARSYNC_SLOW=1")
    cfg = ChaosConfig(duration_s=900, faults_per_kind=20, seed=7, rate=10, backend="opensearch", work_dir=tmp_path)
    check(await run_chaos(cfg), cfg)


def test_violations_name_each_broken_invariant() -> None:
    """The chaos check can fail: a sound report gives no violation, and each broken invariant is named."""
    cfg = ChaosConfig(duration_s=1, faults_per_kind=1)
    sound = Report(changes_applied=10, poison_inserted=1, dead_letters=1, flags=3,
                   faults={k: 1 for k in cfg.kinds()})
    assert sound.violations(cfg) == []
    broken = Report(changes_applied=10, poison_inserted=2, dead_letters=1, flags=3, faults={k: 1 for k in cfg.kinds()},
                    lost_changes=1, stale_flags=2, flags_extra_vs_clean=1)
    found = broken.violations(cfg)
    assert len(found) == 4
    assert any("lost" in v for v in found) and any("stale" in v for v in found)
    assert any("differ from the clean pass" in v for v in found) and any("dead letters" in v for v in found)
