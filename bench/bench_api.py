"""Benchmark of ``nearsync serve``: check latency under fixed request rates and result-set dedup latency.

Usage::

    PYTHONPATH=. python bench/bench_api.py [--ads 100000] [--duration 10] [--rates 200,400,800,1200,1600]
        [--warmup 500] [--dsn postgresql://... [--reuse]]

Starts a throwaway PostgreSQL (or uses ``--dsn``, whose nearsync index is cleared), migrates, and
writes ``--ads`` generated ads (``daemon.evaluation.generator.generate_ads``) straight into the index through
the backend protocol, documents built by the real ``DocumentBuilder`` in a process pool (the
daemon's path without the trigger round trip). Then runs ``nearsync serve`` as a real uvicorn
process on loopback and an open-loop load generator in this process:

* ``/v1/check`` at each rate of ``--rates`` for ``--duration`` seconds (at most rate x duration
  requests; bodies: 30 % edited reposts of indexed ads, the rest fresh ads): client-side p50/p99/
  max latency, server-side ``took_ms`` p99, errors; stops once p99 passes 50 ms and reports the
  highest rate with p99 <= 50 ms;
* ``/v1/dedup-set`` with 100 ids: uncached (a fresh random set each time) and cached (the same set
  again): server-side ``took_ms`` p50/p99 and client-side p99.

Before measuring, ``--warmup`` checks (default 500) and a fifth as many dedup-sets are sent one at
a time, so the server and the database's page cache are warm, as in service.

Targets (issue 7): check p99 <= 10 ms at 200 requests/s; dedup-set cached p99 <= 1 ms, uncached
<= 10 ms (server side). The load generator shares the machine with the server and PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from daemon.config import settings_from_mapping  # noqa: E402
from daemon.capture.documents import DocumentBuilder, SignaturePool  # noqa: E402
from daemon.evaluation.generator import edit_ad, generate_ads  # noqa: E402
from daemon.ops.migrate import upgrade  # noqa: E402
from daemon.db.throwaway import ThrowawayPostgres  # noqa: E402
from daemon.service import open_source, opened_backend  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def pct(xs: list[float], p: float) -> float:
    """The ``p``-th percentile (0..100) of ``xs`` (nearest rank); NaN when empty."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s)) - 1))]


def row_of(i: int, ad: dict[str, Any]) -> dict[str, Any]:
    """A generated ad as an ``ads`` row (column names) with id ``i``."""
    return {"id": i, "user_id": ad["user"], "category": ad["category"], "title": ad["title"], "body": ad["body"],
            "price": ad["price"], "lat": ad["lat"], "lon": ad["lon"], "status": "active", "source": None,
            "created_at": f"2024-01-01T00:00:{i % 60:02d}+00:00"}


async def load_index(dsn: str, n: int, batch: int = 2000, reuse: bool = False) -> tuple[list[dict[str, Any]], float]:
    """Write ``n`` generated ads into the index; returns (the ads, seconds taken).

    With ``reuse``, an index that already holds exactly ``n`` documents of the table is kept (the
    ads are generated again from the same seed, so they are the ones indexed) and 0.0 s is returned.
    """
    s = settings_from_mapping({"database": {"dsn": dsn}, "source": {"create_reference_table": True},
                               "dedup": {"enabled": True}}, env={})
    upgrade(s)
    table = await open_source(s)
    builder = DocumentBuilder.from_settings(s, table)
    pool = SignaturePool(builder, workers=os.cpu_count() or 2, min_parallel=64)
    ads = [g.fields for g in generate_ads(n, seed=11)]
    t0 = time.perf_counter()
    async with opened_backend(s) as backend:
        if reuse and await backend.count(table.name) == n:
            pool.close()
            print(f"  reusing the index: it holds {n} documents", flush=True)
            return ads, 0.0
        await backend.clear(table.name)
        for start in range(0, n, batch):
            items = [(row_of(i + 1, ads[i]), 1) for i in range(start, min(n, start + batch))]
            docs = [d for d in await pool.build(items) if not isinstance(d, Exception)]
            await backend.write(docs, [])
            done = min(n, start + batch)
            if done % 20000 < batch or done == n:
                print(f"  indexed {done}/{n} ({done / (time.perf_counter() - t0):.0f} docs/s)", flush=True)
    pool.close()
    with psycopg.connect(dsn, autocommit=True) as c:  # what autovacuum would do after a bulk load
        c.execute("VACUUM ANALYZE")
    return ads, time.perf_counter() - t0


