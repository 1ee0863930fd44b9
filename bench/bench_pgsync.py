"""nearsync against PGSync on the same search server type, in one run (a script, not a test).

Issue 18's reference: PGSync (https://github.com/toluaina/pgsync), the sync tool nearsync replaces,
indexing the same ``ads`` rows into an OpenSearch-API server. Both tools run against one throwaway
PostgreSQL (``wal_level = logical``, which PGSync needs), each in its own database with only its own
triggers (so neither pays for the other's), and each writes to its own osmem-server (the
OpenSearch-API test server of the test suite). The tools run one at a time, alternated round by
round, so they meet the same machine state; each run starts a fresh daemon on an empty index.

Per tool and round it prints:

* COMMIT → visible to search over ``--latency-n`` single-row inserts (each waited for, polled with
  a ``_count`` every 2 ms; p50/p99 in ms, realtime mode for nearsync);
* one ``--size``-row transaction (default 10,000): rows/s from COMMIT until the index counts them
  all (``_count`` every 50 ms), and CPU per row (from ``/proc``) of the search server and of the
  tool's process tree (nearsync: also the PostgreSQL server's; PGSync's share of PostgreSQL is not
  split out: its logical slot and queries run in the same server).

nearsync runs with signatures (its default: the candidate keys and signatures in nearsync's
PostgreSQL tables, the search documents with the fields only, ``index.candidate_store =
"postgres"``); with ``--search-keys`` also with the keys in the search documents
(``candidate_store = "search"``); with ``--plain`` also as plain sync (``signatures.enabled =
false``). PGSync is not a dependency of nearsync: install it in a venv of
its own (its pins differ) and point ``--pgsync`` at that venv's ``bin``; it needs a
``redis-server`` on PATH (Debian: ``apt-get install redis-server``)::

    python3 -m venv /tmp/pgsync-venv && /tmp/pgsync-venv/bin/pip install pgsync==7.3.0
    python bench/bench_pgsync.py --pgsync /tmp/pgsync-venv/bin --rounds 2

PGSync runs with its defaults (``OPENSEARCH=true``, checkpoint files in a temporary directory).
Issue 18's goal: nearsync with signatures at least PGSync's rows/s on the transaction, and its p99
at most PGSync's p99 ÷ 3, in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_cdc import (COLS, SearchTarget, bench_batch, bench_latency, free_port, make_staging,  # noqa: E402
                       osmem_children, pct)
from bench_reindex import tree_cpu  # noqa: E402
from daemon.config import settings_from_mapping  # noqa: E402
from daemon.db.throwaway import ThrowawayPostgres  # noqa: E402
from daemon.ops.migrate import upgrade  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PGSYNC_DB = "pgsync_bench"
PGSYNC_INDEX = "pgsync_ads"
COLUMNS = [c.strip() for c in COLS.split(",")]


@contextlib.contextmanager
def osmem() -> Iterator[tuple[str, int | None]]:
    """An osmem-server for one tool: ``(url, pid)`` (the pid for its CPU figures, None if not found)."""
    from tests.search_server import start_osmem

    before = osmem_children()
    with start_osmem() as url:
        new = osmem_children() - before
        yield url, (new.pop() if len(new) == 1 else None)


@contextlib.contextmanager
def redis_server() -> Iterator[int]:
    """A throwaway ``redis-server`` (no persistence) on a free port; yields the port."""
    exe = shutil.which("redis-server")
    if exe is None:
        sys.exit("bench_pgsync: redis-server not found on PATH (Debian: apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def _post(url: str, body: dict | None = None, method: str = "POST") -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"{}")


class PgSync:
    """PGSync 7 on ``database`` of the server at ``dsn``, writing index ``pgsync_ads`` at ``url``."""

    def __init__(self, bindir: Path, dsn: str, url: str, redis_port: int, tmp: Path) -> None:
        info = conninfo_to_dict(dsn)
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.bindir, self.url, self.tmp = bindir, url, tmp
        self.env = {**os.environ, "PG_HOST": str(info.get("host", "localhost")), "PG_PORT": str(info.get("port", 5432)),
                    "PG_USER": str(info.get("user", "postgres")), "PG_PASSWORD": str(info.get("password", "")),
                    "PG_DATABASE": PGSYNC_DB, "OPENSEARCH": "true", "ELASTICSEARCH_HOST": host,
                    "ELASTICSEARCH_PORT": port, "ELASTICSEARCH_SCHEME": "http", "REDIS_HOST": "127.0.0.1",
                    "REDIS_PORT": str(redis_port), "CHECKPOINT_PATH": str(tmp), "LOG_LEVEL": "WARNING"}
        self.schema = tmp / "schema.json"
        self.schema.write_text(json.dumps([{"database": PGSYNC_DB, "index": PGSYNC_INDEX,
                                            "nodes": {"table": "ads", "columns": ["id", *COLUMNS]}}]))
        self.proc: subprocess.Popen[bytes] | None = None

    def _run(self, *args: str) -> None:
        subprocess.run([str(self.bindir / args[0]), *args[1:], "--config", str(self.schema)], env=self.env,
                       cwd=self.tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)

    def start(self, conn: psycopg.Connection) -> None:
        """Empty table and index, ``bootstrap``, then the ``pgsync --daemon``; returns once a probe row
        is visible to search (the probe is deleted from the table again, and counted by callers)."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run("bootstrap", "--teardown")
        conn.execute("TRUNCATE ads")
        conn.commit()
        with contextlib.suppress(urllib.error.HTTPError):
            _post(f"{self.url}/{PGSYNC_INDEX}", method="DELETE")
        for f in self.tmp.glob(".*"):
            f.unlink()
        self._run("bootstrap")
        self.proc = subprocess.Popen([str(self.bindir / "pgsync"), "--config", str(self.schema), "--daemon"],
                                     env=self.env, cwd=self.tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2.0)
        rid = conn.execute(f"INSERT INTO ads ({COLS}) SELECT {COLS} FROM staging LIMIT 1 RETURNING id").fetchone()[0]
        conn.commit()
        self.wait_visible(str(rid), time.time(), timeout=120)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None

    def count(self, rid: str | None = None) -> int:
        q = {"term": {"id": int(rid)}} if rid is not None else {"match_all": {}}
        try:
            return int(_post(f"{self.url}/{PGSYNC_INDEX}/_count", {"query": q})["count"])
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return 0
            raise

    def wait_visible(self, rid: str, committed: float, timeout: float = 120) -> float:
        """ms from ``committed`` until record ``rid`` is visible to search (2 ms polls)."""
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.count(rid):
                return (time.time() - committed) * 1000
            time.sleep(0.002)
        raise TimeoutError(f"PGSync: record {rid} did not become visible")


