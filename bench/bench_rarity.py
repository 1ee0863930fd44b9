"""Time ``nearsync rarity refresh`` (:func:`daemon.ops.rarity.refresh_rarity`) on an index already
loaded, the two ways it can read the corpus, alternated on the same index:

* ``corpus``: the :class:`~daemon.backends.base.CorpusReader` read of the PostgreSQL backend (titles,
  scopes and super tokens only, one server-side cursor), what the command does on it;
* ``get``: whole documents through :meth:`~daemon.backends.base.IndexBackend.get` in chunks of
  :data:`~daemon.ops.rarity.READ_CHUNK`, what it does on a backend without that read (forced here by
  hiding the backend behind an object that has only ``iter_versions`` and ``get``).

Load the index first, e.g. ``python bench/bench_dedup.py --corpus abt-buy --indexed 100000 --records
500 --samples 0 --dsn DSN`` (its table ``public.ads``, global scope), then::

    python bench/bench_rarity.py --dsn DSN --runs 3 --max-block 500

Each run prints its wall time, this process's CPU time, the CPU time of the server processes
connected to the database (see :func:`database_cpu_s`) and the 1-minute load average; every run's
stored snapshot (document count, word hashes and frequencies, large blocks) must equal the first
one's, or the script exits with an error. Each refresh stores a new active snapshot of the table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.backends.base import IndexDocument  # noqa: E402
from daemon.config import settings_from_mapping  # noqa: E402
from daemon.db.queries import query  # noqa: E402
from daemon.ops.rarity import refresh_rarity  # noqa: E402
from daemon.service import opened_backend  # noqa: E402


class DocumentsOnly:
    """A backend seen through :meth:`iter_versions` and :meth:`get` only (no
    :class:`~daemon.backends.base.CorpusReader`): ``refresh_rarity`` then reads whole documents.

    Args:
        backend: an opened index backend.
    """

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def iter_versions(self, table: str) -> AsyncIterator[tuple[str, int]]:
        """The backend's ``iter_versions``."""
        return self._backend.iter_versions(table)  # type: ignore[no-any-return]

    async def get(self, table: str, record_ids: Sequence[str]) -> dict[str, IndexDocument]:
        """The backend's ``get``."""
        return await self._backend.get(table, record_ids)  # type: ignore[no-any-return]


def database_cpu_s(dsn: str) -> float | None:
    """CPU seconds (user + system) used so far by the server processes connected to the database of
    ``dsn`` now (``pg_stat_activity``, read from ``/proc``: the server must run on this machine);
    None when they cannot be read. Other databases of the server are not counted, and neither are
    connections that have closed: read it around work whose connections stay open (the backend's
    pool until it is closed; the short connection that stores the snapshot is not counted)."""
    try:
        with psycopg.connect(dsn, autocommit=True) as c:
            pids = [r[0] for r in c.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")]
        total, tick = 0.0, os.sysconf("SC_CLK_TCK")
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        return total
    except (OSError, ValueError, IndexError, psycopg.Error):
        return None


async def stored(dsn: str, table: str) -> tuple[Any, ...]:
    """The table's active snapshot as stored, less its version: ``(documents, word hashes, their
    frequencies, max_block, large blocks)``, the arrays as their packed bytes.

    Raises:
        SystemExit: the table has no active snapshot.
    """
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute(query("rarity_load"), {"table": table})
        row = await cur.fetchone()
    if row is None:
        raise SystemExit(f"no active snapshot of {table}")
    return tuple(row[1:])


async def run(dsn: str, runs: int, max_block: int, table: str) -> None:
    """Alternate ``runs`` refreshes of each kind (starting with ``corpus``), printing each one's
    wall and CPU seconds; check every stored snapshot equals the first.

    Raises:
        SystemExit: two snapshots differ.
    """
    settings = settings_from_mapping({"database": {"dsn": dsn}, "source": {"create_reference_table": True},
                                      "dedup": {"enabled": True}}, env={})
    reference = None
    times: dict[str, list[tuple[float, float, float]]] = {"corpus": [], "get": []}
    for i in range(runs):
        for kind in ("corpus", "get"):
            async with opened_backend(settings) as backend:
                seen = backend if kind == "corpus" else DocumentsOnly(backend)
                await backend.count(table)  # the pool's first connection, so that its CPU is counted whole
                pg0, c0, t0 = database_cpu_s(dsn), time.process_time(), time.perf_counter()
                report = await refresh_rarity(settings, seen, table=table, progress=False,  # type: ignore[arg-type]
                                              max_block=max_block)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                pg1 = database_cpu_s(dsn)
            server = pg1 - pg0 if pg0 is not None and pg1 is not None else float("nan")
            snap = await stored(dsn, table)
            if reference is None:
                reference = snap
            elif snap != reference:
                raise SystemExit(f"run {i + 1} ({kind}): the stored snapshot differs from the first")
            times[kind].append((wall, cpu, server))
            print(f"run {i + 1} {kind:6s}: {report['documents']:,} documents, {report['tokens']:,} words, "
                  f"{report['large_blocks']:,} large blocks; wall {wall:.2f} s, CPU {cpu:.2f} s, "
                  f"PostgreSQL CPU {server:.2f} s, "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
    for kind, values in times.items():
        walls, cpus, servers = ([v[i] for v in values] for i in range(3))
        print(f"{kind:6s}: wall {min(walls):.2f}-{max(walls):.2f} s (median {np.median(walls):.2f}), "
              f"CPU {min(cpus):.2f}-{max(cpus):.2f} s, PostgreSQL CPU {min(servers):.2f}-{max(servers):.2f} s",
              flush=True)
    print("every stored snapshot equal: yes", flush=True)


def main() -> None:
    """Parse the arguments and run (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="database holding a loaded index")
    ap.add_argument("--runs", type=int, default=3, help="refreshes of each kind, alternated")
    ap.add_argument("--max-block", type=int, default=500, help="the block-size bound (0: no blocks counted)")
    ap.add_argument("--table", default="public.ads", help="the tracked table")
    args = ap.parse_args()
    asyncio.run(run(args.dsn, args.runs, args.max_block, args.table))


if __name__ == "__main__":
    main()
