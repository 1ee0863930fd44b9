"""Benchmark of ``nearsync reindex`` (a script, not a test): signed and plain sync side by side, in one run.

Each round runs ``nearsync reindex --restart`` as a subprocess on the same table of generated ads
(PostgreSQL backend, throwaway server), once with the signatures (the default) and once as plain sync
(``[signatures] enabled = false``), one after the other, and with ``--baseline REV`` a third time with
the code of git revision ``REV`` (before/after in the same run). The baseline gets a database of its
own on the same server, migrated by its own code and loaded with the same ads, so a revision with
another schema (e.g. before migration 0010's key arrays) runs on the schema it expects. Rounds interleave the variants, so a
machine whose speed drifts (other users, 2 shared cores) weighs on all of them alike; the ratio
signed ÷ plain is printed per round and the range over rounds at the end.

Where the CPU goes per row, measured here rather than estimated:

* **daemon**: user + system CPU of the ``nearsync reindex`` process and all its descendants (the
  signature pool's workers and their forkserver): this script makes itself a child subreaper
  (``PR_SET_CHILD_SUBREAPER``), so orphaned workers are reaped by it and their CPU shows in its
  ``RUSAGE_CHILDREN``;
* **PostgreSQL**: user + system CPU of the server (the postmaster, its live children and the
  children it reaped, from ``/proc/<pid>/stat``) over the same run;
* within the daemon, **signing** and **encoding** per row are timed in this process on a sample of
  the same rows (CPU time, best of ``--repeat``): reading the fields (plain build), signing record by
  record (the path before issue 20), signing as a batch (``DocumentBuilder.build_many``) and the
  PostgreSQL wire form (``encode_document``).

``--config FILE`` signs with that settings file (e.g. ``[dedup] profile = "products"``) instead of
the defaults; ``--compare FILE`` adds a signed variant with the same code and another settings file
(e.g. the same profile with ``[signatures.lsh] keys = true``), interleaved with the others, and
prints its in-process split and candidate keys per document too.

Usage (from the repository root)::

    python bench/bench_reindex.py [--rows 50000] [--rounds 3] [--baseline c442a24] [--page-size 5000]
    python bench/bench_reindex.py --config products.toml --compare products-with-bands.toml

Target (issue 20): signed ≥ 10,000 docs/s on 2 cores and ≥ 50% of plain sync. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from daemon.backends.pg_encoding import encode_document  # noqa: E402
from daemon.capture.documents import DocumentBuilder  # noqa: E402
from daemon.config import settings_from_mapping  # noqa: E402
from daemon.db.throwaway import ThrowawayPostgres  # noqa: E402
from daemon.evaluation.datasets import abt_buy, default_data_dir  # noqa: E402
from daemon.evaluation.generator import generate_ads  # noqa: E402
from daemon.signatures.signature import candidate_keys  # noqa: E402
from daemon.evaluation.loader import parse_price  # noqa: E402
from daemon.service import open_source  # noqa: E402

COLS = "user_id, category, title, body, price, lat, lon"
TICK = os.sysconf("SC_CLK_TCK")
PR_SET_CHILD_SUBREAPER = 36


def load_ads(conn: psycopg.Connection, n: int) -> str:
    """Insert ``n`` generated ads into the reference table ``ads``, then empty the queues the triggers
    filled. Returns where the ads came from."""
    data = default_data_dir()
    base = None
    if data and (data / "abt-buy" / "Abt.csv").is_file():
        base = [dict(r.fields, price=parse_price(r.fields.get("price"))) for r in abt_buy(data).records]
    with conn.cursor() as cur, cur.copy(f"COPY ads ({COLS}) FROM STDIN") as copy:
        for ad in generate_ads(n, seed=11, base=base):
            f = ad.fields
            copy.write_row((f.get("user"), f.get("category"), f.get("title"), f.get("body"), f.get("price"),
                            f.get("lat"), f.get("lon")))
    conn.execute("TRUNCATE nearsync.index_tracking, nearsync.change_log")
    conn.execute("VACUUM ANALYZE ads")
    return "Abt-Buy listings" if base else "templates"


def reset_index(conn: psycopg.Connection) -> None:
    """Empty the index, its queue and the reindex checkpoint (each run starts from nothing). The key
    rows' table ``nearsync.document_keys`` (schemas before 0010) and the lookup table
    ``nearsync.document_lookup`` (0020 on) are emptied too where they exist (a baseline revision
    runs on the schema it expects)."""
    tables = ["nearsync.documents", "nearsync.index_tracking", "nearsync.change_log"]
    for extra in ("nearsync.document_keys", "nearsync.document_lookup"):
        if conn.execute("SELECT to_regclass(%s)", (extra,)).fetchone() != (None,):
            tables.append(extra)
    conn.execute(f"TRUNCATE {', '.join(tables)}")
    conn.execute("DELETE FROM nearsync.job_checkpoints")
    conn.execute("CHECKPOINT")


def database_for(server_dsn: str, name: str, code: Path, rows: int) -> tuple[str, str]:
    """A database ``name`` on the bench server, migrated by the code in ``code`` (a subprocess, so an
    older revision builds the schema it expects) and loaded with ``rows`` ads. Returns its DSN and
    where the ads came from."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = server_dsn.rsplit("/", 1)[0] + "/" + name
    migrate = ("from daemon.config import settings_from_mapping; from daemon.ops.migrate import upgrade; "
               f"upgrade(settings_from_mapping({{'database': {{'dsn': {dsn!r}}}, "
               "'source': {'create_reference_table': True}}, env={}))")
    subprocess.run([sys.executable, "-c", migrate], env={**os.environ, "PYTHONPATH": str(code)}, cwd=code, check=True,
                   capture_output=True, timeout=600)
    with psycopg.connect(dsn, autocommit=True) as conn:
        return dsn, load_ads(conn, rows)


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()  # fields from the state on (field 3)


