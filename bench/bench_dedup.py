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

With ``--corpus abt-buy`` the index holds product listings with realistic near-duplicate density
instead (:mod:`bench.corpus_products`: Abt-Buy's two shops' listings as product lines, each with
hard-negative siblings — another model number, colour or size — and listed by several of
``--shops`` shops with seeded edits), deduplicated with the product settings ``nearsync evaluate``
uses (:data:`~daemon.evaluation.evaluate.PRODUCT_PROFILE`, global scope, one-to-one across
sources)::

    python bench/bench_dedup.py --corpus abt-buy --indexed 100000 --records 5000 --prewarm
    python bench/bench_dedup.py --corpus abt-buy --indexed 100000 --records 5000 --profile dedup.pstats

It prints candidates per record, records/s per worker for the backlog, the documents the
PostgreSQL backend read and decoded per record (its document cache's misses; the candidates read only in part
for the worker's lead-field screen are counted apart; ``--cached-documents
N`` sets ``[index] cached_documents``), the worker's resident memory after the drain and the
single-record p50/p99 (``--sweep 20 200`` then times the idle worker's sweep at those rates, and
its CPU once it rests after a pass that saw no change).
``--snapshot B`` builds the corpus snapshot after the load, as ``nearsync
rarity refresh`` would (title-word rarity, and the candidate-key blocks larger than ``B`` listings,
which the lookups then leave out: block purging; ``--snapshot 0`` rarity only), and prints the
large blocks it found; without it the worker runs with no snapshot. ``--cap N`` sets ``[dedup]
candidate_cap`` (the profile's is 50). ``--profile FILE`` runs the backlog under cProfile in this process (the worker's side;
PostgreSQL's time is not in it), writes the raw statistics to FILE and prints where the time went
per batch and per pair. The single-record phase also prints where a one-record batch's time goes
(lookup and scoring, the component walk, re-clustering, the rest) for the fastest half, the middle
and the slowest 5% and 1% of the samples, with the records in their components.

Targets on the 2-core machine: ≥ 2,000 records/s per worker; p99 ≤ 10 ms per record at 1M (generated
ads); ≥ 1,000 records/s per worker and p99 ≤ 10 ms at 1M on the product corpus (issue 18).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import random
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import xxhash

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon import heap  # noqa: E402
from daemon.config import settings_from_mapping  # noqa: E402
from daemon.evaluation.datasets import abt_buy, default_data_dir  # noqa: E402
from daemon.evaluation.evaluate import PRODUCT_PROFILE  # noqa: E402
from daemon.evaluation.generator import generate_ads  # noqa: E402
from daemon.evaluation.loader import copy_ads, parse_price  # noqa: E402
from daemon.logs import configure_logging  # noqa: E402
from daemon.ops.migrate import upgrade  # noqa: E402
from daemon.ops.rarity import refresh_rarity  # noqa: E402
from daemon.db.queries import query  # noqa: E402
from daemon.db.throwaway import ThrowawayPostgres  # noqa: E402
from daemon.service import build_indexer, build_worker, open_source, opened_backend  # noqa: E402
from daemon.capture.documents import DocumentBuilder, SignaturePool  # noqa: E402
from daemon.capture.queue import Claimed  # noqa: E402


def resident_mb() -> float:
    """This process's resident memory (``VmRSS`` of ``/proc/self/status``) in MB; 0.0 where there is
    no ``/proc``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values`` (nearest rank)."""
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def bench_settings(dsn: str, concurrency: int | None = None, *, products: bool = False,
                   batch_size: int = 2000, cached_documents: int | None = None, max_block: int | None = None,
                   candidate_cap: int | None = None) -> Any:
    """Settings of the bench's daemon and worker (``batch_size`` records per batch; ``concurrency``
    None: the worker's default). ``products``: the product-listing settings of ``nearsync evaluate``
    on a set with a source column (:data:`PRODUCT_PROFILE`, global scope, best match per source,
    cross-source only) instead of the defaults (user scope). ``cached_documents``: ``[index]
    cached_documents`` (None: the daemon's default). ``max_block``: ``[dedup] max_block`` (None: the
    default). ``candidate_cap``: ``[dedup] candidate_cap`` (None: the profile's)."""
    daemon: dict[str, Any] = {"batch_size": batch_size, "poll_interval_s": 0.5}
    if concurrency:
        daemon["concurrency"] = concurrency
    cfg: dict[str, Any] = {"dedup": {"enabled": True}}
    if products:
        cfg = json.loads(json.dumps(PRODUCT_PROFILE))
        cfg["dedup"] |= {"best_match_per_source": True, "cross_source_only": True}
    if max_block is not None:
        cfg["dedup"]["max_block"] = max_block
    if candidate_cap is not None:
        cfg["dedup"]["candidate_cap"] = candidate_cap
    if cached_documents is not None:
        cfg["index"] = {"cached_documents": cached_documents}
    return settings_from_mapping({"database": {"dsn": dsn}, "source": {"create_reference_table": True},
                                  "daemon": daemon, **cfg}, env={})


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


async def drain_throughput(worker: Any, label: str, target: int = 2000, profile: str | None = None) -> None:
    """Drain the dedup queue with ``worker`` and print records/s per worker and the pairs scored per
    record. ``profile``: run the drain under cProfile, write the statistics to that file and print
    :func:`print_profile`'s summary."""
    prof = cProfile.Profile(time.process_time) if profile else None
    decoded0 = getattr(worker.handler.backend, "decoded", None)  # PostgresBackend: documents parsed (cache misses)
    screened0 = getattr(worker.handler.backend, "screened", None)  # and candidates read in part (lead-field screen)
    listed0 = getattr(worker.handler.backend, "screened_listed", None)  # of them, from their identifiers column
    async with worker.session():
        pg0 = postgres_cpu_s(worker.dsn)
        t0, c0 = time.perf_counter(), time.process_time()
        if prof:
            prof.enable()
        done = await worker.drain()
        if prof:
            prof.disable()
        t_dedup, cpu = time.perf_counter() - t0, time.process_time() - c0
        pg1 = postgres_cpu_s(worker.dsn)
    pairs, batches = worker.totals.get("pairs", 0), worker.totals.get("batches", 0)
    print(f"{label}: {done:,} records in {t_dedup:.1f} s = {done / t_dedup:,.0f} records/s per worker "
          f"(target >= {target:,}){' UNDER cProfile' if prof else ''}; {batches:,} batches; pairs scored {pairs:,} "
          f"= {pairs / max(1, done):.1f} per record ({worker.totals.get('reused', 0):,} of them candidates whose score "
          f"was known); candidate cap hit for {worker.totals.get('capped', 0):,} records; "
          f"links {worker.totals.get('links', 0):,}, flags {worker.totals.get('flags', 0):,}; "
          f"worker process CPU {cpu:.1f} s = {cpu / t_dedup:.0%} of the wall time ({cpu * 1000 / max(1, done):.1f} ms "
          f"per record)", flush=True)
    if decoded0 is not None:
        decoded = worker.handler.backend.decoded - decoded0
        print(f"  documents read and decoded (not in the document cache): {decoded:,} = "
              f"{decoded / max(1, done):.1f} per record", flush=True)
    if screened0 is not None:
        screened = worker.handler.backend.screened - screened0
        listed = "" if listed0 is None else \
            f" ({worker.handler.backend.screened_listed - listed0:,} of them from their identifiers column alone)"
        print(f"  candidate documents read in part for the lead-field screen: {screened:,} = "
              f"{screened / max(1, done):.1f} per record{listed}", flush=True)
    print(f"  worker process resident memory after the drain: {resident_mb():,.0f} MB", flush=True)
    if pg0 is not None and pg1 is not None:
        print(f"  PostgreSQL CPU during the drain (its backends): {pg1 - pg0:.1f} s = "
              f"{(pg1 - pg0) * 1000 / max(1, done):.1f} ms per record", flush=True)
    await print_final_state(worker.dsn)
    if prof and profile:
        prof.dump_stats(profile)
        print_profile(pstats.Stats(prof), batches=batches, pairs=pairs, records=done, wall=t_dedup)


async def print_final_state(dsn: str, table: str = "public.ads") -> None:
    """Print the links and flags the tables hold after a drain, with a digest of each (xxh64 of the
    sorted rows: links as (a, b, score), flags as (record, flag, original)). The per-batch counts
    of the throughput line depend on batching; these do not, so two runs over the same backlog
    must print the same digests whatever ``--concurrency`` or ``--batch-size``."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        links = sorted((a, b, round(float(sc), 1)) for a, b, sc, *_ in
                       await (await conn.execute(query("links_of_table"), {"table": table})).fetchall())
        flags = sorted((r[0], r[1], r[2]) for r in
                       await (await conn.execute(query("flags_of_table"), {"table": table})).fetchall())
    print(f"  final state: {len(links):,} links (digest {xxhash.xxh64_hexdigest(repr(links).encode())}), {len(flags):,} flags "
          f"(digest {xxhash.xxh64_hexdigest(repr(flags).encode())})", flush=True)


def postgres_cpu_s(dsn: str) -> float | None:
    """CPU seconds (user + system) used so far by the backends of the PostgreSQL server at ``dsn``
    (the children of its postmaster, read from ``/proc``); None when the server is not on this
    machine or not readable. Backends that exited are not counted: read it around work done on
    long-lived connections."""
    try:
        with psycopg.connect(dsn, autocommit=True) as c:
            row = c.execute("SHOW data_directory").fetchone()
        postmaster = int((Path(row[0]) / "postmaster.pid").read_text().split()[0]) if row else None
        total, tick = 0.0, os.sysconf("SC_CLK_TCK")
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == postmaster:  # field 4 of stat: the parent pid
                total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        return total
    except (OSError, ValueError, IndexError, psycopg.Error):
        return None


#: What :func:`print_profile` reports: (label, file name ends with, function name, "cum" or "tot").
PROFILE_ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("DedupHandler.process (the whole batch, worker side)", "dedup/worker.py", "process", "cum"),
    ("  backend.get (all calls: the batch's documents, under the lock, recluster)", "backends/postgres.py", "get",
     "cum"),
    ("  score_records (candidate lookup + scoring)", "dedup/worker.py", "score_records", "cum"),
    ("    backend.candidates_many (query + decoding candidates)", "backends/postgres.py", "candidates_many", "cum"),
    ("    score_found (scoring the pairs)", "dedup/worker.py", "score_found", "cum"),
    ("  _revalidate (under the lock: versions, re-scoring)", "dedup/worker.py", "_revalidate", "cum"),
    ("  _recluster (components re-read, clustered, flags written)", "dedup/worker.py", "_recluster", "cum"),
    ("    build_clusters", "dedup/clusters.py", "build_clusters", "cum"),
    ("    mutual_best_per_source", "dedup/worker.py", "mutual_best_per_source", "cum"),
    ("    _decisions_among", "dedup/worker.py", "_decisions_among", "cum"),
    ("    _write_clusters_and_flags", "dedup/worker.py", "_write_clusters_and_flags", "cum"),
    ("    average_link_clusters (pair_score: unlinked pairs scored)", "dedup/clusters.py", "average_link_clusters",
     "cum"),
    ("score_sides (all pairs, all calls)", "scoring/combine.py", "score_sides", "cum"),
    ("  exact / title_first (model numbers, phones, e-mails)", "scoring/combine.py", "title_first", "cum"),
    ("  exact (model numbers, phones, e-mails)", "scoring/combine.py", "exact", "cum"),
    ("  minhash (body Jaccard)", "scoring/combine.py", "minhash", "cum"),
    ("  text (token set, Levenshtein, Jaro-Winkler)", "scoring/combine.py", "text", "cum"),
    ("  Side.identifier_set (code sets, made once per document)", "scoring/side.py", "identifier_set", "cum"),
    ("  _detail (reason texts, links only)", "scoring/combine.py", "_detail", "cum"),
    ("PairScore.summary", "scoring/combine.py", "summary", "cum"),
    ("jsoncodec.loads (all calls)", "db/jsoncodec.py", "loads", "cum"),
    ("jsoncodec.dumps (all calls)", "db/jsoncodec.py", "dumps", "cum"),
    ("PostgresBackend._documents (rows -> documents, cache look-ups)", "backends/postgres.py", "_documents", "cum"),
    ("  PostgresBackend._decode (cache misses: JSON parsed)", "backends/postgres.py", "_decode", "cum"),
)


def print_profile(stats: pstats.Stats, *, batches: int, pairs: int, records: int, wall: float, top: int = 15) -> None:
    """Print where the profiled drain's time went: the rows of :data:`PROFILE_ROWS` (cumulative or
    own time, share of the process total, per batch, per record and per scored pair) and the
    ``top`` functions by own time. The times are this process's CPU time, under cProfile's overhead
    (which inflates many small Python calls): read them as shares, not as absolute figures."""
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]  # {(file, line, func): (cc, nc, tt, ct, callers)}
    total = sum(v[2] for v in raw.values())
    print(f"profile (cProfile, worker process CPU time): {total:.1f} s profiled over {wall:.1f} s wall, "
          f"{batches:,} batches, {records:,} records, {pairs:,} pairs", flush=True)
    print(f"  {'':<72} {'s':>7} {'share':>6} {'ms/batch':>9} {'ms/rec':>7} {'us/pair':>8} {'calls':>9}")
    for label, file_end, func, kind in PROFILE_ROWS:
        hits = [v for (f, _line, fn), v in raw.items() if f.replace("\\", "/").endswith(file_end) and fn == func]
        if not hits:
            continue
        t = sum(v[3] if kind == "cum" else v[2] for v in hits)
        calls = sum(v[1] for v in hits)
        print(f"  {label:<72} {t:7.2f} {t / total:6.1%} {t * 1000 / max(1, batches):9.1f} "
              f"{t * 1000 / max(1, records):7.3f} {t * 1e6 / max(1, pairs):8.1f} {calls:9,}")
    print(f"  top {top} functions by own time:")
    for (f, line, fn), v in sorted(raw.items(), key=lambda kv: -kv[1][2])[:top]:
        where = "/".join(Path(f).parts[-2:]) if f != "~" else "builtin"
        print(f"    {v[2]:7.2f} s {v[2] / total:6.1%} {v[1]:>10,} calls  {fn} ({where}:{line})")


async def single_record_latency(dsn: str, worker: Any, ids: list[str], indexed: int) -> None:
    """Time the worker's full handling of each record of ``ids`` in one-record batches; print p50/p99
    and the pairs scored per record. The connection is set up as the worker's pooled ones are
    (:func:`~daemon.db.pool.configure_session`: JIT off, plans picked per call, orjson): before, this phase
    ran on a bare connection, where PostgreSQL JIT-compiled the component walk and json was decoded
    by the standard library, which the worker never does (the walk took ~2x as long: 16.5 against
    8.8 ms a record on average, 20,000 product listings, load average ~4)."""
    from daemon.db.pool import configure_session

    if not ids:  # --samples 0: nothing to time
        return
    lat = []
    cpu = []
    pairs = 0
    phases = PhaseTimer(worker.handler)
    rows: list[tuple[float, dict[str, float], int]] = []
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await configure_session(conn)
            pg0 = postgres_cpu_s(dsn)
            for rid in ids:
                c = Claimed("public.ads", rid, "U", 0, time.time(), 0)  # type: ignore[arg-type]
                phases.reset()
                t, c0 = time.perf_counter(), time.process_time()
                res = await worker.handler.process(conn, [c])
                lat.append((time.perf_counter() - t) * 1000)
                cpu.append((time.process_time() - c0) * 1000)
                pairs += res.counts.get("pairs", 0)
                rows.append((lat[-1], dict(phases.ms), res.counts.get("pairs", 0)))
            pg1 = postgres_cpu_s(dsn)
    finally:
        phases.restore()
    print(f"single-record dedup latency with {indexed:,} indexed: p50 {pct(lat, 50):.1f} ms, p99 {pct(lat, 99):.1f} ms, "
          f"mean {statistics.mean(lat):.1f} ms over {len(lat)} records, {pairs / max(1, len(lat)):.1f} pairs scored "
          "per record (target p99 <= 10 ms)", flush=True)
    pg = f"; PostgreSQL CPU {(pg1 - pg0) * 1000 / max(1, len(lat)):.1f} ms per record" if pg0 is not None and pg1 is not None else ""
    print(f"  its worker process CPU: p50 {pct(cpu, 50):.1f} ms, p99 {pct(cpu, 99):.1f} ms, mean {statistics.mean(cpu):.1f} ms"
          f"{pg} (on a busy machine the wall time above is mostly waiting for a core)", flush=True)
    print_phase_split(rows)


class PhaseTimer:
    """Wall time of a dedup handler's phases per call of ``process``, by wrapping methods on the
    instances (the bench's own instrument; the classes are unchanged): ``lookup+score``
    (:meth:`DedupHandler.score_records`: candidate lookup, reads and scoring, before the lock),
    ``walk`` (:meth:`DedupHandler._parts`: the component walk and its links), ``recluster``
    (:meth:`DedupHandler._recluster`, the walk included), ``get`` (the backend's ``get``, all
    calls) and ``score`` (:meth:`DedupHandler._score`, pairs re-scored); the rest of ``process``
    (the batch's documents, the lock, revalidation, the link writes) is the total minus the first
    three. ``ms`` holds milliseconds per phase since :meth:`reset`, and ``nodes`` (records the walk
    returned), ``get_n`` (documents asked for) and ``score_n`` (pairs) their counts."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler
        self.ms: dict[str, float] = {}
        self._wrapped = [(handler, "score_records", self._timed(handler.score_records, "lookup+score")),
                         (handler, "_parts", self._timed(handler._parts, "walk",
                                                         "nodes", lambda args, out: sum(len(p.nodes) for p in out))),
                         (handler, "_recluster", self._timed(handler._recluster, "recluster")),
                         (handler.backend, "get", self._timed(handler.backend.get, "get", "get_n",
                                                              lambda args, out: len(args[1]))),
                         (handler, "_score", self._timed_sync(handler._score, "score", "score_n"))]
        for obj, attr, wrapper in self._wrapped:
            setattr(obj, attr, wrapper)

    def _add(self, name: str, t0: float, count: str | None = None, n: float = 1) -> None:
        self.ms[name] = self.ms.get(name, 0.0) + (time.perf_counter() - t0) * 1000
        if count is not None:
            self.ms[count] = self.ms.get(count, 0.0) + n

    def _timed(self, method: Any, name: str, count: str | None = None,
               amount: Any = lambda args, out: 1) -> Any:
        async def timed(*args: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            out = await method(*args, **kw)
            self._add(name, t, count, amount(args, out))
            return out
        return timed

    def _timed_sync(self, method: Any, name: str, count: str) -> Any:
        def timed(*args: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            out = method(*args, **kw)
            self._add(name, t, count)
            return out
        return timed

    def reset(self) -> None:
        self.ms = {}

    def restore(self) -> None:
        """Remove the wrappers (the instances' own attributes): the class methods show again."""
        for obj, attr, _ in self._wrapped:
            obj.__dict__.pop(attr, None)


def print_phase_split(rows: list[tuple[float, dict[str, float], int]]) -> None:
    """Where a one-record batch's wall time goes, for the fastest half, the middle and the slowest
    5% and 1% of the samples (``rows``: total ms, :class:`PhaseTimer` ms, pairs scored): mean ms per
    phase, pairs and records in the walked components, so the figures say what makes the p99."""
    if len(rows) < 20:
        return
    rows = sorted(rows, key=lambda r: r[0])
    n = len(rows)
    groups = (("fastest 50%", rows[: n // 2]), ("50-95%", rows[n // 2: n * 95 // 100]),
              ("slowest 5%", rows[n * 95 // 100:]), ("slowest 1%", rows[n * 99 // 100:]))
    print("  where a one-record batch's time goes (mean ms; pairs scored; records in its components):", flush=True)
    for label, group in groups:
        if not group:
            continue
        def mean(key: str, g: list[tuple[float, dict[str, float], int]] = group) -> float:
            return statistics.mean(r[1].get(key, 0.0) for r in g)
        total = statistics.mean(r[0] for r in group)
        walk, recl, look = mean("walk"), mean("recluster"), mean("lookup+score")
        print(f"    {label:>11} ({len(group)}): total {total:.1f} = lookup+score {look:.1f}, walk {walk:.1f}, "
              f"recluster after the walk {recl - walk:.1f}, rest {total - look - recl:.1f}; "
              f"pairs {statistics.mean(r[2] for r in group):.0f}, component records {mean('nodes'):.0f}; "
              f"documents read {mean('get_n'):.0f} in {mean('get'):.1f} ms, pairs re-scored {mean('score_n'):.0f} "
              f"in {mean('score'):.1f} ms", flush=True)


async def run_indexed(dsn: str, indexed: int, backlog: int, samples: int, reuse: bool = False,
                      concurrency: int | None = None, seed: int = 5, warm: bool = False) -> None:
    """``--indexed`` mode (see the module docstring)."""
    from bench.bench_api import load_index

    ads, took = await load_index(dsn, indexed, reuse=reuse)
    del ads  # 1M generated ads kept alive would make every full collection of the worker scan them
    gc.collect()
    await time_backlog(dsn, bench_settings(dsn, concurrency), indexed, backlog, samples, took=took, seed=seed,
                       warm=warm, label=f"dedup throughput with {indexed:,} indexed")


async def time_backlog(dsn: str, settings: Any, indexed: int, backlog: int, samples: int, *, took: float | None,
                       seed: int, warm: bool, label: str, target: int = 2000, profile: str | None = None,
                       sweep: list[float] | None = None, sweep_s: float = 60.0) -> None:
    """After the index is loaded (in ``took`` s, None when reused): print the load rate, put ``backlog``
    of the ``indexed`` records (ids 1..indexed, picked with ``seed``) on the dedup queue, drain it
    (:func:`drain_throughput`, printed under ``label``) and time ``samples`` records one by one
    (:func:`single_record_latency`). ``warm``: :func:`prewarm` first. Every link, part, cluster and
    flag of the table is forgotten first (named query ``dedup_reset``): with ``--reuse`` they would
    otherwise be the earlier runs' starting point. ``sweep``: then :func:`sweep_cost` at these rates,
    ``sweep_s`` seconds each."""
    if took:
        print(f"indexed {indexed:,} documents through the backend in {took:.1f} s ({indexed / took:,.0f} docs/s)",
              flush=True)
    if warm:
        prewarm(dsn)
    rng = random.Random(seed)
    ids = [str(i) for i in rng.sample(range(1, indexed + 1), min(backlog, indexed))]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        # A reused index keeps the links, clusters and flags of the runs before: start from none, as on
        # a fresh server, so the final-state digests of every run over the same backlog compare.
        await conn.execute(query("dedup_reset"), {"table": "public.ads"})
        await conn.execute(query("enqueue_fresh"), {"queue": "dedup", "table": "public.ads", "record_ids": ids,
                                                    "ops": ["U"] * len(ids)})
    async with opened_backend(settings) as backend:
        worker = await build_worker(settings, backend)
        heap.settle(batches=True)  # as `nearsync dedup` does once started (the collector runs after batches)
        await drain_throughput(worker, label, target=target, profile=profile)
        await single_record_latency(dsn, worker, [str(i) for i in rng.sample(range(1, indexed + 1), samples)], indexed)
        if sweep:
            await sweep_cost(dsn, worker, sweep, sweep_s)


async def sweep_cost(dsn: str, worker: Any, rates: list[float], seconds: float) -> None:
    """``--sweep``: the dedup worker's sweep (:mod:`daemon.dedup.sweep`) run beside the worker for
    ``seconds`` per rate of ``rates`` (records per second asked; the worker idle, its links, clusters
    and flags those the backlog left), after 3 s of warm-up; prints records swept per second and the
    CPU of the worker process and of PostgreSQL, per record and as a share of a core. When a pass
    ends within the window and the sweep rests (nothing changed while the pass ran), the sweeping
    part ends there and the rest of the window is printed apart: the CPU of a resting sweep."""
    from daemon.dedup.sweep import sweeping

    def cpu() -> tuple[float, float | None, float]:
        return time.process_time(), postgres_cpu_s(dsn), time.perf_counter()

    def share(a: tuple[float, float | None, float], b: tuple[float, float | None, float], n: int) -> str:
        wall, pct = b[2] - a[2], ".0%" if n else ".2%"  # per record while sweeping; finer while resting
        pg = (f"; PostgreSQL CPU {(b[1] - a[1]) / wall:{pct}} of a core" + (
              f" ({(b[1] - a[1]) * 1000 / n:.1f} ms per record)" if n else "")
              if a[1] is not None and b[1] is not None else "")
        mine = f"worker CPU {(b[0] - a[0]) / wall:{pct}} of a core" + (f" ({(b[0] - a[0]) * 1000 / n:.1f} ms per record)"
                                                                     if n else "")
        return mine + pg

    idle = asyncio.Event()
    idle.set()  # nothing else is queued: the worker is idle (its handler needs the backend, not the loop)
    for rate in rates:
        async with sweeping(dsn, "public.ads", worker.handler, rate, idle, lambda: False) as sw:
            assert sw is not None
            await asyncio.sleep(3.0)
            n0, start = sw.swept, cpu()
            end = start[2] + seconds
            while time.perf_counter() < end and not sw.resting:
                await asyncio.sleep(min(0.5, max(0.0, end - time.perf_counter())))
            n1, swept = sw.swept, cpu()
            if sw.resting:
                await asyncio.sleep(max(0.0, end - time.perf_counter()))
                rested = cpu()
        n, wall = n1 - n0, swept[2] - start[2]
        print(f"sweep at sweep_per_s = {rate:g} (chunks of {sw.chunk}): {n:,} records in {wall:.1f} s = "
              f"{n / wall:.1f} records/s; {share(start, swept, max(1, n))}", flush=True)
        if sw.resting:
            print(f"  then resting (the pass saw no change) for {rested[2] - swept[2]:.1f} s: "
                  f"{share(swept, rested, 0)}", flush=True)


def corpus_row(i: int, fields: dict[str, Any]) -> dict[str, Any]:
    """A corpus listing as an ``ads`` row with id ``i`` (created one second after listing ``i - 1``)."""
    return {"id": i, "user_id": None, "category": fields.get("category"), "title": fields["title"],
            "body": fields["body"], "price": fields["price"], "lat": None, "lon": None, "status": "active",
            "source": fields["source"], "created_at": (CORPUS_EPOCH + timedelta(seconds=i)).isoformat()}


CORPUS_EPOCH = datetime(2024, 1, 1, tzinfo=timezone.utc)


async def load_corpus(settings: Any, listings: list[Any], batch: int = 2000, reuse: bool = False) -> float:
    """Write the listings (ids 1..n) straight into the index with the documents the daemon would build
    under ``settings`` (signed in a process pool, as ``bench_api.load_index`` does); returns the
    seconds taken, 0.0 when ``reuse`` finds an index of exactly n documents already there."""
    n = len(listings)
    table = await open_source(settings)
    builder = DocumentBuilder.from_settings(settings, table)
    pool = SignaturePool(builder, workers=os.cpu_count() or 2, min_parallel=64)
    t0 = time.perf_counter()
    try:
        async with opened_backend(settings) as backend:
            if reuse and await backend.count(table.name) == n:
                print(f"  reusing the index: it holds {n:,} documents", flush=True)
                return 0.0
            await backend.clear(table.name)
            for start in range(0, n, batch):
                items = [(corpus_row(i + 1, listings[i].fields), 1) for i in range(start, min(n, start + batch))]
                built = await pool.build(items)
                errors = [d for d in built if isinstance(d, Exception)]
                if errors:
                    print(f"  {len(errors)} listings not signed: {errors[0]}", flush=True)
                await backend.write([d for d in built if not isinstance(d, Exception)], [])
                done = min(n, start + batch)
                if done % 20000 < batch or done == n:
                    print(f"  indexed {done:,}/{n:,} ({done / (time.perf_counter() - t0):,.0f} docs/s)", flush=True)
    finally:
        pool.close()
    with psycopg.connect(settings.require_dsn(), autocommit=True) as c:  # what autovacuum would do after a bulk load
        c.execute("VACUUM ANALYZE")
    return time.perf_counter() - t0


async def run_corpus(dsn: str, indexed: int, backlog: int, samples: int, *, reuse: bool = False,
                     concurrency: int | None = None, seed: int = 5, warm: bool = False, shops: int = 8,
                     corpus_seed: int = 18, batch_size: int = 500, profile: str | None = None,
                     cached_documents: int | None = None, snapshot: int | None = None,
                     candidate_cap: int | None = None, sweep: list[float] | None = None,
                     sweep_s: float = 60.0) -> None:
    """``--corpus abt-buy`` (see the module docstring): build the product corpus, index it, put a
    backlog of ``backlog`` random listings through the worker, then time ``samples`` one by one
    (``cached_documents``: the backend's document cache bound, None: the daemon's default;
    ``snapshot``: build the corpus snapshot with this ``max_block`` first, None: no snapshot;
    ``candidate_cap``: ``[dedup] candidate_cap``, None: the profile's 50; ``sweep``, ``sweep_s``:
    the sweep's cost afterwards, :func:`sweep_cost`)."""
    from bench.corpus_products import build_corpus

    data = default_data_dir()
    if data is None or not (data / "abt-buy" / "Abt.csv").is_file():
        raise SystemExit("--corpus abt-buy needs ../shared/data/abt-buy (or NEARSYNC_DATA)")
    settings = bench_settings(dsn, concurrency, products=True, batch_size=batch_size, cached_documents=cached_documents,
                              max_block=snapshot, candidate_cap=candidate_cap)
    upgrade(settings)
    t0 = time.perf_counter()
    listings = build_corpus(indexed, seed=corpus_seed, data_dir=data, shops=shops)
    families = len({x.family for x in listings})
    products = len({x.product for x in listings})
    print(f"corpus: {indexed:,} listings of {products:,} products in {families:,} product lines "
          f"({indexed / products:.1f} listings per product, {indexed / families:.1f} per line; {shops} shops; "
          f"corpus seed {corpus_seed}) built in {time.perf_counter() - t0:.1f} s", flush=True)
    took = await load_corpus(settings, listings, reuse=reuse)
    del listings
    gc.collect()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(query("rarity_deactivate"), {"table": "public.ads"})  # a reused index's older snapshot
    if snapshot is not None:
        async with opened_backend(settings) as backend:
            report = await refresh_rarity(settings, backend, progress=False, max_block=snapshot)
        print(f"corpus snapshot: {report['tokens']:,} title words, {report['large_blocks']:,} blocks larger than "
              f"{snapshot:,} listings, built in {report['seconds']:.1f} s", flush=True)
    await time_backlog(dsn, settings, indexed, backlog, samples, took=took, seed=seed, warm=warm,
                       label=f"dedup throughput, product corpus, {indexed:,} indexed, global scope", target=1000,
                       profile=profile, sweep=sweep, sweep_s=sweep_s)


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
    ap.add_argument("--corpus", choices=("ads", "abt-buy"), default="ads",
                    help="ads (default): generated ads, user scope; abt-buy: product listings with realistic "
                         "near-duplicate density, global scope, product settings (needs --indexed)")
    ap.add_argument("--shops", type=int, default=8, help="with --corpus abt-buy: shops (sources), 2-12 (default 8)")
    ap.add_argument("--corpus-seed", type=int, default=18, help="with --corpus abt-buy: the corpus's seed (default 18)")
    ap.add_argument("--batch-size", type=int,
                    help="with --corpus abt-buy: records per worker batch (default 500, as nearsync evaluate)")
    ap.add_argument("--profile", metavar="FILE",
                    help="with --corpus abt-buy: run the backlog under cProfile, write the statistics to FILE "
                         "and print where the time went")
    ap.add_argument("--cached-documents", type=int,
                    help="with --corpus abt-buy: [index] cached_documents, the PostgreSQL backend's document "
                         "cache bound (default: the daemon's, 30,000)")
    ap.add_argument("--snapshot", type=int, metavar="MAX_BLOCK",
                    help="with --corpus abt-buy: build the corpus snapshot after the load (nearsync rarity "
                         "refresh: title-word rarity, and the blocks larger than MAX_BLOCK listings left out "
                         "of the lookups; 0: rarity only); default: no snapshot")
    ap.add_argument("--cap", type=int, metavar="N",
                    help="with --corpus abt-buy: [dedup] candidate_cap (default: the products profile's, 50)")
    ap.add_argument("--sweep", type=float, nargs="+", metavar="RATE",
                    help="with --corpus abt-buy: afterwards, run the idle worker's sweep at each [dedup] "
                         "sweep_per_s RATE for --sweep-s seconds and print its rate and CPU cost")
    ap.add_argument("--sweep-s", type=float, default=60.0, help="with --sweep: seconds per rate (default 60)")
    args = ap.parse_args()
    if args.sweep is not None and (any(r <= 0 for r in args.sweep) or args.sweep_s <= 0):
        ap.error("--sweep: every RATE and --sweep-s are positive")
    if args.cap is not None and args.cap < 1:
        ap.error("--cap: N is a positive number of candidates")
    if args.snapshot is not None and args.snapshot < 0:
        ap.error("--snapshot: MAX_BLOCK is 0 or a positive number of listings")
    configure_logging("warning")
    if args.corpus == "abt-buy":
        if not args.indexed:
            ap.error("--corpus abt-buy needs --indexed N (the listings written into the index)")

        def corpus(dsn: str) -> None:
            asyncio.run(run_corpus(dsn, args.indexed, args.records, args.samples, reuse=args.reuse,
                                   concurrency=args.concurrency, seed=args.seed, warm=args.prewarm, shops=args.shops,
                                   corpus_seed=args.corpus_seed, batch_size=args.batch_size or 500,
                                   profile=args.profile, cached_documents=args.cached_documents,
                                   snapshot=args.snapshot, candidate_cap=args.cap, sweep=args.sweep,
                                   sweep_s=args.sweep_s))
        if args.dsn:
            corpus(args.dsn)
        else:
            with ThrowawayPostgres(fast=True, settings={"shared_buffers": shared_buffers_for(args.indexed)}) as server:
                corpus(server.dsn)
        return
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
