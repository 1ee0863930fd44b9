"""Benchmark of the CDC core (a script, not a test): prints figures and ratios.

* realtime latency from COMMIT to visible in the index: the daemon's start-to-ready time, the first
  insert once it is ready (cold start), p50/p99 over N single-row inserts after that and
  ``--settle-s`` seconds (steady state: the daemon starts its signature workers once ready, ~1 s of
  CPU on the same cores), and one insert after ``--idle-s`` seconds of idleness (with ``--drop-caches``, after
  the kernel's page cache was dropped, as this machine class does to idle processes within
  minutes);
* batch throughput for a 10,000-row and a 100,000-row transaction (rows/s, COMMIT to all indexed),
  with the near-duplicate signatures (the default) and as plain sync (``signatures.enabled = false``:
  fields only, no signature or candidate key; what the reference sync tools do);
* the triggers' write overhead: insert time with triggers ÷ without (bulk and single-row).

Signed and plain runs of one size and mode follow each other and their ratio is printed, with the
CPU per row of the daemon's process tree and of PostgreSQL from COMMIT to all indexed.

The daemon runs as a real ``nearsync run`` subprocess against a throwaway PostgreSQL with the
PostgreSQL index backend, or with ``--backend opensearch`` against an osmem-server it starts
(``tests.search_server.start_osmem``, the OpenSearch-API test server of the test suite; ``--url``
for a real cluster instead). On a search server "indexed" means *visible to search*: the bench
polls the alias (a ``_count`` on ``record_id`` every 2 ms for the single-row inserts, which it then
makes one at a time; a ``_count`` of the table every 50 ms for the transactions), and every run
writes to its own alias so runs do not see each other's documents. Ads are generated from the
Abt-Buy listings (seeded) when the data is present, else from built-in templates. Usage::

    python bench/bench_cdc.py [--latency-n 200] [--idle-s 30] [--drop-caches] [--sizes 10000,100000]
        [--durable] [--signatures both] [--backend postgres|opensearch] [--url http://host:9200]

Targets on the 2-core machine: p50 ≤ 25 ms, p99 ≤ 100 ms, ≥ 10,000 rows/s, overhead ≤ 2×.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.config import settings_from_mapping  # noqa: E402
from daemon.evaluation.datasets import abt_buy, default_data_dir  # noqa: E402
from daemon.evaluation.generator import generate_ads  # noqa: E402
from daemon.evaluation.loader import parse_price  # noqa: E402
from daemon.ops.migrate import upgrade  # noqa: E402
from daemon.db.throwaway import ThrowawayPostgres  # noqa: E402
from bench_reindex import server_cpu, tree_cpu  # noqa: E402  (beside this script)

REPO = Path(__file__).resolve().parents[1]
COLS = "user_id, category, title, body, price, lat, lon"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def make_staging(conn: psycopg.Connection, n: int) -> None:
    """A table ``staging`` with n generated ads (no triggers)."""
    data = default_data_dir()
    base = None
    if data and (data / "abt-buy" / "Abt.csv").is_file():
        base = [dict(r.fields, price=parse_price(r.fields.get("price"))) for r in abt_buy(data).records]
    conn.execute("DROP TABLE IF EXISTS staging")
    conn.execute(f"CREATE TABLE staging AS SELECT {COLS} FROM ads WITH NO DATA")
    with conn.cursor() as cur, cur.copy(f"COPY staging ({COLS}) FROM STDIN") as copy:
        for ad in generate_ads(n, seed=11, base=base):
            f = ad.fields
            copy.write_row((f.get("user"), f.get("category"), f.get("title"), f.get("body"), f.get("price"),
                            f.get("lat"), f.get("lon")))
    conn.commit()
    print(f"generated {n} ads ({'from Abt-Buy listings' if base else 'from templates'})", flush=True)


class SearchTarget:
    """Where the daemon indexes: the PostgreSQL backend (``url`` None) or a search server at ``url``.

    Each :meth:`config` call names a fresh alias (``bench_cdc_<n>``), so a run counts only its own
    documents and never meets the external versions or tombstones of the run before.
    """

    def __init__(self, url: str | None, tmp: Path, options: Sequence[str] = ()) -> None:
        self.url, self.tmp, self.alias, self.options = url, tmp, "", list(options)
        self._n = itertools.count(1)
        self.pid = osmem_pid() if url else None
        """The osmem-server this bench started (its CPU is reported per row), else None."""

    def config(self, signatures: bool) -> list[str]:
        """``--config FILE`` arguments for one daemon run (a new alias on a search server)."""
        lines = [] if signatures else ["[signatures]", "enabled = false"]
        if self.url:
            self.alias = f"bench_cdc_{next(self._n)}"
            lines += ["[index]", 'backend = "opensearch"', f'url = "{self.url}"', f'index = "{self.alias}"',
                      *self.options]
        if not lines:
            return []
        path = self.tmp / f"run-{next(self._n)}.toml"
        path.write_text("\n".join(lines) + "\n")
        return ["--config", str(path)]

    def _post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(f"{self.url}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def count(self, record_id: str | None = None) -> int:
        """Documents visible to search in this run's alias (of one ``record_id`` when given; 0 before
        the daemon created the alias)."""
        q = {"term": {"record_id": record_id}} if record_id is not None else {"match_all": {}}
        try:
            return int(self._post(f"/{self.alias}/_count", {"query": q})["count"])
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return 0
            raise


def osmem_children() -> set[int]:
    """The pids of the ``osmem-server`` children of this process (from ``/proc``)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if (Path("/proc", entry, "comm").read_text().strip() == "osmem-server"
                        and int(Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid()):
                    found.add(int(entry))
    return found


def osmem_pid() -> int | None:
    """The pid of an ``osmem-server`` child of this process (started by :func:`search_server`), or None."""
    return min(osmem_children(), default=None)


@contextlib.contextmanager
def search_server(backend: str, url: str | None) -> Iterator[str | None]:
    """The search server's URL for ``--backend opensearch`` (``url``, else an osmem-server started for
    the run), None for the PostgreSQL backend."""
    if backend == "postgres":
        yield None
    elif url:
        yield url.rstrip("/")
    else:
        sys.path.insert(0, str(REPO))
        from tests.search_server import start_osmem

        with start_osmem() as started:
            yield started


def spawn(dsn: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NEARSYNC_DSN": dsn}
    return subprocess.Popen([sys.executable, "-m", "daemon", "run", "--log-level", "warning", *args],
                            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_drained(conn: psycopg.Connection, expect_docs: int, timeout: float = 900, interval_s: float = 0.02,
                 target: SearchTarget | None = None) -> float:
    """Poll every ``interval_s`` until the index queue is empty and ``expect_docs`` documents are
    live; returns that time (late by at most ``interval_s``). The probe runs on the measured machine,
    so it is kept cheap: an EXISTS on the queue each time, the document count only once the queue is
    empty (counting both every 20 ms cost PostgreSQL ~0.6 s of CPU during a 10,000-row run, ~6 % of
    the 2 cores). Even the EXISTS costs 1–2 ms on a queue of 100,000 rows whose statistics lag, so
    the throughput runs poll every 50 ms (at most 50 ms late on runs of 4 s and more). With a search
    ``target`` the documents are counted on the search server (visible to search)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        busy = conn.execute("SELECT EXISTS (SELECT 1 FROM nearsync.pending_changes WHERE queue = 'index')").fetchone()[0]
        if not busy:
            if target is not None and target.url:
                n = target.count()
            else:
                n = conn.execute("SELECT count(*) FROM nearsync.documents WHERE NOT deleted").fetchone()[0]
            if n >= expect_docs:
                return time.time()
        time.sleep(interval_s)
    raise TimeoutError("daemon did not drain")


def reset(conn: psycopg.Connection) -> None:
    """Empty the source table, the queue and the index (with its lookup table, migration 0020)."""
    conn.execute("TRUNCATE ads")
    conn.execute("TRUNCATE nearsync.index_tracking, nearsync.change_log, nearsync.documents, nearsync.document_lookup")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, timeout: float = 120) -> None:
    """Poll the daemon's ``/readyz`` every 20 ms until it answers 200 (LISTEN up, database and index reached)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.02)
    raise TimeoutError("daemon did not become ready")


def _insert_one(conn: psycopg.Connection, row: tuple) -> tuple[str, float]:
    rid = conn.execute(f"INSERT INTO ads ({COLS}) VALUES (%s,%s,%s,%s,%s,%s,%s) RETURNING id", row).fetchone()[0]
    conn.commit()
    return str(rid), time.time()


def _latency_ms(conn: psycopg.Connection, rid: str, committed: float, timeout: float = 120,
                target: SearchTarget | None = None) -> float:
    """Wait until record ``rid`` is indexed; its COMMIT-to-indexed latency in ms (from ``indexed_at``;
    on a search ``target``, from the first 2 ms poll that finds it visible to search)."""
    t0 = time.time()
    if target is not None and target.url:
        while time.time() - t0 < timeout:
            if target.count(rid):
                return (time.time() - committed) * 1000
            time.sleep(0.002)
        raise TimeoutError(f"record {rid} did not become visible")
    while time.time() - t0 < timeout:
        row = conn.execute("SELECT extract(epoch FROM indexed_at)::float8 FROM nearsync.documents "
                           "WHERE record_id = %s AND NOT deleted", (rid,)).fetchone()
        conn.commit()
        if row:
            return (row[0] - committed) * 1000
        time.sleep(0.005)
    raise TimeoutError(f"record {rid} was not indexed")


def drop_page_cache() -> bool:
    """Ask the kernel to drop clean page cache, dentries and inodes (needs root); False when refused."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def bench_latency(conn: psycopg.Connection, dsn: str, n: int, idle_s: float = 0.0,
                  drop_caches: bool = False, target: SearchTarget | None = None,
                  settle_s: float = 0.0) -> dict[str, float]:
    """COMMIT-to-indexed latency of single-row inserts in realtime mode, cold start apart (with a
    search ``target``: COMMIT to visible to search, each insert waited for before the next).

    Returns:
        ``{"ready_s": daemon start to /readyz 200 (s), "first_ms": the first insert once ready,
        "n", "p50_ms", "p99_ms", "max_ms", "mean_ms": the ``n`` inserts after it and ``settle_s``
        seconds (20 ms apart),
        "idle_ms": one insert after ``idle_s`` idle seconds (NaN when ``idle_s`` is 0),
        "caches_dropped": whether the page cache was dropped before it}``.
    """
    reset(conn)
    conn.commit()  # an open TRUNCATE would hold its locks and block the daemon's first drain
    port = free_port()
    config = target.config(True) if target is not None else []
    t_spawn = time.time()
    proc = spawn(dsn, "--metrics-port", str(port), *config)
    try:
        wait_ready(port)
        ready_s = time.time() - t_spawn
        rows = conn.execute(f"SELECT {COLS} FROM staging LIMIT %s", (n + 2,)).fetchall()
        conn.commit()
        first_ms = _latency_ms(conn, *_insert_one(conn, rows[0]), target=target)
        time.sleep(settle_s)
        if target is not None and target.url:
            lat = []
            for row in rows[1:n + 1]:
                lat.append(_latency_ms(conn, *_insert_one(conn, row), target=target))
                time.sleep(0.02)
        else:
            commits: dict[str, float] = {}
            for row in rows[1:n + 1]:
                rid, t = _insert_one(conn, row)
                commits[rid] = t
                time.sleep(0.02)
            wait_drained(conn, n + 1)
            idx = dict(conn.execute("SELECT record_id, extract(epoch FROM indexed_at)::float8 FROM nearsync.documents").fetchall())
            conn.commit()
            lat = [(idx[r] - t) * 1000 for r, t in commits.items()]
        idle_ms, dropped = float("nan"), False
        if idle_s > 0:
            time.sleep(idle_s)
            dropped = drop_page_cache() if drop_caches else False
            idle_ms = _latency_ms(conn, *_insert_one(conn, rows[n + 1]), target=target)
    finally:
        proc.terminate()
        proc.wait(30)
    return {"ready_s": ready_s, "first_ms": first_ms, "n": n, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "max_ms": max(lat), "mean_ms": statistics.mean(lat), "idle_ms": idle_ms, "caches_dropped": dropped}


def bench_batch(conn: psycopg.Connection, dsn: str, size: int, mode_args: list[str], postmaster: int,
                target: SearchTarget | None = None) -> dict[str, float]:
    """One ``size``-row transaction drained by a fresh daemon: rows/s from COMMIT to all indexed, and
    the CPU per row over that span of the daemon's process tree (with its signature workers) and of
    the PostgreSQL server (both from ``/proc``, see ``bench_reindex``; the server's share includes the
    bench's own 50 ms drain probe)."""
    reset(conn)
    conn.commit()
    proc = spawn(dsn, *mode_args)
    try:
        time.sleep(2.0)
        conn.execute(f"INSERT INTO ads ({COLS}) SELECT {COLS} FROM staging LIMIT %s", (size,))
        spid = target.pid if target is not None else None
        daemon0, pg0, s0 = tree_cpu(proc.pid), server_cpu(postmaster), tree_cpu(spid) if spid else 0.0
        conn.commit()
        t_commit = time.time()
        t_done = wait_drained(conn, size, interval_s=0.05, target=target)
        daemon1, pg1, s1 = tree_cpu(proc.pid), server_cpu(postmaster), tree_cpu(spid) if spid else 0.0
    finally:
        proc.terminate()
        proc.wait(60)
    secs = t_done - t_commit
    return {"rows": size, "seconds": secs, "rows_per_s": size / secs,
            "daemon_ms": (daemon1 - daemon0) * 1000 / size, "pg_ms": (pg1 - pg0) * 1000 / size,
            "search_ms": (s1 - s0) * 1000 / size if spid else float("nan")}


def bench_overhead(conn: psycopg.Connection, size: int, singles: int) -> dict[str, float]:
    conn.execute("DROP TABLE IF EXISTS ads_plain")
    conn.execute("CREATE TABLE ads_plain (LIKE ads INCLUDING ALL)")
    conn.commit()
    out: dict[str, float] = {}
    for table in ("ads_plain", "ads"):
        times = []
        for _ in range(3):
            conn.execute(f"TRUNCATE {table}")
            conn.execute("TRUNCATE nearsync.index_tracking, nearsync.change_log")
            conn.commit()
            t = time.perf_counter()
            conn.execute(f"INSERT INTO {table} ({COLS}) SELECT {COLS} FROM staging LIMIT %s", (size,))
            conn.commit()
            times.append(time.perf_counter() - t)
        out[f"bulk_{table}_s"] = min(times)
        rows = conn.execute(f"SELECT {COLS} FROM staging LIMIT %s", (singles,)).fetchall()
        conn.execute(f"TRUNCATE {table}")
        conn.commit()
        t = time.perf_counter()
        for row in rows:
            conn.execute(f"INSERT INTO {table} ({COLS}) VALUES (%s,%s,%s,%s,%s,%s,%s)", row)
            conn.commit()
        out[f"single_{table}_s"] = time.perf_counter() - t
    conn.execute("TRUNCATE ads")
    conn.execute("TRUNCATE nearsync.index_tracking, nearsync.change_log")
    conn.commit()
    out["bulk_ratio"] = out["bulk_ads_s"] / out["bulk_ads_plain_s"]
    out["single_ratio"] = out["single_ads_s"] / out["single_ads_plain_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency-n", type=int, default=200)
    ap.add_argument("--idle-s", type=float, default=30.0,
                    help="idle seconds before the after-idle insert (0: skip it; default 30)")
    ap.add_argument("--settle-s", type=float, default=3.0,
                    help="seconds between the first insert and the steady-state ones (default 3)")
    ap.add_argument("--drop-caches", action="store_true",
                    help="drop the kernel's page cache before the after-idle insert (needs root)")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--durable", action="store_true", help="fsync on (default: off, as in the tests)")
    ap.add_argument("--concurrency", type=int, help="batches the daemon keeps in flight (default: its own, 1)")
    ap.add_argument("--signatures", choices=("on", "off", "both"), default="both",
                    help="throughput runs with the signatures (on), as plain sync (off), or both (default)")
    ap.add_argument("--modes", default="realtime,batch", help="daemon modes of the throughput runs (default both)")
    ap.add_argument("--backend", choices=("postgres", "opensearch"), default="postgres",
                    help="index backend: PostgreSQL (default) or a search server (osmem-server unless --url)")
    ap.add_argument("--url", help="with --backend opensearch: a running server instead of an osmem-server")
    ap.add_argument("--index-option", action="append", default=[], metavar="KEY=VALUE",
                    help="with --backend opensearch: an [index] option in TOML, e.g. bulk_docs=2000 (repeatable)")
    args = ap.parse_args()
    extra = ["--concurrency", str(args.concurrency)] if args.concurrency else []
    sizes = [int(x) for x in args.sizes.split(",") if x]
    modes = {"realtime": ["--batch-size", "2000"], "batch": ["--mode", "batch", "--window", "0.2s"]}
    with (ThrowawayPostgres(fast=not args.durable) as server, tempfile.TemporaryDirectory() as tmp,
          search_server(args.backend, args.url) as url):
        target = SearchTarget(url, Path(tmp), args.index_option)
        s = settings_from_mapping({"database": {"dsn": server.dsn}, "source": {"create_reference_table": True}}, env={})
        upgrade(s)
        with psycopg.connect(server.dsn) as conn:
            make_staging(conn, max(sizes + [args.latency_n, 10_000]))
            print(f"PostgreSQL {conn.info.server_version}, {os.cpu_count()} cores, fsync {'on' if args.durable else 'off'}, "
                  f"index backend {args.backend}{f' at {url}' if url else ''}, load {os.getloadavg()[0]:.2f}")
            ov = bench_overhead(conn, 10_000, 1000)
            print(f"trigger overhead, one 10,000-row INSERT: {ov['bulk_ads_s'] * 1000:.0f} ms with triggers vs "
                  f"{ov['bulk_ads_plain_s'] * 1000:.0f} ms without -> {ov['bulk_ratio']:.2f}x (target <= 2x)")
            print(f"trigger overhead, 1,000 single-row transactions: {ov['single_ads_s']:.2f} s vs "
                  f"{ov['single_ads_plain_s']:.2f} s -> {ov['single_ratio']:.2f}x", flush=True)
            if args.latency_n > 0:
                lat = bench_latency(conn, server.dsn, args.latency_n, args.idle_s, args.drop_caches, target,
                                    settle_s=args.settle_s)
                print(f"realtime cold start: daemon ready {lat['ready_s']:.2f} s after spawn; first insert "
                      f"COMMIT->indexed {lat['first_ms']:.1f} ms", flush=True)
                print(f"realtime steady state ({args.settle_s:g} s after it), COMMIT->indexed over {lat['n']} "
                      f"single-row inserts: p50 "
                      f"{lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms, max {lat['max_ms']:.1f} ms "
                      f"(targets 25 / 100 ms; load {os.getloadavg()[0]:.2f})", flush=True)
                if args.idle_s > 0:
                    how = "page cache dropped" if lat["caches_dropped"] else "page cache kept"
                    print(f"realtime after {args.idle_s:.0f} s idle ({how}): COMMIT->indexed "
                          f"{lat['idle_ms']:.1f} ms (target 100 ms)", flush=True)
            variants = [("with signatures", True)] if args.signatures in ("on", "both") else []
            if args.signatures in ("off", "both"):
                variants.append(("plain sync", False))
            postmaster = int((server.data_dir / "postmaster.pid").read_text().split()[0])
            for size in sizes:  # signed and plain one after the other for each size and mode: same machine state
                for label in args.modes.split(","):
                    mode = modes[label]
                    rates: dict[str, float] = {}
                    for what, signed in variants:
                        b = bench_batch(conn, server.dsn, size, mode + extra + target.config(signed), postmaster, target)
                        rates[what] = b["rows_per_s"]
                        srv = "" if target.pid is None else f", search server {b['search_ms']:.3f} ms"
                        print(f"{size:,}-row transaction, {label} mode, {what}: {b['seconds']:.2f} s COMMIT->all "
                              f"indexed, {b['rows_per_s']:,.0f} rows/s (target >= 10,000); CPU per row: daemon "
                              f"{b['daemon_ms']:.3f} ms, PostgreSQL {b['pg_ms']:.3f} ms{srv} (load {os.getloadavg()[0]:.2f})",
                              flush=True)
                    if len(rates) == 2:
                        print(f"{size:,}-row transaction, {label} mode: signed / plain = "
                              f"{rates['with signatures'] / rates['plain sync']:.2f} (target >= 0.50)", flush=True)


if __name__ == "__main__":
    main()
