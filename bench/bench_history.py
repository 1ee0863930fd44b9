"""Benchmark of history dependence (a script, not a test): do the flags depend on the order in which
listings arrived? Prints figures, asserts nothing.

The guarantee (docs/architecture.md, "Dedup worker") is that links and flags are a function of the
table, not of timing, except for two documented rules that look at other records: the candidate cap
(a record's lookup scores only its ``candidate_cap`` best candidates, ranked by shared candidate keys,
so which pairs are scored depends on which other listings were indexed when it was processed) and a
scope growing past ``exhaustive_below``. This bench measures how far apart the results are on the
near-duplicate-dense product corpus (:mod:`bench.corpus_products`, the settings of ``nearsync
evaluate`` for product listings: global scope, cross-source only, best match per source), where the
cap binds for most records:

* ``clean``: every listing indexed, then every listing deduplicated (what ``nearsync evaluate`` and
  a ``--requeue`` pass over a settled table do);
* ``arrival``: the listings indexed in ``--chunks`` parts in id order (creation order), each part
  deduplicated before the next is indexed, as a realtime worker meets a growing catalogue;
* ``shuffled``: the same with the parts cut from a seeded permutation (listings arriving out of
  creation order, e.g. a backfill);
* ``arrival + requeue``: ``arrival``, then every listing put on the dedup queue again (as
  ``nearsync dedup --requeue`` does): does a pass over the final table bring it back to ``clean``?
* ``shuffled + sweep``: ``shuffled``, then one pass of the dedup worker's sweep
  (:mod:`daemon.dedup.sweep`: the records processed again in chunks of 100 in record id order, as an
  idle ``nearsync dedup`` does at ``[dedup] sweep_per_s``): does it bring the table back to ``clean``?

For each it prints the links and flags (with the digests of ``bench_dedup.py``), how many links and
flags differ from ``clean`` (a flag differs when its record is flagged in one run and not in the
other, or with another kind or original), and pairwise precision / recall / F1 of the clusters
against the corpus's labels (two listings of one product are a true pair). Usage::

    python bench/bench_history.py                       # 10,000 listings, 10 parts
    python bench/bench_history.py --listings 20000 --chunks 20 --cap 50 200

``--cap`` runs the whole set once per ``candidate_cap`` (the profile's is 50). Needs
``../shared/data/abt-buy`` (or ``NEARSYNC_DATA``); a throwaway PostgreSQL server unless ``--dsn``
(whose ``public.ads`` index and dedup tables it empties).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections import defaultdict
from itertools import combinations
from pathlib import Path
from typing import Any

import psycopg
import xxhash

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_dedup import corpus_row  # noqa: E402
from daemon.capture.documents import DocumentBuilder, SignaturePool  # noqa: E402
from daemon.config import settings_from_mapping  # noqa: E402
from daemon.db.queries import query  # noqa: E402
from daemon.db.throwaway import ThrowawayPostgres  # noqa: E402
from daemon.evaluation.datasets import default_data_dir  # noqa: E402
from daemon.evaluation.evaluate import PRODUCT_PROFILE  # noqa: E402
from daemon.evaluation.measures import pair_prf  # noqa: E402
from daemon.logs import configure_logging  # noqa: E402
from daemon.ops.migrate import upgrade  # noqa: E402
from daemon.service import build_worker, open_source, opened_backend  # noqa: E402

TABLE = "public.ads"


def history_settings(dsn: str, cap: int) -> Any:
    """The product settings of ``nearsync evaluate`` on a set with a source column (global scope, best
    match per source, cross-source only), ``candidate_cap = cap``, 500 records per worker batch, no
    corpus snapshot (no rarity, no block purging: those are functions of the snapshot, not of the
    arrival order)."""
    cfg: dict[str, Any] = json.loads(json.dumps(PRODUCT_PROFILE))
    cfg["dedup"] |= {"best_match_per_source": True, "cross_source_only": True, "candidate_cap": cap}
    return settings_from_mapping({"database": {"dsn": dsn}, "source": {"create_reference_table": True},
                                  "daemon": {"batch_size": 500, "poll_interval_s": 0.5}, **cfg}, env={})


async def final_state(dsn: str) -> dict[str, Any]:
    """The table's links ``{(a, b): score}``, flags ``{record: (flag, original)}`` and cluster
    co-membership pairs (a set of ``(a, b)`` with a < b as record-id strings)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        links = {(a, b): round(float(s), 1) for a, b, s, *_ in
                 await (await conn.execute(query("links_of_table"), {"table": TABLE})).fetchall()}
        flags = {r[0]: (r[1], r[2]) for r in
                 await (await conn.execute(query("flags_of_table"), {"table": TABLE})).fetchall()}
        members: dict[Any, list[str]] = defaultdict(list)
        for rid, cid, _orig in await (await conn.execute(query("clusters_of_table"), {"table": TABLE})).fetchall():
            members[cid].append(rid)
    pairs = {tuple(sorted(p)) for m in members.values() for p in combinations(m, 2)}
    return {"links": links, "flags": flags, "pairs": pairs}


