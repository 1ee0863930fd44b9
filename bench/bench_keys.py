"""Benchmark of the PostgreSQL backend's candidate-key store (a script, not a test): lookups before/after.

Measures the candidate lookups of the dedup worker and the check API (``candidates`` and
``candidates_many``) at a realistic index size, for the current key layout and for the layout of an
older revision, in one run and interleaved:

1. ``--indexed N`` signed ads are written into a database through the backend (the daemon's
   document builder on a fork pool of ``--workers`` processes; with ``--dsn`` and ``--reuse`` an
   index that already holds N documents is kept);
2. with ``--baseline REV``, that database is cloned (``CREATE DATABASE … TEMPLATE``) and the clone
   is downgraded with this revision's migrations to the newest migration of ``REV`` (migration
   0010's downgrade turns the key arrays back into ``nearsync.document_keys`` rows), then vacuumed;
   the clone is the index as ``REV`` keeps it, with the same documents;
3. ``--samples`` random indexed documents are looked up (their own keys and scope, themselves
   excluded, ``limit`` 51 and ``min_match`` 1 as the worker asks) with ``candidates``, and in chunks
   of 200 with ``candidates_many`` (as the worker's ``LOOKUP_CHUNK``), each layout with its own
   revision's SQL (``sql/queries/pg_index.sql`` at ``REV``: the parameters are the same), alternating
   layouts lookup by lookup, ``--rounds`` times. The results of the two layouts are compared too.

Latency is the wall time of one query's execute and fetch (binary, as the backend reads) from this
process, p50/p99/mean per layout; the server's shared buffers are warmed by a first untimed pass.
Usage (from the repository root)::

    python bench/bench_keys.py --indexed 200000 --baseline c445054 [--samples 1000] [--rounds 3]
    python bench/bench_keys.py --indexed 1000000 --baseline c445054 --dsn postgresql://... --reuse

Target (issue 20): no slower per lookup than the row-per-key layout at 1,000,000 documents.
Linux only (fork).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_api import row_of  # noqa: E402
from daemon.backends.pg_encoding import encode_document, key_hashes, keys_of  # noqa: E402
from daemon.capture.documents import DocumentBuilder  # noqa: E402
from daemon.config import settings_from_mapping  # noqa: E402
from daemon.db.arrays import Int4Array, Int8Array  # noqa: E402
from daemon.db.throwaway import ThrowawayPostgres  # noqa: E402
from daemon.evaluation.generator import generate_ads  # noqa: E402
from daemon.ops.migrate import downgrade, upgrade  # noqa: E402
from daemon.service import open_source, opened_backend  # noqa: E402

TABLE = "public.ads"
LIMIT = 51  # candidate_cap + 1, as the dedup worker asks
CHUNK = 200  # daemon.dedup.worker.LOOKUP_CHUNK

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.M)  # as daemon.db.queries reads sql/queries
_builder: DocumentBuilder | None = None


def _build(items: list[tuple[dict[str, Any], int]]) -> list[Any]:
    """Fork-pool task: sign and encode a chunk of rows (the builder is inherited from the parent)."""
    assert _builder is not None
    return [encode_document(d) for d in _builder.build_many(items) if not isinstance(d, Exception)]


def settings_for(dsn: str) -> Any:
    """The bench's settings: the reference ``ads`` table, dedup on (scope ``user``)."""
    return settings_from_mapping({"database": {"dsn": dsn}, "source": {"create_reference_table": True},
                                  "dedup": {"enabled": True}}, env={})


async def load(dsn: str, n: int, workers: int, reuse: bool, batch: int = 2000) -> None:
    """Write ``n`` generated ads (seed 11, as ``bench_api.py``) into the index of ``dsn``."""
    global _builder
    s = settings_for(dsn)
    upgrade(s)
    table = await open_source(s)
    async with opened_backend(s) as backend:
        if reuse and await backend.count(table.name) == n:
            print(f"reusing the index: it holds {n:,} documents", flush=True)
            return
        _builder = DocumentBuilder.from_settings(s, table)
        ads = [g.fields for g in generate_ads(n, seed=11)]
        chunks = [[(row_of(i + 1, ads[i]), 1) for i in range(st, min(n, st + batch))] for st in range(0, n, batch)]
        del ads
        await backend.clear(table.name)
        t0 = time.perf_counter()
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for i, docs in enumerate(pool.imap(_build, chunks)):
                await backend.write(docs, [])
                if (i + 1) % 25 == 0:
                    done = (i + 1) * batch
                    print(f"  indexed {done:,}/{n:,} ({done / (time.perf_counter() - t0):,.0f} docs/s)", flush=True)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("VACUUM ANALYZE")
    print(f"indexed {n:,} documents in {time.perf_counter() - t0:.0f} s", flush=True)