def check_bodies(ads: list[dict[str, Any]], count: int, seed: int = 3) -> list[dict[str, Any]]:
    """Check request bodies: 30 % edited reposts of indexed ads, 70 % fresh ads."""
    rng = random.Random(seed)
    fresh = [g.fields for g in generate_ads(count, seed=seed + 1000, dup_rate=0.0)]
    out = []
    for i in range(count):
        out.append(edit_ad(rng, ads[rng.randrange(len(ads))]) if rng.random() < 0.3 else fresh[i])
    return out


async def warm_up(url: str, bodies: list[dict[str, Any]], n_ads: int, count: int) -> None:
    """``count`` checks and ``count // 5`` dedup-sets of random ids, one at a time, before measuring:
    a server (and its database's page cache) in service is warm, a freshly started one is not."""
    rng = random.Random(99)
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        for i in range(count):
            await c.post("/v1/check", json=bodies[i % len(bodies)])
        for _ in range(count // 5):
            await c.post("/v1/dedup-set", json={"ids": [str(rng.randint(1, n_ads)) for _ in range(100)]})


async def run_rate(url: str, bodies: list[dict[str, Any]], rate: float, duration: float) -> dict[str, Any]:
    """Open-loop load: one request every 1/rate s for ``duration`` s (bounded by len(bodies))."""
    n = min(len(bodies), int(rate * duration))
    lat: list[float] = []
    server: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(base_url=url, timeout=10, limits=limits) as c:
        async def one(body: dict[str, Any]) -> None:
            nonlocal errors
            t = time.perf_counter()
            try:
                r = await c.post("/v1/check", json=body)
                if r.status_code != 200:
                    errors += 1
                    return
                server.append(r.json()["took_ms"])
            except httpx.HTTPError:
                errors += 1
                return
            lat.append((time.perf_counter() - t) * 1000)

        for b in bodies[:20]:  # warm up connections
            await one(b)
        lat.clear()
        server.clear()
        start = time.perf_counter()
        tasks = []
        for i in range(n):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(bodies[i])))
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - start
    return {"rate": rate, "sent": n, "achieved_rps": n / wall, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "max_ms": max(lat) if lat else float("nan"), "server_p99_ms": pct(server, 99), "errors": errors}


async def bench_dedup_set(url: str, n_ads: int, rounds: int) -> dict[str, Any]:
    """``/v1/dedup-set`` with 100 ids: uncached (fresh sets) then cached (the same set again)."""
    rng = random.Random(5)
    unc_s, unc_c, hit_s, hit_c = [], [], [], []
    async with httpx.AsyncClient(base_url=url, timeout=10) as c:
        same = [str(rng.randint(1, n_ads)) for _ in range(100)]
        await c.post("/v1/dedup-set", json={"ids": same})
        for _ in range(rounds):
            ids = [str(rng.randint(1, n_ads)) for _ in range(100)]
            t = time.perf_counter()
            r = (await c.post("/v1/dedup-set", json={"ids": ids})).json()
            unc_c.append((time.perf_counter() - t) * 1000)
            if r["cached"] < 20:  # (random ids may repeat an earlier set's members)
                unc_s.append(r["took_ms"])
            t = time.perf_counter()
            r = (await c.post("/v1/dedup-set", json={"ids": same})).json()
            hit_c.append((time.perf_counter() - t) * 1000)
            assert r["cached"] == 100, r
            hit_s.append(r["took_ms"])
    return {"uncached_server_p50_ms": pct(unc_s, 50), "uncached_server_p99_ms": pct(unc_s, 99),
            "uncached_client_p99_ms": pct(unc_c, 99), "cached_server_p50_ms": pct(hit_s, 50),
            "cached_server_p99_ms": pct(hit_s, 99), "cached_client_p99_ms": pct(hit_c, 99), "rounds": rounds}