def digest(rows: Any) -> str:
    """xxh64 of the sorted rows' repr, as ``bench_dedup.print_final_state`` prints."""
    return xxhash.xxh64_hexdigest(repr(sorted(rows)).encode())


async def run_order(dsn: str, settings: Any, listings: list[Any], order: list[int], chunks: int,
                    requeue: bool = False, sweep: bool = False) -> tuple[dict[str, Any], float, dict[str, int]]:
    """Empty the index and the dedup tables, then index the listings of ``order`` (0-based positions in
    ``listings``; listing i has record id ``i + 1``) in ``chunks`` consecutive parts, deduplicating
    each part before the next is written; ``requeue``: then put every listing on the dedup queue again
    and drain it; ``sweep``: then run one pass of the dedup worker's sweep (chunks of 100). Returns (the final state, the seconds taken, the worker's totals: ``capped`` records
    whose candidate cap was hit, ``partner_checks`` links outside a capped lookup checked against
    the partner's stored cap boundary, ``pairs`` scored)."""
    table = await open_source(settings)
    builder = DocumentBuilder.from_settings(settings, table)
    pool = SignaturePool(builder, workers=os.cpu_count() or 2, min_parallel=64)
    t0 = time.perf_counter()
    totals: dict[str, int] = {}
    try:
        async with opened_backend(settings) as backend:
            await backend.clear(table.name)
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                await conn.execute(query("dedup_reset"), {"table": TABLE})
            worker = await build_worker(settings, backend)
            size = -(-len(order) // chunks)
            parts = [order[i:i + size] for i in range(0, len(order), size)]
            if requeue:
                parts.append([])  # the pass over the final table: nothing new indexed, everything queued
            async with worker.session():
                for n, part in enumerate(parts):
                    for start in range(0, len(part), 2000):
                        items = [(corpus_row(i + 1, listings[i].fields), 1) for i in part[start:start + 2000]]
                        built = await pool.build(items)
                        await backend.write([d for d in built if not isinstance(d, Exception)], [])
                    ids = [str(i + 1) for i in (part or order)]
                    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                        await conn.execute(query("enqueue_fresh"), {"queue": "dedup", "table": TABLE,
                                                                    "record_ids": ids, "ops": ["U"] * len(ids)})
                    await worker.drain()
                if sweep:
                    await sweep_once(dsn, worker.handler)
            totals = dict(worker.totals)
    finally:
        pool.close()
    return await final_state(dsn), time.perf_counter() - t0, totals


async def sweep_once(dsn: str, handler: Any) -> None:
    """One pass of :class:`daemon.dedup.sweep.Sweeper` (chunks of 100) over the table, from its start.

    Args:
        dsn: the bench's database. handler: the worker's ``DedupHandler`` (``QueueLoop.handler``).
    """
    from daemon.db.pool import configure_session
    from daemon.dedup.sweep import Sweeper

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await configure_session(conn)
        await conn.execute("DELETE FROM nearsync.dedup_sweeps WHERE table_name = %s", (TABLE,))
        await conn.execute(query("sweep_start"), {"table": TABLE})
        sweeper = Sweeper(dsn, TABLE, handler, 400.0, asyncio.Event(), lambda: False)  # chunks of 100
        while not sweeper.passes:  # the row was made afresh: the first pass completed is this one
            await sweeper.step(conn)


def describe(label: str, state: dict[str, Any], clean: dict[str, Any] | None, truth: set[tuple[str, str]],
             took: float, totals: dict[str, int]) -> None:
    """Print one run's line: links, flags and their digests, the differences from ``clean`` and the
    clusters' pairwise P/R/F1 against ``truth``."""
    links, flags = state["links"], state["flags"]
    prf = pair_prf(state["pairs"], truth)
    print(f"{label:>18}: {len(links):,} links ({digest((a, b, s) for (a, b), s in links.items())}), "
          f"{len(flags):,} flags ({digest((r, f, o) for r, (f, o) in flags.items())}); "
          f"clusters P {prf.precision:.4f} R {prf.recall:.4f} F1 {prf.f1:.4f}; cap hit for "
          f"{totals.get('capped', 0):,} records; {totals.get('pairs', 0):,} pairs scored; "
          f"{totals.get('partner_checks', 0):,} partners checked under the lock; {took:.0f} s", flush=True)
    if clean is None:
        return
    cl, cf = clean["links"], clean["flags"]
    only_here, only_clean = set(links) - set(cl), set(cl) - set(links)
    rescored = sum(1 for k in set(links) & set(cl) if links[k] != cl[k])
    changed = sum(1 for r in set(flags) | set(cf) if flags.get(r) != cf.get(r))
    pairs_here, pairs_clean = state["pairs"] - clean["pairs"], clean["pairs"] - state["pairs"]
    print(f"{'':>18}  against clean: links {len(only_here):,} only here, {len(only_clean):,} only in clean "
          f"({(len(only_here) + len(only_clean)) / max(1, len(cl)):.2%} of clean's), {rescored:,} scored "
          f"differently; flags differing {changed:,} ({changed / max(1, len(cf)):.2%} of clean's); cluster pairs "
          f"{len(pairs_here):,} only here ({sum(1 for p in pairs_here if p in truth):,} true), "
          f"{len(pairs_clean):,} only in clean ({sum(1 for p in pairs_clean if p in truth):,} true)", flush=True)


async def run(dsn: str, n: int, chunks: int, caps: list[int], corpus_seed: int, order_seed: int, shops: int) -> None:
    """Build the corpus and print :func:`describe` for each order and cap (see the module docstring)."""
    from bench.corpus_products import build_corpus

    data = default_data_dir()
    if data is None or not (data / "abt-buy" / "Abt.csv").is_file():
        raise SystemExit("bench_history.py needs ../shared/data/abt-buy (or NEARSYNC_DATA)")
    listings = build_corpus(n, seed=corpus_seed, data_dir=data, shops=shops)
    by_product: dict[str, list[str]] = defaultdict(list)
    for i, x in enumerate(listings):
        by_product[x.product].append(str(i + 1))
    truth = {tuple(sorted(p)) for ids in by_product.values() for p in combinations(ids, 2)}
    print(f"corpus: {n:,} listings, {len(by_product):,} products, {len(truth):,} true pairs; {shops} shops; "
          f"corpus seed {corpus_seed}; {chunks} parts", flush=True)
    arrival = list(range(n))  # ids in creation order (corpus_row: created_at grows with the id)
    shuffled = arrival[:]
    random.Random(order_seed).shuffle(shuffled)
    for cap in caps:
        settings = history_settings(dsn, cap)
        upgrade(settings)
        print(f"candidate_cap = {cap}", flush=True)
        clean, took, totals = await run_order(dsn, settings, listings, arrival, 1)
        describe("clean", clean, None, truth, took, totals)
        for label, order, requeue, sweep in (("arrival", arrival, False, False), ("shuffled", shuffled, False, False),
                                             ("arrival + requeue", arrival, True, False),
                                             ("shuffled + sweep", shuffled, False, True)):
            state, took, totals = await run_order(dsn, settings, listings, order, chunks, requeue=requeue,
                                                  sweep=sweep)
            describe(label, state, clean, truth, took, totals)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listings", type=int, default=10_000, help="corpus size (default 10,000)")
    ap.add_argument("--chunks", type=int, default=10,
                    help="parts the incremental orders index and deduplicate one after another (default 10)")
    ap.add_argument("--cap", type=int, nargs="+", default=[50],
                    help="candidate_cap values, one full set of runs each (default 50, the profile's)")
    ap.add_argument("--shops", type=int, default=8, help="shops (sources), 2-12 (default 8)")
    ap.add_argument("--corpus-seed", type=int, default=18, help="the corpus's seed (default 18)")
    ap.add_argument("--order-seed", type=int, default=7, help="the shuffled order's seed (default 7)")
    ap.add_argument("--dsn", help="use this database (its public.ads index and dedup tables are emptied) "
                                  "instead of a throwaway server")
    args = ap.parse_args()
    if args.listings < 2 or args.chunks < 1 or any(c < 1 for c in args.cap):
        ap.error("--listings >= 2, --chunks >= 1 and every --cap >= 1")
    configure_logging("warning")

    def go(dsn: str) -> None:
        asyncio.run(run(dsn, args.listings, args.chunks, args.cap, args.corpus_seed, args.order_seed, args.shops))

    if args.dsn:
        go(args.dsn)
    else:
        with ThrowawayPostgres(fast=True) as server:
            go(server.dsn)


if __name__ == "__main__":
    main()