def pgsync_latency(conn: psycopg.Connection, tool: PgSync, n: int) -> dict[str, float]:
    """COMMIT → visible over ``n`` single-row inserts through a freshly started PGSync."""
    tool.start(conn)
    try:
        rows = conn.execute(f"SELECT {COLS} FROM staging OFFSET 1 LIMIT %s", (n,)).fetchall()
        conn.commit()
        lat = []
        for row in rows:
            rid = conn.execute(f"INSERT INTO ads ({COLS}) VALUES (%s,%s,%s,%s,%s,%s,%s) RETURNING id", row).fetchone()[0]
            conn.commit()
            lat.append(tool.wait_visible(str(rid), time.time()))
            time.sleep(0.02)
    finally:
        tool.stop()
    return {"p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99)}


def pgsync_batch(conn: psycopg.Connection, tool: PgSync, size: int, spid: int | None) -> dict[str, float]:
    """One ``size``-row transaction through a freshly started PGSync: rows/s COMMIT → all visible."""
    tool.start(conn)
    try:
        base = tool.count()
        conn.execute(f"INSERT INTO ads ({COLS}) SELECT {COLS} FROM staging LIMIT %s", (size,))
        assert tool.proc is not None
        s0, d0 = tree_cpu(spid) if spid else 0.0, tree_cpu(tool.proc.pid)
        conn.commit()
        t0 = time.time()
        while tool.count() < base + size:
            if time.time() - t0 > 1800:
                raise TimeoutError("PGSync did not index the transaction")
            time.sleep(0.05)
        secs = time.time() - t0
        s1, d1 = tree_cpu(spid) if spid else 0.0, tree_cpu(tool.proc.pid)
    finally:
        tool.stop()
    return {"rows_per_s": size / secs, "seconds": secs, "search_ms": (s1 - s0) * 1000 / size if spid else float("nan"),
            "daemon_ms": (d1 - d0) * 1000 / size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pgsync", required=True, type=Path, help="the bin directory of a venv with pgsync installed")
    ap.add_argument("--latency-n", type=int, default=200, help="single-row inserts timed per tool and round")
    ap.add_argument("--size", type=int, default=10_000, help="rows of the one transaction per tool and round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds; the tools alternate, the first tool swaps each round")
    ap.add_argument("--plain", action="store_true", help="also run nearsync as plain sync (no signatures)")
    ap.add_argument("--search-keys", action="store_true",
                    help='also run nearsync with signatures and index.candidate_store = "search" (the candidate keys '
                         "and signatures in the search index, as before 2026-11-27; the default keeps them in "
                         "PostgreSQL)")
    args = ap.parse_args()
    if not (args.pgsync / "pgsync").is_file():
        sys.exit(f"bench_pgsync: no pgsync in {args.pgsync} (--pgsync: a venv's bin with pgsync installed)")
    settings = {"wal_level": "logical", "max_replication_slots": "8", "max_wal_senders": "8"}
    with (ThrowawayPostgres(fast=True, settings=settings) as server, tempfile.TemporaryDirectory() as tmp,
          osmem() as (ns_url, ns_pid), osmem() as (pg_url, pg_pid), redis_server() as redis_port):
        upgrade(settings_from_mapping({"database": {"dsn": server.dsn}, "source": {"create_reference_table": True}}, env={}))
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {PGSYNC_DB}")
        pg_dsn = make_conninfo(server.dsn, dbname=PGSYNC_DB)
        with psycopg.connect(server.dsn) as ns, psycopg.connect(pg_dsn) as pc:
            pc.execute((REPO / "sql" / "migrations" / "reference_ads.sql").read_text())
            pc.commit()
            make_staging(ns, max(args.size, args.latency_n + 2))
            make_staging(pc, max(args.size, args.latency_n + 2))
            target = SearchTarget(ns_url, Path(tmp))
            target.pid = ns_pid
            in_search = SearchTarget(ns_url, Path(tmp), ['candidate_store = "search"'])
            in_search.pid = ns_pid
            (Path(tmp) / "pgsync").mkdir()
            tool = PgSync(args.pgsync, server.dsn, pg_url, redis_port, Path(tmp) / "pgsync")
            postmaster = int((server.data_dir / "postmaster.pid").read_text().split()[0])
            print(f"PostgreSQL {ns.info.server_version}, {os.cpu_count()} cores, fsync off, one osmem-server per tool, "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)

            def run_nearsync(signed: bool, where: SearchTarget = target) -> None:
                what = "nearsync, plain sync" if not signed else (
                    "nearsync, signatures" + (", keys in the search index" if where is in_search else ""))
                if signed and args.latency_n:
                    lat = bench_latency(ns, server.dsn, args.latency_n, target=where)
                    print(f"  {what}: COMMIT->visible p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms", flush=True)
                b = bench_batch(ns, server.dsn, args.size, ["--batch-size", "2000", *where.config(signed)],
                                postmaster, where)
                print(f"  {what}: {args.size:,}-row transaction {b['rows_per_s']:,.0f} rows/s ({b['seconds']:.1f} s), "
                      f"CPU per row: search server {b['search_ms']:.2f} ms, daemon {b['daemon_ms']:.2f} ms, PostgreSQL "
                      f"{b['pg_ms']:.2f} ms (load {os.getloadavg()[0]:.2f})", flush=True)

            def run_pgsync() -> None:
                if args.latency_n:
                    lat = pgsync_latency(pc, tool, args.latency_n)
                    print(f"  PGSync: COMMIT->visible p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms", flush=True)
                b = pgsync_batch(pc, tool, args.size, pg_pid)
                print(f"  PGSync: {args.size:,}-row transaction {b['rows_per_s']:,.0f} rows/s ({b['seconds']:.1f} s), "
                      f"CPU per row: search server {b['search_ms']:.2f} ms, pgsync {b['daemon_ms']:.2f} ms "
                      f"(load {os.getloadavg()[0]:.2f})", flush=True)

            for r in range(args.rounds):
                print(f"round {r + 1}", flush=True)
                order = [run_pgsync, lambda: run_nearsync(True)]
                if args.search_keys:
                    order.append(lambda: run_nearsync(True, in_search))
                if args.plain:
                    order.append(lambda: run_nearsync(False))
                for step in (order if r % 2 == 0 else order[::-1]):
                    step()


if __name__ == "__main__":
    main()