def start_server(dsn: str, port: int) -> subprocess.Popen[bytes]:
    """``nearsync serve`` on 127.0.0.1:port (logs to a temp file); waits until it answers."""
    log = open(f"/tmp/bench_api_serve_{port}.log", "wb")  # noqa: SIM115
    env = {**os.environ, "NEARSYNC_DSN": dsn}
    env.pop("NEARSYNC_API_KEY", None)
    proc = subprocess.Popen([sys.executable, "-m", "daemon", "serve", "--port", str(port), "--log-level", "warning"],
                            env=env, cwd=REPO, stdout=log, stderr=log, start_new_session=True)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.terminate()
    raise SystemExit("nearsync serve did not start; see " + log.name)


async def main_async(args: argparse.Namespace, dsn: str) -> None:
    print(f"loading {args.ads} ads into the index...", flush=True)
    ads, took = await load_index(dsn, args.ads, reuse=args.reuse)
    if took:
        print(f"indexed {args.ads} ads in {took:.0f} s ({args.ads / took:.0f} docs/s)")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = start_server(dsn, port)
    url = f"http://127.0.0.1:{port}"
    try:
        rates = [float(r) for r in args.rates.split(",")]
        bodies = check_bodies(ads, int(max(rates) * args.duration) + 20)
        if args.warmup:
            t = time.perf_counter()
            await warm_up(url, bodies, args.ads, args.warmup)
            print(f"warm-up: {args.warmup} checks and {args.warmup // 5} dedup-sets in {time.perf_counter() - t:.1f} s")
        best = None
        print("\n/v1/check (open loop, client-side latency incl. HTTP; server = took_ms)")
        print(f"{'rate/s':>7} {'sent':>6} {'achieved':>9} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'srv p99':>8} {'err':>4}")
        for rate in rates:
            res = await run_rate(url, bodies, rate, args.duration)
            print(f"{res['rate']:>7.0f} {res['sent']:>6} {res['achieved_rps']:>9.1f} {res['p50_ms']:>7.2f} "
                  f"{res['p99_ms']:>7.2f} {res['max_ms']:>7.2f} {res['server_p99_ms']:>8.2f} {res['errors']:>4}",
                  flush=True)
            if res["p99_ms"] <= 50 and not res["errors"]:
                best = res
            else:
                break
        if best:
            print(f"highest tested rate with p99 <= 50 ms: {best['rate']:.0f} requests/s "
                  f"(achieved {best['achieved_rps']:.0f}/s)")
        ds = await bench_dedup_set(url, args.ads, args.set_rounds)
        print("\n/v1/dedup-set, 100 ids (server-side took_ms; client-side incl. HTTP)")
        for k, v in ds.items():
            print(f"  {k:>24}: {v:.3f}" if isinstance(v, float) else f"  {k:>24}: {v}")
    finally:
        proc.terminate()
        proc.wait(15)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ads", type=int, default=100_000)
    p.add_argument("--duration", type=float, default=10.0, help="seconds per rate")
    p.add_argument("--rates", default="200,400,800,1200,1600")
    p.add_argument("--set-rounds", type=int, default=300)
    p.add_argument("--warmup", type=int, default=500, help="checks sent one at a time before measuring (0: none)")
    p.add_argument("--dsn", help="use this database (its ads index is cleared) instead of a throwaway server")
    p.add_argument("--reuse", action="store_true",
                   help="with --dsn: keep the index when it already holds --ads documents (a 1M index loads once)")
    args = p.parse_args()
    if args.dsn:
        asyncio.run(main_async(args, args.dsn))
        return
    with ThrowawayPostgres(fast=True) as pg:
        with psycopg.connect(pg.dsn, autocommit=True) as c:
            c.execute('CREATE DATABASE "bench_api"')
        dsn = pg.dsn.rsplit("/", 1)[0] + "/bench_api"
        asyncio.run(main_async(args, dsn))


if __name__ == "__main__":
    main()
