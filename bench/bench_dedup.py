"""Benchmark of the dedup worker (a script, not a test): prints figures.

* dedup throughput: records/s through the worker (claim → candidates → scoring → links, clusters,
  flags → ack) for a backlog of N freshly indexed records;
* single-record dedup latency: p50/p99 of one record's full handling (one-record batches through
  the real handler) with N records indexed.

Ads are generated with a seed from the Abt-Buy listings (or templates when the data is absent),
with ~20% reposts carrying controlled edits (typos, reordered sentences, price ±5%) by the same
user; the default scope is ``user``. Usage::

    python bench/bench_dedup.py [--records 100000] [--samples 300]
    python bench/bench_dedup.py --indexed 1000000 --records 20000   # 1M indexed, a 20k backlog
    python bench/bench_dedup.py --indexed 1000000 --records 20000 --dsn postgresql://... --reuse \
        --seed 31 --prewarm

With ``--indexed N`` the N documents are written straight into the index through the backend
protocol (the daemon's document builder in a process pool, as ``bench_api.py`` does; no table
rows, no trigger round trip), so a large index is built in minutes; then ``--records`` of them are
put on the dedup queue as the backlog whose throughput is measured, and the single-record latency
is sampled over random indexed records. ``--seed`` picks both (another seed measures records that
earlier runs did not touch: no links yet, nothing of theirs in the caches). ``--prewarm`` loads the
index into shared buffers first (``pg_prewarm``), the state of a server in service whose index fits
in memory; the 1,000,000-document index needs about 4.4 GB of them (``shared_buffers = 8GB`` on
the bench server). ``--concurrency`` sets the batches the worker keeps in flight (default 2).

Targets on the 2-core machine: ≥ 2,000 records/s per worker; p99 ≤ 10 ms per record at 1M.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.config import settings_from_mapping  # noqa: E402
from daemon.evaluation.datasets import abt_buy, default_data_dir  # noqa: E402
from daemon.evaluation.generator import generate_ads  # noqa: E402
from daemon.evaluation.loader import copy_ads, parse_price  # noqa: E402
from daemon.logs import configure_logging  # noqa: E402
from daemon.ops.migrate import upgrade  # noqa: E402
from daemon.db.queries import query  # noqa: E402
from daemon.db.throwaway import ThrowawayPostgres  # noqa: E402
from daemon.service import build_indexer, build_worker, opened_backend  # noqa: E402
from daemon.capture.queue import Claimed  # noqa: E402


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def bench_settings(dsn: str, concurrency: int | None = None) -> Any:
    """Settings of the bench's daemon and worker (2,000-record batches; ``concurrency`` None: the
    worker's default)."""
    daemon: dict[str, Any] = {"batch_size": 2000, "poll_interval_s": 0.5}
    if concurrency:
        daemon["concurrency"] = concurrency
    return settings_from_mapping({"database": {"dsn": dsn}, "source": {"create_reference_table": True},
                                  "daemon": daemon, "dedup": {"enabled": True}}, env={})


def prewarm(dsn: str) -> None:
    """Load the index's tables, TOAST tables and indexes into shared buffers with ``pg_prewarm``
    (skipped, with a note, when the extension is not installed): the state of a server in service
    whose index fits in its memory. Prints the megabytes loaded and ``shared_buffers``."""
    with psycopg.connect(dsn, autocommit=True) as c:
        if not c.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_prewarm'").fetchone():
            print("  pg_prewarm is not installed: measuring with whatever is cached", flush=True)
            return
        c.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        row = c.execute("""
            WITH rels AS (
                SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'nearsync' AND c.relkind = 'r'
                UNION ALL SELECT c.reltoastrelid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'nearsync' AND c.relkind = 'r' AND c.reltoastrelid <> 0
            ), all_rels AS (
                SELECT oid FROM rels UNION ALL SELECT i.indexrelid FROM pg_index i JOIN rels r ON r.oid = i.indrelid
            )
            SELECT sum(pg_prewarm(oid)) * current_setting('block_size')::bigint / 1048576,
                   current_setting('shared_buffers') FROM all_rels""").fetchone()
        assert row is not None
        print(f"  prewarmed {row[0]:,.0f} MB of the index into shared buffers (shared_buffers = {row[1]})", flush=True)


