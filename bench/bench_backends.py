"""Benchmark of the index backends: bulk indexing throughput and candidate latency, the search
backends against osmem-server next to the PostgreSQL backend, in the same run on the same documents.

Usage::

    PYTHONPATH=. python bench/bench_backends.py [--docs 10000] [--batch 500] [--queries 1000]
        [--backend elasticsearch --backend opensearch --backend postgres] [--url http://host:9200]
        [--dsn postgresql://...]

Without ``--url`` an osmem-server process is started (``tests.search_server.start_osmem``) and the
official Elasticsearch client is allowed to talk to it; without ``--dsn`` a throwaway PostgreSQL
server is started (``daemon.db.throwaway.ThrowawayPostgres``) and migrated. Prints one line per backend: indexing
docs/s (``write`` batches of ``--batch``), candidate-query p50/p99 in ms (single ``candidates``
calls, 24 keys each, ``min_match`` 2), and the ``candidates_many`` (msearch, 20 queries) per-query
mean. Documents are synthetic but shaped like real ones (20 LSH band keys from a shared pool so
that lookups have hits, 4 simhash block keys, scope by user), or with ``--real`` signed by
nearsync itself (``document_from_fields``, default ``[signatures]``) from the Abt-Buy listings in
``../shared/data`` (both shops), replicated with seeded word drops and price noise up to ``--docs``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.backends.base import IndexDocument  # noqa: E402
from daemon.backends.factory import create_search_backend  # noqa: E402
from daemon.backends.base import CandidateQuery  # noqa: E402

T = "public.ads"


def make_docs(n: int, seed: int = 7) -> list[IndexDocument]:
    """``n`` synthetic documents with realistic key counts and field roles."""
    rnd = random.Random(seed)
    docs = []
    for i in range(n):
        bands = [f"b{b}:{rnd.randrange(max(n // 200, 2)):x}" for b in range(20)]
        blocks = [f"s{b}:{rnd.randrange(4096):x}" for b in range(4)]
        keys = bands + blocks
        fields = {"title": f"item {i} {rnd.choice(['red', 'blue', 'green'])} bike", "body": "lorem ipsum " * 20,
                  "price": round(rnd.uniform(1, 1000), 2), "lat": rnd.uniform(-60, 60), "lon": rnd.uniform(-150, 150),
                  "user": str(i % 100), "category": "bikes", "created_at": "2024-05-01T10:00:00+00:00"}
        sig = {"v": 1, "params": "p", "simhash": rnd.randrange(-(1 << 63), 1 << 63),
               "minhash": [rnd.randrange(1 << 32) for _ in range(64)], "bottomk": [], "bands": bands,
               "blocks": blocks, "geo": [], "super": [], "models": [], "phones": [], "emails": [],
               "tokens": ["bike"], "text": fields["title"]}
        docs.append(IndexDocument(T, str(i), 1, fields, {"user": str(i % 10)}, keys, sig))
    return docs


def make_real_docs(n: int, seed: int = 7) -> list[IndexDocument]:
    """``n`` documents signed from the Abt-Buy listings (each listing, then seeded variants of them:
    one word dropped from the title, price x [0.95, 1.05]), global scope.

    Raises:
        SystemExit: the data directory is absent.
    """
    from daemon.capture.documents import coerce_numbers, document_from_fields
    from daemon.evaluation.datasets import abt_buy, default_data_dir
    from daemon.signatures import SignatureParams

    data = default_data_dir()
    if data is None:
        raise SystemExit("--real needs ../shared/data (or NEARSYNC_DATA)")
    base = [dict(r.fields) for r in abt_buy(data).records]
    params, rnd, docs = SignatureParams(), random.Random(seed), []
    for i in range(n):
        fields = dict(base[i % len(base)])
        if i >= len(base):
            words = str(fields.get("title") or "").split()
            if len(words) > 2:
                words.pop(rnd.randrange(len(words)))
            fields["title"] = " ".join(words)
            if isinstance(fields.get("price"), (int, float)):
                fields["price"] = round(fields["price"] * rnd.uniform(0.95, 1.05), 2)
        docs.append(document_from_fields(T, str(i), 1, coerce_numbers(fields), params, "global"))
    return docs


def pct(xs: list[float], p: float) -> float:
    """The ``p``-th percentile (0..100) of ``xs`` (nearest rank)."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s)) - 1))]