def server_cpu(postmaster: int) -> float:
    """CPU seconds (user + system) of a PostgreSQL server so far: the postmaster, the children it
    reaped, and its live children."""
    s = _stat(postmaster)
    total = sum(int(x) for x in s[11:15])  # utime, stime, cutime, cstime
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            c = _stat(int(entry))
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(c[1]) == postmaster:
            total += int(c[11]) + int(c[12])
    return total / TICK


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system, with the children they reaped) of process ``root`` and its live
    descendants so far."""
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stats[int(entry)] = _stat(int(entry))
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in stats and pid not in tree:
            tree.add(pid)
            todo += [c for c, st in stats.items() if int(st[1]) == pid]
    return sum(sum(int(x) for x in stats[pid][11:15]) for pid in tree) / TICK


def children_cpu() -> float:
    """CPU seconds of every descendant this process has reaped so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def reap_all(timeout_s: float = 20.0) -> None:
    """Wait for every descendant (orphans are re-parented here, see ``PR_SET_CHILD_SUBREAPER``)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)
    print("warning: descendants still running; their CPU is not counted", file=sys.stderr)


def run_reindex(dsn: str, code: Path, config: Path | None, postmaster: int, page_size: int) -> dict[str, float]:
    """One ``nearsync reindex --restart`` with the code in ``code``; its report and CPU split."""
    env = {**os.environ, "NEARSYNC_DSN": dsn, "PYTHONPATH": str(code)}
    args = [sys.executable, "-m", "daemon", "reindex", "--restart", "--no-progress", "--json", "--log-level", "warning",
            "--page-size", str(page_size)]
    if config is not None:
        args += ["--config", str(config)]
    pg0, cpu0, t0 = server_cpu(postmaster), children_cpu(), time.perf_counter()
    done = subprocess.run(args, env=env, cwd=code, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    reap_all()
    pg1, cpu1 = server_cpu(postmaster), children_cpu()
    if done.returncode != 0:
        raise RuntimeError(f"reindex failed ({done.returncode}): {done.stderr[-2000:]}")
    report = json.loads(done.stdout[done.stdout.index("{"):])
    rows = int(report["rows"])
    return {"rows": rows, "seconds": float(report["seconds"]), "rows_per_s": rows / float(report["seconds"]),
            "wall": wall, "daemon_ms": (cpu1 - cpu0) * 1000 / rows, "pg_ms": (pg1 - pg0) * 1000 / rows}


def in_process_split(dsn: str, settings: Any, sample: int, repeat: int) -> dict[str, float]:
    """CPU µs per row of the daemon's document work, on ``sample`` rows of the table (best of ``repeat``),
    and ``keys``: the mean number of candidate keys per signed document."""
    table = asyncio.run(open_source(settings))
    with psycopg.connect(dsn) as conn:
        rows = conn.cursor(row_factory=dict_row).execute(
            f"SELECT * FROM ads ORDER BY id LIMIT {int(sample)}").fetchall()
    items = [(r, i + 1) for i, r in enumerate(rows)]
    signed = DocumentBuilder.from_settings(settings, table)
    plain = DocumentBuilder(signed.table, signed.params, signed.scope, signed=False)
    docs = signed.build_many(items)
    signed.build_many(items)  # warm the token and piece memos, as a running daemon has them

    def per_record() -> None:
        for row, version in items:
            signed.build(row, version)

    jobs = {"fields": lambda: plain.build_many(items), "per_record": per_record,
            "batch": lambda: signed.build_many(items), "encode": lambda: [encode_document(d) for d in docs]}
    best = {k: float("inf") for k in jobs}
    for _ in range(repeat):
        for name, job in jobs.items():  # interleaved
            t = time.process_time()
            job()
            best[name] = min(best[name], time.process_time() - t)
    us = {k: v * 1e6 / len(items) for k, v in best.items()}
    signatures = [d.signature for d in docs if not isinstance(d, Exception) and d.signature]
    return {"fields": us["fields"], "sign_per_record": us["per_record"] - us["fields"],
            "sign_batch": us["batch"] - us["fields"], "encode": us["encode"],
            "keys": sum(len(candidate_keys(x["bands"], x["blocks"], x["super"])) for x in signatures) / max(1, len(signatures))}


def settings_file(path: Path | None) -> dict[str, Any]:
    """The tables of a TOML settings file (``{}`` for ``None``), to build the in-process settings from."""
    if path is None:
        return {}
    import tomllib
    return tomllib.loads(path.read_text())


def code_at(revision: str, into: Path) -> Path:
    """The repository's ``daemon`` and ``sql`` trees at ``revision`` (``git archive``), extracted into ``into``."""
    data = subprocess.run(["git", "archive", revision, "daemon", "sql", "migrations"], cwd=REPO, check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=50_000, help="ads in the table (default 50,000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the interleaved variants (default 3)")
    ap.add_argument("--page-size", type=int, default=5000, help="reindex --page-size (default 5,000)")
    ap.add_argument("--baseline", help="also reindex with the code of this git revision (before/after)")
    ap.add_argument("--sample", type=int, default=5000, help="rows of the in-process CPU split (default 5,000)")
    ap.add_argument("--repeat", type=int, default=3, help="timed passes of the in-process split (best kept)")
    ap.add_argument("--config", type=Path, help="settings file of the signed variants (default: the defaults)")
    ap.add_argument("--compare", type=Path, help="also reindex signed with the same code and this settings file")
    args = ap.parse_args()
    with ThrowawayPostgres(fast=True) as server, tempfile.TemporaryDirectory() as tmp:
        postmaster = int((server.data_dir / "postmaster.pid").read_text().split()[0])
        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
        plain_cfg = Path(tmp) / "plain-sync.toml"
        plain_cfg.write_text("[signatures]\nenabled = false\n")
        dsn, source = database_for(server.dsn, "bench_head", REPO, args.rows)
        base = {"database": {"dsn": dsn}, "source": {"create_reference_table": True}}
        s = settings_from_mapping({**settings_file(args.config), **base}, env={})
        variants: list[tuple[str, Path, Path | None, str]] = [("signed", REPO, args.config, dsn), ("plain", REPO, plain_cfg, dsn)]
        if args.compare:
            variants.append((f"signed[{args.compare.stem}]"[:16], REPO, args.compare, dsn))
        if args.baseline:
            rev = subprocess.run(["git", "rev-parse", "--short", args.baseline], cwd=REPO, check=True,
                                 capture_output=True, text=True).stdout.strip()
            code = code_at(args.baseline, Path(tmp) / "baseline")
            variants.append((f"signed@{rev}", code, args.config, database_for(server.dsn, "bench_baseline", code, args.rows)[0]))
        with psycopg.connect(dsn, autocommit=True) as conn:
            head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                  text=True).stdout.strip()
            print(f"{args.rows:,} ads generated from {source}; PostgreSQL {conn.info.server_version}, fsync off; "
                  f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start; code at {head}"
                  f"{' (+ uncommitted changes)' if subprocess.run(['git', 'diff', '--quiet', 'HEAD'], cwd=REPO).returncode else ''}",
                  flush=True)
        splits = [("signed", s)]
        if args.compare:
            splits.append((variants[-1][0], settings_from_mapping({**settings_file(args.compare), **base}, env={})))
        for _ in range(2 if args.compare else 1):  # with a comparison: twice, interleaved
            for name, vs in splits:
                split = in_process_split(dsn, vs, args.sample, args.repeat)
                print(f"{name}: daemon CPU per row, in this process on {args.sample:,} of the rows (best of {args.repeat}): "
                      f"reading fields {split['fields']:.0f} µs, signing record by record {split['sign_per_record']:.0f} µs, "
                      f"signing as a batch {split['sign_batch']:.0f} µs "
                      f"({split['sign_per_record'] / split['sign_batch']:.2f}x), PostgreSQL wire form {split['encode']:.0f} µs; "
                      f"{split['keys']:.1f} candidate keys per document (load {os.getloadavg()[0]:.2f})", flush=True)
        results: dict[str, list[dict[str, float]]] = {name: [] for name, _, _, _ in variants}
        for r in range(args.rounds):
            line = []
            for name, code, cfg, vdsn in variants:
                with psycopg.connect(vdsn, autocommit=True) as conn:
                    reset_index(conn)
                res = run_reindex(vdsn, code, cfg, postmaster, args.page_size)
                results[name].append(res)
                print(f"round {r + 1} {name:>16}: {res['rows']:,} rows in {res['seconds']:.1f} s "
                      f"= {res['rows_per_s']:,.0f} docs/s; CPU per row: daemon {res['daemon_ms']:.3f} ms, "
                      f"PostgreSQL {res['pg_ms']:.3f} ms (load {os.getloadavg()[0]:.2f})", flush=True)
                line.append(res["rows_per_s"])
            ratios = ", ".join(f"{name} / plain {v / line[1]:.2f}" for (name, _, _, _), v in zip(variants, line)
                               if name != "plain")
            print(f"round {r + 1} ratios: {ratios}", flush=True)
        print()
        print(f"{'variant':>16} {'docs/s (min-max)':>22} {'daemon ms/row':>14} {'PG ms/row':>10} {'÷ plain, per round':>22}")
        plain_rates = [x["rows_per_s"] for x in results["plain"]]
        for name, runs in results.items():
            rates = [x["rows_per_s"] for x in runs]
            ratio = [a / b for a, b in zip(rates, plain_rates)]
            print(f"{name:>16} {min(rates):>10,.0f} - {max(rates):<9,.0f} "
                  f"{min(x['daemon_ms'] for x in runs):>6.3f}-{max(x['daemon_ms'] for x in runs):<6.3f} "
                  f"{min(x['pg_ms'] for x in runs):>4.3f}-{max(x['pg_ms'] for x in runs):<5.3f} "
                  f"{min(ratio):>10.2f} - {max(ratio):.2f}")


if __name__ == "__main__":
    main()