async def run(dsn: str, n: int, samples: int, concurrency: int | None = None) -> None:
    settings = bench_settings(dsn, concurrency)
    upgrade(settings)
    data = default_data_dir()
    base = None
    if data and (data / "abt-buy" / "Abt.csv").is_file():
        base = [dict(r.fields, price=parse_price(r.fields.get("price"))) for r in abt_buy(data).records]
    async with opened_backend(settings) as backend:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            t0 = time.perf_counter()
            await copy_ads(conn, ((f"g{i}", a.fields) for i, a in enumerate(generate_ads(n, seed=3, base=base))))
            print(f"loaded {n:,} generated ads ({'Abt-Buy based' if base else 'templates'}) in "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
        indexer = await build_indexer(settings, backend)
        async with indexer.loop.session():
            t0 = time.perf_counter()
            await indexer.loop.drain()
            t_idx = time.perf_counter() - t0
        print(f"indexed {n:,} in {t_idx:.1f} s ({n / t_idx:,.0f} rows/s, one daemon)", flush=True)
        worker = await build_worker(settings, backend)
        await drain_throughput(worker, "dedup throughput")
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            cur = await conn.execute("SELECT flag, count(*) FROM nearsync.duplicate_flags GROUP BY flag")
            print("flags in the table:", dict(await cur.fetchall()), flush=True)
            cur = await conn.execute("SELECT id::text, changed FROM (SELECT id, now() AS changed FROM ads "
                                     "ORDER BY random() LIMIT %s) s", (samples,))
            ids = [r[0] for r in await cur.fetchall()]
        await single_record_latency(dsn, worker, ids, n)


async def drain_throughput(worker: Any, label: str) -> None:
    """Drain the dedup queue with ``worker`` and print records/s per worker."""
    async with worker.session():
        t0 = time.perf_counter()
        done = await worker.drain()
        t_dedup = time.perf_counter() - t0
    print(f"{label}: {done:,} records in {t_dedup:.1f} s = {done / t_dedup:,.0f} records/s per worker "
          f"(target >= 2,000); pairs scored {worker.totals.get('pairs', 0):,}, "
          f"flags {worker.totals.get('flags', 0):,}", flush=True)


async def single_record_latency(dsn: str, worker: Any, ids: list[str], indexed: int) -> None:
    """Time the worker's full handling of each record of ``ids`` in one-record batches; print p50/p99."""
    lat = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for rid in ids:
            c = Claimed("public.ads", rid, "U", 0, time.time(), 0)  # type: ignore[arg-type]
            t = time.perf_counter()
            await worker.handler.process(conn, [c])
            lat.append((time.perf_counter() - t) * 1000)
    print(f"single-record dedup latency with {indexed:,} indexed: p50 {pct(lat, 50):.1f} ms, p99 {pct(lat, 99):.1f} ms, "
          f"mean {statistics.mean(lat):.1f} ms over {len(lat)} records (target p99 <= 10 ms)", flush=True)


async def run_indexed(dsn: str, indexed: int, backlog: int, samples: int, reuse: bool = False,
                      concurrency: int | None = None, seed: int = 5, warm: bool = False) -> None:
    """``--indexed`` mode (see the module docstring)."""
    from bench.bench_api import load_index

    ads, took = await load_index(dsn, indexed, reuse=reuse)
    del ads  # 1M generated ads kept alive would make every full collection of the worker scan them
    gc.collect()
    if took:
        print(f"indexed {indexed:,} documents through the backend in {took:.1f} s ({indexed / took:,.0f} docs/s)",
              flush=True)
    settings = bench_settings(dsn, concurrency)
    if warm:
        prewarm(dsn)
    rng = random.Random(seed)
    ids = [str(i) for i in rng.sample(range(1, indexed + 1), min(backlog, indexed))]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(query("enqueue_fresh"), {"queue": "dedup", "table": "public.ads", "record_ids": ids,
                                                    "ops": ["U"] * len(ids)})
    async with opened_backend(settings) as backend:
        worker = await build_worker(settings, backend)
        await drain_throughput(worker, f"dedup throughput with {indexed:,} indexed")
        await single_record_latency(dsn, worker, [str(i) for i in rng.sample(range(1, indexed + 1), samples)], indexed)


def shared_buffers_for(documents: int) -> str:
    """``shared_buffers`` for the bench's own server: room for an index of ``documents`` (~6 kB
    each with its key array and GIN entries: 1.24 GB at 200,000), at least 256 MB and at most half
    of the machine's memory."""
    total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 1048576
    return f"{max(256, min(documents * 6 // 1024, total_mb // 2))}MB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000, help="records put through the worker (the backlog)")
    ap.add_argument("--samples", type=int, default=300, help="records timed one by one")
    ap.add_argument("--indexed", type=int, help="write this many documents straight into the index first "
                                                "(then --records of them are the backlog)")
    ap.add_argument("--dsn", help="with --indexed: use this database instead of a throwaway server")
    ap.add_argument("--reuse", action="store_true",
                    help="with --dsn: keep an index that already holds --indexed documents (bench_api.py's seed)")
    ap.add_argument("--concurrency", type=int, help="batches the worker keeps in flight (default: the worker's, 2)")
    ap.add_argument("--seed", type=int, default=5,
                    help="with --indexed: picks the backlog and the timed records (default 5); another seed "
                         "times records the previous runs did not touch")
    ap.add_argument("--prewarm", action="store_true",
                    help="with --indexed: load the index into shared buffers first (pg_prewarm), as on a "
                         "server in service whose index fits in memory (needs shared_buffers large enough)")
    args = ap.parse_args()
    configure_logging("warning")
    if args.dsn and args.indexed:
        asyncio.run(run_indexed(args.dsn, args.indexed, args.records, args.samples, args.reuse,
                                args.concurrency, args.seed, args.prewarm))
        return
    with ThrowawayPostgres(fast=True, settings={"shared_buffers": shared_buffers_for(args.indexed or args.records)}) as server:
        if args.indexed:
            asyncio.run(run_indexed(server.dsn, args.indexed, args.records, args.samples,
                                    concurrency=args.concurrency, seed=args.seed, warm=args.prewarm))
        else:
            asyncio.run(run(server.dsn, args.records, args.samples, args.concurrency))


if __name__ == "__main__":
    main()