def make_backend(name: str, url: str | None, dsn: str | None, batch: int) -> Any:
    """A fresh (unopened) backend: a new alias on the search server, or the PostgreSQL backend on ``dsn``
    (its documents of the bench table are cleared after opening)."""
    if name == "postgres":
        from daemon.backends.postgres import PostgresBackend

        assert dsn is not None
        return PostgresBackend(dsn)
    assert url is not None
    return create_search_backend(name, {"url": url, "index": "bench" + uuid.uuid4().hex[:8], "bulk_docs": batch})


async def bench(name: str, url: str | None, docs: list[IndexDocument], batch: int, queries: int,
                dsn: str | None = None) -> dict[str, float]:
    """Index ``docs`` into a fresh index and time ``queries`` candidate lookups. Returns the figures:
    ``docs_per_s``, ``p50_ms``/``p99_ms`` (single lookups), ``msearch_ms_per_query`` (NaN where the
    backend has no batched lookup) and ``mean_hits``."""
    be = make_backend(name, url, dsn, batch)
    await be.open()
    if name == "postgres":
        await be.clear(T)
    try:
        t0 = time.perf_counter()
        for i in range(0, len(docs), batch):
            await be.write(docs[i:i + batch], [])
        index_s = time.perf_counter() - t0
        if hasattr(be, "refresh"):
            await be.refresh()
        rnd = random.Random(1)
        sample = [rnd.choice(docs) for _ in range(queries)]
        lat: list[float] = []
        hits = 0
        for d in sample:
            t = time.perf_counter()
            hits += len(await be.candidates(T, d.keys, d.scope, min_match=2, limit=100, exclude_id=d.record_id))
            lat.append((time.perf_counter() - t) * 1000)
        many_ms = float("nan")
        if hasattr(be, "candidates_many"):
            t = time.perf_counter()
            for i in range(0, len(sample), 20):
                part = sample[i:i + 20]
                await be.candidates_many(T, [CandidateQuery(d.keys, d.scope, d.record_id) for d in part], min_match=2)
            many_ms = (time.perf_counter() - t) * 1000 / max(len(sample), 1)
        return {"docs_per_s": len(docs) / index_s, "p50_ms": statistics.median(lat), "p99_ms": pct(lat, 99),
                "msearch_ms_per_query": many_ms, "mean_hits": hits / max(len(sample), 1)}
    finally:
        await be.close()


async def main(argv: list[str] | None = None) -> None:
    """Parse arguments, start osmem unless ``--url`` and PostgreSQL unless ``--dsn``, run the benchmark
    for each backend and print one line each."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--backend", action="append", choices=["elasticsearch", "opensearch", "postgres"])
    ap.add_argument("--url")
    ap.add_argument("--dsn")
    ap.add_argument("--real", action="store_true", help="documents signed from the Abt-Buy listings")
    a = ap.parse_args(argv)
    docs = make_real_docs(a.docs) if a.real else make_docs(a.docs)
    with contextlib.ExitStack() as stack:
        names = a.backend or ["elasticsearch", "opensearch", "postgres"]
        url, dsn = a.url, a.dsn
        if url is None and set(names) - {"postgres"}:
            from tests.search_server import allow_es_client_against_osmem, start_osmem

            url = stack.enter_context(start_osmem())
            allow_es_client_against_osmem()
        if dsn is None and "postgres" in names:
            from daemon.config import settings_from_mapping
            from daemon.ops.migrate import upgrade
            from daemon.db.throwaway import ThrowawayPostgres

            pg = ThrowawayPostgres(fast=True)
            dsn = pg.start()
            stack.callback(pg.stop)
            upgrade(settings_from_mapping({"database": {"dsn": dsn}, "source": {"create_reference_table": True}},
                                          env={}))
        for name in names:
            r = await bench(name, url, docs, a.batch, a.queries, dsn)
            print(f"{name:14s} docs={a.docs}{' real' if a.real else ''} batch={a.batch}: index {r['docs_per_s']:8.0f} docs/s | candidates "
                  f"p50 {r['p50_ms']:6.2f} ms p99 {r['p99_ms']:6.2f} ms (mean {r['mean_hits']:.1f} hits) | "
                  f"msearch {r['msearch_ms_per_query']:5.2f} ms/query")


if __name__ == "__main__":
    asyncio.run(main())