def queries_at(revision: str | None) -> dict[str, str]:
    """``candidates`` and ``candidates_many`` of ``sql/queries/pg_index.sql`` at git ``revision``
    (None: the working tree). A revision without a ``candidates`` query (``candidates`` is one lookup
    of ``candidates_many`` there) gets ``candidates`` None: :func:`one` then runs ``candidates_many``
    with one lookup, as that revision's backend does."""
    if revision is None:
        text = (REPO / "sql" / "queries" / "pg_index.sql").read_text()
    else:
        text = subprocess.run(["git", "show", f"{revision}:sql/queries/pg_index.sql"], cwd=REPO, check=True,
                              capture_output=True, text=True).stdout
    parts = _NAME.split(text)
    named = {name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2], strict=True)}
    return {"candidates": named.get("candidates"), "candidates_many": named["candidates_many"]}


def clone_at(server_dsn: str, source_db: str, name: str, revision: str) -> str:
    """A copy of database ``source_db`` downgraded to the newest migration of git ``revision``; its DSN."""
    down_to = subprocess.run(["git", "ls-tree", "--name-only", revision, "migrations/versions/"], cwd=REPO,
                             check=True, capture_output=True, text=True).stdout.split()
    target = max(Path(p).name.split("_", 1)[0] for p in down_to if p.endswith(".py"))
    with psycopg.connect(server_dsn, autocommit=True) as c:
        c.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        c.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(source_db)))
    dsn = server_dsn.rsplit("/", 1)[0] + "/" + name
    t0 = time.perf_counter()
    downgrade(settings_for(dsn), target)
    took = time.perf_counter() - t0
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("VACUUM FULL ANALYZE")  # as a freshly loaded index (the downgrade rewrote every row)
    print(f"cloned the index and downgraded the clone to {target} (the schema of {revision}) in {took:.0f} s",
          flush=True)
    return dsn


def lookups(dsn: str, samples: int, seed: int) -> list[tuple[str, list[int]]]:
    """``samples`` random indexed documents as ``(record_id, sorted key hashes)``."""
    with psycopg.connect(dsn) as c:
        n = c.execute("SELECT count(*) FROM nearsync.documents WHERE NOT deleted").fetchone()[0]  # type: ignore[index]
        ids = [str(i) for i in random.Random(seed).sample(range(1, n + 1), samples)]
        rows = c.execute("SELECT record_id, scope, keys, signature FROM nearsync.documents WHERE table_name = %s "
                         "AND record_id = ANY(%s)", (TABLE, ids)).fetchall()
    # keys NULL: the signature's own (migration 0013), rebuilt as the backend's reads do
    found = {rid: sorted(key_hashes(TABLE, scope, keys if keys is not None else keys_of(sig) or []))
             for rid, scope, keys, sig in rows}
    return [(rid, found[rid]) for rid in ids if found.get(rid)]


def one(conn: psycopg.Connection, text: str | None, rid: str, hashes: list[int],
        many_text: str = "") -> tuple[float, list[tuple[str, int]]]:
    """One ``candidates`` query (or, with ``text`` None, one lookup of ``many_text``, the
    ``candidates_many`` query); (milliseconds, [(record_id, matched)])."""
    if text is None:
        ms, found = many(conn, many_text, [(rid, hashes)])
        return ms, [(record_id, matched) for _, record_id, matched in found]
    t = time.perf_counter()
    with conn.cursor(binary=True) as cur:
        cur.execute(text, {"table": TABLE, "keys": Int8Array(hashes), "min_match": 1, "limit": LIMIT,  # type: ignore[arg-type]
                           "exclude_id": rid, "exclude_source": None})
        rows = cur.fetchall()
    return (time.perf_counter() - t) * 1000, [(r[0], r[8]) for r in rows]


