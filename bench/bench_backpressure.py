"""Backpressure benchmark: a burst of N changes (default 1,000,000) worked through by a real
``nearsync run`` with bounded memory.

Inserts N ads in one statement (N tracking rows at once), starts the daemon as a subprocess with
``--metrics-port``, and samples its peak resident memory (``VmHWM`` in ``/proc/<pid>/status``) and,
every second, the resident memory of the daemon with its signature process pool, until the queue
is empty. The adaptive batch size (``QueueLoop.sizer``: floor ``batch_size // 10``,
ceiling ``batch_size * 8``) bounds what is in memory at once, so the peak does not grow with N.

Documented bound: peak RSS below 500 MB for 1,000,000 pending changes with the default
``batch_size`` 500 (ceiling 4,000 rows per batch). Run::

    python bench/bench_backpressure.py              # 1,000,000 changes
    python bench/bench_backpressure.py --rows 200000 --max-rss-mb 500

Prints JSON (rows, seconds, changes/s, peak RSS MB of the daemon and of the daemon with its pool,
final batch limit) and exits 1 if either peak exceeds ``--max-rss-mb``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.chaos.run import write_config  # noqa: E402
from daemon.ops.migrate import upgrade  # noqa: E402
from daemon.db.throwaway import ThrowawayPostgres, free_port  # noqa: E402


def peak_rss_mb(pid: int) -> float:
    """``VmHWM`` (peak resident set) of ``pid`` in MB, 0 if the process is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    m = re.search(r"^VmHWM:\s+(\d+)\s+kB", text, re.M)
    return int(m.group(1)) / 1024 if m else 0.0


def descendants(pid: int) -> set[int]:
    """Pids of every live descendant of ``pid`` (children, their children, ...), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out: set[int] = set()
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.add(p)
        todo += children.get(p, [])
    return out


def tree_rss_mb(pid: int) -> float:
    """Current resident set (``VmRSS``) of ``pid`` and all its descendants (the signature process
    pool, its forkserver) in MB, from ``/proc``; sampled, so a short peak between samples is missed."""
    total = 0.0
    for p in {pid} | descendants(pid):
        try:
            m = re.search(r"^VmRSS:\s+(\d+)\s+kB", Path(f"/proc/{p}/status").read_text(), re.M)
        except OSError:
            continue
        total += int(m.group(1)) / 1024 if m else 0.0
    return total


def pending(dsn: str) -> int:
    """Tracking and change-log rows left on the index queue."""
    with psycopg.connect(dsn) as c:
        row = c.execute("SELECT count(*) FROM nearsync.pending_changes WHERE queue = 'index'").fetchone()
        return int(row[0]) if row else 0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit code (1: peak RSS over the bound)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--max-rss-mb", type=float, default=500.0)
    a = p.parse_args(argv)
    with ThrowawayPostgres(fast=True) as server:
        with psycopg.connect(server.dsn, autocommit=True) as c:
            c.execute("CREATE DATABASE bp")
        dsn = f"postgresql://postgres@127.0.0.1:{server.port}/bp"
        cfg = Path(server.base_dir or "/tmp") / "bp.toml"  # type: ignore[operator]
        settings = write_config(cfg, dsn, {"backend": "postgres"})
        upgrade(settings)
        t0 = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("INSERT INTO ads (user_id, category, title, body, price) SELECT 'u' || (g %% 5000), 'tv', "
                      "'Listing ' || g || ' model KDL-' || g, 'Body of listing ' || g || ' with words about it', "
                      "g %% 3000 FROM generate_series(1, %s) g", (a.rows,))
        burst_s = time.monotonic() - t0
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("NEARSYNC_")}
        proc = subprocess.Popen([sys.executable, "-m", "daemon", "run", "--config", str(cfg), "--metrics-port",
                                 str(port), "--log-level", "warning"], cwd=REPO, env=env)
        t1 = time.monotonic()
        peak, tree_peak, limit = 0.0, 0.0, ""
        try:
            while True:
                peak = max(peak, peak_rss_mb(proc.pid))
                tree_peak = max(tree_peak, tree_rss_mb(proc.pid))
                if proc.poll() is not None:
                    raise SystemExit(f"daemon exited with {proc.returncode}")
                if pending(dsn) == 0:
                    break
                time.sleep(1.0)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                page = r.read().decode()
            m = re.search(r'^nearsync_batch_limit_rows\{queue="index"\} (\S+)$', page, re.M)
            limit = m.group(1) if m else ""
            peak = max(peak, peak_rss_mb(proc.pid))
        finally:
            proc.terminate()
            proc.wait(60)
        took = time.monotonic() - t1
    out = {"rows": a.rows, "burst_insert_s": round(burst_s, 1), "drain_s": round(took, 1),
           "changes_per_s": round(a.rows / took, 1), "peak_rss_mb": round(peak, 1),
           "peak_rss_with_pool_mb": round(tree_peak, 1), "final_batch_limit": limit, "bound_mb": a.max_rss_mb}
    print(json.dumps(out, indent=2))
    return 1 if max(peak, tree_peak) > a.max_rss_mb else 0


if __name__ == "__main__":
    sys.exit(main())