def many(conn: psycopg.Connection, text: str, chunk: list[tuple[str, list[int]]]) -> tuple[float, list[tuple[int, str, int]]]:
    """One ``candidates_many`` query for ``chunk``; (milliseconds, [(qid, record_id, matched)])."""
    qids = [i for i, (_, h) in enumerate(chunk) for _ in h]
    keys = [k for _, h in chunk for k in h]
    t = time.perf_counter()
    with conn.cursor(binary=True) as cur:
        cur.execute(text, {"table": TABLE, "qids": Int4Array(qids), "keys": Int8Array(keys), "min_match": 1,  # type: ignore[arg-type]
                           "limit": LIMIT, "exclude_ids": [rid for rid, _ in chunk],
                           "exclude_sources": [None] * len(chunk)})
        rows = cur.fetchall()
        ranked = cur.description is not None and cur.description[1].name == "rn"
    ms = (time.perf_counter() - t) * 1000
    if ranked:  # hit rows (qid, rn, matched, record_id, ...) beside document rows (qid NULL)
        return ms, [(q, rid, matched) for q, _, matched, rid in sorted(r[:4] for r in rows if r[0] is not None)]
    return ms, [(r[0], r[2], r[1]) for r in rows]


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``."""
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def compare(variants: list[tuple[str, str, dict[str, str]]], samples: list[tuple[str, list[int]]], rounds: int) -> None:
    """Time both queries on every variant ``(name, dsn, queries)``, interleaved; print the figures."""
    conns = {name: psycopg.connect(dsn, autocommit=True) for name, dsn, _ in variants}
    for c in conns.values():
        c.execute("SET jit = off")  # as the daemon's pools (daemon.db.pool.configure_session)
    single: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    multi: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    chunks = [samples[i:i + CHUNK] for i in range(0, len(samples), CHUNK)]
    differ = 0
    for r in range(rounds + 1):  # round 0 warms the caches and is not counted
        for rid, hashes in samples:
            got = []
            for name, _, q in variants:
                ms, res = one(conns[name], q["candidates"], rid, hashes, q["candidates_many"])
                got.append(res)
                if r:
                    single[name].append(ms)
            differ += r == 1 and any(g != got[0] for g in got)
        for chunk in chunks:
            got = []
            for name, _, q in variants:
                ms, res = many(conns[name], q["candidates_many"], chunk)
                got.append(res)
                if r:
                    multi[name].append(ms)
            differ += r == 1 and any(g != got[0] for g in got)
        print(f"round {r}{' (warm-up, not counted)' if not r else ''} done (load {os.getloadavg()[0]:.2f})", flush=True)
    for c in conns.values():
        c.close()
    print(f"\nresults that differ between the layouts: {differ}")
    print(f"{'layout':>18} {'candidates p50/p99/mean ms':>28} {'candidates_many (200 lookups) p50/p99/mean ms':>48}")
    for name, _, _ in variants:
        s, m = single[name], multi[name]
        print(f"{name:>18} {pct(s, 50):>10.2f} {pct(s, 99):>7.2f} {statistics.mean(s):>7.2f}"
              f" {pct(m, 50):>22.1f} {pct(m, 99):>9.1f} {statistics.mean(m):>9.1f}"
              f"   ({len(s):,} and {len(m):,} queries)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--indexed", type=int, default=200_000, help="documents in the index (default 200,000)")
    ap.add_argument("--baseline", help="also time the key layout of this git revision (a downgraded clone)")
    ap.add_argument("--samples", type=int, default=1000, help="documents looked up per round (default 1,000)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    ap.add_argument("--seed", type=int, default=5, help="picks the documents looked up")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="signing processes for the load")
    ap.add_argument("--dsn", help="a database to load (or reuse) instead of a throwaway server's")
    ap.add_argument("--reuse", action="store_true", help="with --dsn: keep an index that holds --indexed documents")
    args = ap.parse_args()
    server = None
    if args.dsn:
        dsn = args.dsn
    else:
        server = ThrowawayPostgres(fast=True, settings={"shared_buffers": "4GB"})
        dsn = server.start()
    try:
        with psycopg.connect(dsn) as c:
            print(f"PostgreSQL {c.info.server_version}, shared_buffers {c.execute('SHOW shared_buffers').fetchone()[0]}; "  # type: ignore[index]
                  f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start", flush=True)
        asyncio.run(load(dsn, args.indexed, args.workers, args.reuse))
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                              text=True).stdout.strip()
        variants = [(f"current ({head})", dsn, queries_at(None))]
        if args.baseline:
            db = dsn.rsplit("/", 1)[1].split("?")[0]
            variants.append((f"{args.baseline}", clone_at(dsn, db, f"{db}_at_{args.baseline}", args.baseline),
                             queries_at(args.baseline)))
        compare(variants, lookups(dsn, args.samples, args.seed), args.rounds)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
