"""Chaos suite: real daemons and workers under load while faults are injected on a seeded schedule.

Runs two ``nearsync run`` daemons and two ``nearsync dedup`` workers as real subprocesses (a
supervisor restarts any that exit, as systemd would) against a private throwaway PostgreSQL, while a
seeded load generator (:mod:`daemon.evaluation.generator`: realistic ads with known reposts) inserts, edits,
deactivates and deletes ads and writes a poison record (price ``'call me'`` in a text price column,
which the document builder rejects) every ``poison_every`` inserts. Faults, one at a time in a
seeded order:

* ``kill_daemon`` / ``kill_worker``: ``kill -9`` of a random daemon / worker, restarted at once;
* ``pg_fast`` / ``pg_immediate``: PostgreSQL stopped (fast or immediate) with batches in flight,
  down ``pg_down_s`` seconds, started again;
* ``index_outage``: search backends only — the search server made unreachable for
  ``outage_s`` (30) seconds through a TCP proxy.

After each fault the recovery time is measured: from the end of the fault until a change written
then (a probe row) is indexed and dedup-processed. At the end the load stops, the queues drain, and
the run checks: the index equals the table's active rows (poison rows excepted); nothing is pending;
every poison record present in the table is dead-lettered; the duplicate flags equal those of a
clean single-worker rerun on the final table (links, clusters and flags are wiped, every live
document re-enqueued, one worker run).

Short run (what ``tests/test_chaos.py`` runs in CI, about 2 minutes)::

    python -m bench.chaos.run --duration 45 --faults-per-kind 2

Soak (at least 10 minutes and 20 faults of each kind, the 30 s index outages through the osmem
test server included; about 22 minutes; the rate is what 2 cores sustain against osmem while it
is unreachable half of the time)::

    python -m bench.chaos.run --duration 900 --faults-per-kind 20 --seed 7 --rate 10 --backend opensearch

The PostgreSQL-only soak (no index outages) sustains more: ``--rate 120`` without ``--backend``.

Prints a JSON report (changes applied, faults per kind, lost changes, duplicate and stale flags,
flags differing from the clean rerun, recovery p50/max per kind, throughput) and exits 1 if a
change was lost, a record was flagged twice, a flag is stale (on, or pointing at, a record no
longer live), the flags differ from the clean rerun's, or a poison record was not dead-lettered.

Flags are a function of the data: the worker keeps a link only while the pair is still a candidate
pair (``daemon.dedup.worker.is_candidate_pair``), so an edit that takes two ads out of each other's
lookup drops their link as a pass over the final table would. Two rules still depend on other
records and so on history, and the runs here stay clear of them: the candidate cap (a pair linked
while a key's block was small may fall outside the top ``candidate_cap`` of a pass over the final
table; the load's user scopes hold under ``exhaustive_below`` ads, compared exhaustively, uncapped)
and a scope growing past ``exhaustive_below`` (links made by the exhaustive comparison stay until
one of their ads is processed again). See docs/architecture.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from daemon.config import Settings, settings_from_mapping
from daemon.evaluation.generator import edit_ad, generate_ads
from daemon.ops.migrate import upgrade
from daemon.db.throwaway import ThrowawayPostgres
from daemon.db.queries import query
from daemon.service import opened_backend

REPO = Path(__file__).resolve().parents[2]
TABLE = "public.ads"
PG_KINDS = ("pg_fast", "pg_immediate")
PROCESS_KINDS = ("kill_daemon", "kill_worker")


@dataclass
class ChaosConfig:
    """One chaos run.

    Attributes:
        duration_s: seconds of load (faults are spread over it; the run ends when the last fault
            has recovered, and not before ``duration_s``).
        faults_per_kind: faults of each kind injected.
        seed: seeds the load and the fault schedule.
        rate: target changes per second written by the load generator.
        poison_every: one poison insert per this many inserts.
        daemons / workers: how many of each run side by side.
        backend: ``postgres`` (default) or ``opensearch``/``elasticsearch`` (needs ``osmem-server``;
            adds ``index_outage`` faults).
        pg_down_s: how long PostgreSQL stays down per restart (s). outage_s: index outage (s).
        recovery_timeout_s: a fault not recovered within this counts as a failure.
        work_dir: where logs and the config go (default: a temp dir).
    """

    duration_s: float = 45.0
    faults_per_kind: int = 2
    seed: int = 1
    rate: float = 120.0
    poison_every: int = 50
    daemons: int = 2
    workers: int = 2
    backend: str = "postgres"
    pg_down_s: float = 1.0
    outage_s: float = 30.0
    recovery_timeout_s: float = 120.0
    work_dir: Path | None = None

    def kinds(self) -> tuple[str, ...]:
        """The fault kinds of this run (``index_outage`` only on search backends)."""
        return PROCESS_KINDS + PG_KINDS + (("index_outage",) if self.backend != "postgres" else ())


@dataclass
class Report:
    """Figures of a chaos run (see :func:`run_chaos`)."""

    changes_applied: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    poison_inserted: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    recovery_s: dict[str, list[float]] = field(default_factory=dict)
    unexpected_exits: int = 0
    lost_changes: int = 0
    lost_detail: dict[str, int] = field(default_factory=dict)
    duplicate_flags: int = 0
    stale_flags: int = 0
    flags_missing_vs_clean: int = 0
    flags_extra_vs_clean: int = 0
    flags_differing_vs_clean: int = 0
    flag_mismatch_examples: list[Any] = field(default_factory=list)
    stale_flag_examples: list[Any] = field(default_factory=list)
    flags: int = 0
    poison_not_dead_lettered: int = 0
    dead_letters: int = 0
    pending_after_drain: int = 0
    load_s: float = 0.0
    drain_s: float = 0.0
    total_s: float = 0.0
    rows: int = 0

    def violations(self, cfg: ChaosConfig) -> list[str]:
        """The run's broken invariants, each a short description (empty when the run is sound): work
        done and faults injected as configured (``cfg.faults_per_kind`` of each of ``cfg.kinds()``),
        the queue drained, no lost change, every poison record dead-lettered, some flags and none
        doubled or stale, and flags equal to a clean single-worker pass over the final table (flags
        are a function of the data). Used by :func:`main` (exit 1) and by ``tests/test_chaos.py``."""
        checks = [
            (self.changes_applied > 0 and self.poison_inserted > 0, "no changes or no poison records applied"),
            (self.faults == {k: cfg.faults_per_kind for k in cfg.kinds()}, f"faults injected {self.faults}"),
            (self.pending_after_drain == 0, f"{self.pending_after_drain} changes pending after the drain"),
            (self.lost_changes == 0, f"{self.lost_changes} changes lost {self.lost_detail}"),
            (self.poison_not_dead_lettered == 0, f"{self.poison_not_dead_lettered} poison records not dead-lettered"),
            (self.dead_letters >= self.poison_inserted,
             f"{self.dead_letters} dead letters for {self.poison_inserted} poison records"),
            (self.flags > 0, "no flags at all"),
            (self.duplicate_flags == 0, f"{self.duplicate_flags} records flagged twice"),
            (self.stale_flags == 0, f"{self.stale_flags} stale flags {self.stale_flag_examples}"),
            ((self.flags_missing_vs_clean, self.flags_extra_vs_clean, self.flags_differing_vs_clean) == (0, 0, 0),
             f"flags differ from the clean pass: {self.flags_missing_vs_clean} missing, {self.flags_extra_vs_clean} "
             f"extra, {self.flags_differing_vs_clean} differing {self.flag_mismatch_examples}"),
        ]
        return [what for ok, what in checks if not ok]

    def summary(self) -> dict[str, Any]:
        """JSON-able figures, with recovery p50/max per fault kind (s) and throughput (changes/s)."""
        out = {k: v for k, v in self.__dict__.items() if k != "recovery_s"}
        out["recovery"] = {k: {"n": len(v), "p50_s": round(statistics.median(v), 2) if v else None,
                               "max_s": round(max(v), 2) if v else None} for k, v in self.recovery_s.items()}
        out["throughput_changes_per_s"] = round(self.changes_applied / self.load_s, 1) if self.load_s else 0.0
        return out


class Fleet:
    """The daemon and worker subprocesses, restarted when they exit (like ``Restart=always``).

    Args:
        config: path of the TOML settings file. work_dir: logs go to ``<work_dir>/<name>.log``.
    """

    def __init__(self, config: Path, work_dir: Path, env: dict[str, str]) -> None:
        self.config, self.work_dir, self.env = config, work_dir, env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.unexpected_exits = 0
        self.supervising = True

    def spawn(self, name: str) -> None:
        """Start ``name`` (``daemon-N`` runs ``nearsync run``, ``worker-N`` runs ``nearsync dedup``)."""
        cmd = "run" if name.startswith("daemon") else "dedup"
        log = open(self.work_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "daemon", cmd, "--config", str(self.config), "--log-level", "info"],
            env=self.env, cwd=REPO, stdout=log, stderr=log, start_new_session=True)
        log.close()

    def kill9(self, name: str) -> None:
        """SIGKILL ``name`` and its process group (its signature pool workers too), reap it and start
        it again."""
        proc = self.procs[name]
        _killpg(proc, signal.SIGKILL)
        proc.wait(10)
        self.spawn(name)

    async def supervise(self) -> None:
        """Restart processes that exited on their own (counted in ``unexpected_exits``)."""
        while self.supervising:
            for name, proc in list(self.procs.items()):
                if proc.poll() is not None and self.supervising:
                    self.unexpected_exits += 1
                    await asyncio.sleep(0.5)
                    if self.supervising and self.procs.get(name) is proc:  # not restarted by kill9 meanwhile
                        self.spawn(name)
            await asyncio.sleep(0.3)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM everything and wait (SIGKILL after ``timeout`` seconds); then SIGKILL what is left
        of each process group (pool workers), so nothing outlives the run."""
        self.supervising = False
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _killpg(proc, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
            _killpg(proc, signal.SIGKILL)


SHM = Path("/dev/shm")


def named_semaphores() -> set[str]:
    """Names of the POSIX named semaphores of Python's ``multiprocessing`` in ``/dev/shm``
    (``sem.mp-*``; empty where there is no ``/dev/shm``)."""
    with contextlib.suppress(OSError):
        return {p.name for p in SHM.glob("sem.mp-*")}
    return set()


def unlink_orphaned_semaphores(before: set[str]) -> int:
    """Unlink the ``multiprocessing`` semaphores made since ``before`` (:func:`named_semaphores`)
    that no process maps any more; returns how many.

    A daemon's signature pool (``forkserver``) makes named semaphores, which its resource tracker
    unlinks when the daemon exits; ``kill -9`` of the daemon's whole process group kills the tracker
    too, and each kill then leaves ~5 of them (32 bytes each) until the next reboot. A semaphore that
    no process maps (``/proc/<pid>/maps``) has lost its creator and every process that opened it, so
    nothing can use it again. Processes whose maps cannot be read (another user's) cannot open
    these (mode 0600) unless they are root's."""
    made = named_semaphores() - before
    if not made:
        return 0
    mapped: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        with contextlib.suppress(OSError):
            mapped |= {line.rsplit("/", 1)[-1].strip() for line in maps.read_text().splitlines() if "/sem.mp-" in line}
    gone = 0
    for name in sorted(made - mapped):
        with contextlib.suppress(FileNotFoundError):
            (SHM / name).unlink()
            gone += 1
    return gone


def _killpg(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the process group of ``proc`` (started with ``start_new_session``); gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def write_config(path: Path, dsn: str, index: dict[str, Any]) -> Settings:
    """Write the TOML settings the subprocesses read and return the same as :class:`Settings`."""
    data: dict[str, Any] = {
        "database": {"dsn": dsn},
        "source": {"create_reference_table": True},
        "daemon": {"poll_interval_s": 0.5, "retry_backoff_s": 0.1, "max_attempts": 3},
        "index": index,
        "dedup": {"enabled": True},
    }
    lines: list[str] = []
    for section, values in data.items():
        lines.append(f"[{section}]")
        for k, v in values.items():
            lines.append(f"{k} = {json.dumps(v)}")
        lines.append("")
    path.write_text("\n".join(lines))
    return settings_from_mapping(data, env={})


async def connect(dsn: str, *, deadline_s: float = 120.0) -> psycopg.AsyncConnection[Any]:
    """An autocommit connection, retried while the server is restarting.

    Raises:
        psycopg.OperationalError: still unreachable after ``deadline_s`` seconds.
    """
    end = time.monotonic() + deadline_s
    while True:
        try:
            return await psycopg.AsyncConnection.connect(dsn, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError:
            if time.monotonic() > end:
                raise
            await asyncio.sleep(0.2)


class Load:
    """The seeded load generator: inserts (with reposts), edits, deactivations, deletes, poison.

    Args:
        dsn: the database. seed: random seed. rate: target changes per second. poison_every: one
            poison insert per this many inserts. report: counters are added here.
    """

    def __init__(self, dsn: str, seed: int, rate: float, poison_every: int, report: Report) -> None:
        self.dsn, self.rate, self.poison_every, self.report = dsn, rate, poison_every, report
        self.rng = random.Random(seed)
        self.ads = generate_ads(10_000_000, seed=seed, dup_rate=0.25)
        self.live: dict[int, dict[str, Any]] = {}
        self.attempted_inserts = 0  # picks the poison inserts, committed or not
        self.stopping = False
        self.conn: psycopg.AsyncConnection[Any] | None = None

    async def _insert(self, conn: psycopg.AsyncConnection[Any], fields: dict[str, Any], price: str) -> int:
        cur = await conn.execute(
            "INSERT INTO ads (user_id, category, title, body, price, lat, lon) VALUES (%s, %s, %s, %s, %s, %s, %s) "
            "RETURNING id", (fields.get("user"), fields.get("category"), fields.get("title"), fields.get("body"),
                             price, fields.get("lat"), fields.get("lon")))
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])

    async def step(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """One transaction of 1–5 changes; returns the number of changes committed.

        The report's counters are added to only once the transaction has committed: a transaction
        cut by a server restart counts nothing (its poison record does not exist to dead-letter)."""
        n = self.rng.randint(1, 5)
        done = 0
        inserted: dict[int, dict[str, Any]] = {}
        removed: list[int] = []
        counts = {"inserts": 0, "updates": 0, "deletes": 0, "poison_inserted": 0}
        async with conn.transaction():
            for _ in range(n):
                r = self.rng.random()
                if r < 0.55 or len(self.live) < 20:
                    counts["inserts"] += 1
                    self.attempted_inserts += 1
                    if self.attempted_inserts % self.poison_every == 0:
                        fields = next(self.ads).fields
                        await self._insert(conn, fields, "call me")  # never touched again
                        counts["poison_inserted"] += 1
                    else:
                        fields = next(self.ads).fields
                        inserted[await self._insert(conn, fields, str(fields.get("price") or 0))] = fields
                elif r < 0.85:
                    rid = self.rng.choice(list(self.live))
                    fields = edit_ad(self.rng, self.live[rid])
                    await conn.execute("UPDATE ads SET title = %s, body = %s, price = %s WHERE id = %s",
                                       (fields["title"], fields["body"], str(fields.get("price") or 0), rid))
                    self.live[rid] = fields
                    counts["updates"] += 1
                elif r < 0.93:
                    rid = self.rng.choice(list(self.live))
                    await conn.execute("DELETE FROM ads WHERE id = %s", (rid,))
                    removed.append(rid)
                    counts["deletes"] += 1
                else:
                    rid = self.rng.choice(list(self.live))
                    status = "sold" if self.rng.random() < 0.5 else "active"
                    await conn.execute("UPDATE ads SET status = %s WHERE id = %s", (status, rid))
                    counts["updates"] += 1
                done += 1
        for name, k in counts.items():
            setattr(self.report, name, getattr(self.report, name) + k)
        self.live |= inserted
        for rid in removed:
            self.live.pop(rid, None)
        return done

    async def run(self) -> None:
        """Write until :attr:`stopping`, reconnecting across server restarts."""
        interval = 3.0 / self.rate  # a step is 3 changes on average
        while not self.stopping:
            t0 = time.monotonic()
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = await connect(self.dsn)
                self.report.changes_applied += await self.step(self.conn)
            except psycopg.Error:
                with contextlib.suppress(Exception):
                    if self.conn is not None:
                        await self.conn.close()
                self.conn = None
                await asyncio.sleep(0.2)
                continue
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - t0)))
        if self.conn is not None:
            await self.conn.close()


async def probe_recovered(settings: Settings, probe_id: str, k: int, timeout_s: float) -> float:
    """Write probe change ``k`` and wait until it is indexed and dedup-processed; returns seconds.

    Raises:
        TimeoutError: not through within ``timeout_s``.
    """
    t0 = time.monotonic()
    title = f"Probe listing number {k} Sony LCD television"
    while True:
        try:
            async with await connect(settings.require_dsn(), deadline_s=timeout_s) as c:
                await c.execute("UPDATE ads SET title = %s WHERE id = %s", (title, int(probe_id)))
            break
        except psycopg.OperationalError:
            if time.monotonic() - t0 > timeout_s:
                raise TimeoutError("probe write") from None
            await asyncio.sleep(0.2)
    async with opened_backend(settings) as backend:
        while time.monotonic() - t0 < timeout_s:
            try:
                docs = await backend.get(TABLE, [probe_id])
                doc = docs.get(probe_id)
                if doc is not None and doc.fields.get("title") == title:
                    async with await connect(settings.require_dsn(), deadline_s=5) as c:
                        cur = await c.execute(query("pending_for_record"), {"table": TABLE, "record_id": probe_id})
                        row = await cur.fetchone()
                        if row and row[0] == 0:
                            return time.monotonic() - t0
            except Exception:  # noqa: BLE001 - database or index still coming back
                pass
            await asyncio.sleep(0.1)
    raise TimeoutError(f"probe {k} not through within {timeout_s} s")


async def queue_snapshot(dsn: str, probe_id: str) -> str:
    """A one-line description of the tracking queues and the probe's rows (for a failed recovery)."""
    try:
        async with await connect(dsn, deadline_s=10) as c:
            cur = await c.execute(query("queue_status"))
            queues = [tuple(map(str, r)) for r in await cur.fetchall()]
            cur = await c.execute(query("pending_rows_for_record"), {"table": TABLE, "record_id": probe_id})
            probe = [tuple(map(str, r)) for r in await cur.fetchall()]
            return f"pending per queue {queues}; probe rows {probe}"
    except Exception as e:  # noqa: BLE001 - diagnostics only
        return f"unavailable ({type(e).__name__}: {e})"


@contextlib.contextmanager
def search_index(backend: str) -> Iterator[tuple[dict[str, Any], Any]]:
    """``([index] settings, proxy)`` for the run: the PostgreSQL backend, or a search server behind
    a TCP proxy (``proxy.mode = "refuse"`` makes it unreachable)."""
    if backend == "postgres":
        yield {"backend": "postgres"}, None
        return
    sys.path.insert(0, str(REPO))
    from tests.search_server import TcpProxy, allow_es_client_against_osmem, start_osmem

    allow_es_client_against_osmem()
    with start_osmem() as url:
        proxy = TcpProxy.to_url(url)
        try:
            yield {"backend": backend, "url": proxy.url, "index": "chaos" + uuid.uuid4().hex[:8]}, proxy
        finally:
            with contextlib.suppress(Exception):
                proxy.close()


async def settle(dsn: str, timeout_s: float) -> float:
    """Wait until nothing is pending in either queue; returns the seconds it took.

    Raises:
        TimeoutError: still pending after ``timeout_s``.
    """
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            async with await connect(dsn, deadline_s=10) as c:
                row = await (await c.execute(query("pending_total"))).fetchone()
                if row and row[0] == 0:
                    return time.monotonic() - t0
        except psycopg.OperationalError:
            pass
        await asyncio.sleep(0.25)
    raise TimeoutError(f"queues not drained within {timeout_s} s")


async def compare(settings: Settings, report: Report) -> set[str]:
    """Index vs table (active, non-poison rows) and poison vs dead letters; returns the live ids."""
    dsn = settings.require_dsn()
    async with await connect(dsn) as c:
        cur = await c.execute("SELECT id::text, title, body, price, status FROM ads")
        rows = await cur.fetchall()
        dead = {(q, rid) for q, rid in await (await c.execute(query("dead_letter_ids"), {"table": TABLE})).fetchall()}
    poison = {r[0] for r in rows if r[3] == "call me"}
    want = {r[0]: (r[1], r[2], float(r[3])) for r in rows if r[4] == "active" and r[0] not in poison}
    async with opened_backend(settings) as backend:
        ids = [rid async for rid, _ in backend.iter_versions(TABLE)]
        docs = await backend.get(TABLE, ids) if ids else {}
    have = {rid: (d.fields.get("title"), d.fields.get("body"), d.fields.get("price")) for rid, d in docs.items()}
    missing = [rid for rid in want if rid not in have]
    extra = [rid for rid in have if rid not in want]
    stale = [rid for rid in want if rid in have and (have[rid][0], have[rid][1]) != want[rid][:2]
             or rid in have and have[rid][2] is not None and abs(float(have[rid][2]) - want[rid][2]) > 0.005]
    report.lost_detail = {"missing": len(missing), "extra": len(extra), "stale": len(stale)}
    report.lost_changes = len(missing) + len(extra) + len(stale)
    report.poison_not_dead_lettered = len([p for p in poison if ("index", p) not in dead])
    report.dead_letters = len(dead)
    report.rows = len(rows)
    return set(want)


async def flag_rows(dsn: str) -> list[tuple[str, str, str]]:
    """``(record_id, flag, original_id)`` of every duplicate flag of the table."""
    async with await connect(dsn) as c:
        cur = await c.execute(query("flags_of_table"), {"table": TABLE})
        return [(r[0], r[1], r[2]) for r in await cur.fetchall()]


def check_flags(rows: list[tuple[str, str, str]], live: set[str], clean: dict[str, tuple[str, str]],
                report: Report) -> None:
    """Fill the flag figures of ``report``.

    ``duplicate_flags``: records flagged more than once, plus flags whose original is itself
    flagged (two originals for one record, or a record flagged both ways). ``stale_flags``: flags
    on, or pointing at, records that are no longer live. The ``*_vs_clean`` figures compare with a
    clean single-worker rerun on the final table.
    """
    mine = {rid: (flag, orig) for rid, flag, orig in rows}
    report.flags = len(rows)
    report.duplicate_flags = (len(rows) - len(mine)) + sum(1 for _, _, orig in rows if orig in mine)
    stale = [(rid, flag, orig) for rid, flag, orig in rows if rid not in live or orig not in live]
    report.stale_flags = len(stale)
    report.stale_flag_examples = stale[:10]
    report.flags_missing_vs_clean = sum(1 for rid in clean if rid not in mine)
    report.flags_extra_vs_clean = sum(1 for rid in mine if rid not in clean)
    report.flags_differing_vs_clean = sum(1 for rid in mine if rid in clean and clean[rid] != mine[rid])
    report.flag_mismatch_examples = [(rid, mine.get(rid), clean.get(rid)) for rid in sorted(set(mine) | set(clean))
                                     if mine.get(rid) != clean.get(rid)][:10]


async def clean_dedup_rerun(settings: Settings, fleet: Fleet, timeout_s: float) -> dict[str, tuple[str, str]]:
    """Wipe links/clusters/flags, re-enqueue every live document of the index (whatever the
    backend), run one worker; returns its flags."""
    async with opened_backend(settings) as backend:
        ids = [rid async for rid, _ in backend.iter_versions(TABLE)]
    async with await connect(settings.require_dsn()) as c:
        await c.execute(query("dedup_reset"), {"table": TABLE})
        for start in range(0, len(ids), 5000):
            part = ids[start : start + 5000]
            await c.execute(query("enqueue_fresh"), {"queue": "dedup", "table": TABLE, "record_ids": part,
                                                     "ops": ["U"] * len(part)})
        await c.execute(query("notify"), {"channel": "nearsync_dedup", "payload": TABLE})
    fleet.procs.clear()
    fleet.supervising = False
    fleet.spawn("worker-clean")
    try:
        await settle(settings.require_dsn(), timeout_s)
    finally:
        fleet.stop()
    return {rid: (flag, orig) for rid, flag, orig in await flag_rows(settings.require_dsn())}


async def inject(kind: str, fleet: Fleet, server: ThrowawayPostgres, proxy: Any, cfg: ChaosConfig,
                 rng: random.Random) -> None:
    """Inject one fault of ``kind`` and return when it is over (process restarted, server back)."""
    if kind == "kill_daemon":
        fleet.kill9(rng.choice([n for n in fleet.procs if n.startswith("daemon")]))
    elif kind == "kill_worker":
        fleet.kill9(rng.choice([n for n in fleet.procs if n.startswith("worker")]))
    elif kind in PG_KINDS:
        await asyncio.to_thread(server.restart, kind.removeprefix("pg_"), down_s=cfg.pg_down_s)
    elif kind == "index_outage":
        proxy.set_mode("refuse")  # drops open connections too
        await asyncio.sleep(cfg.outage_s)
        proxy.set_mode("forward")
    else:  # pragma: no cover
        raise ValueError(kind)


async def run_chaos(cfg: ChaosConfig) -> Report:
    """Run the whole scenario (see the module docstring) and return its figures.

    Raises:
        TimeoutError: a fault did not recover, or the queues did not drain, in time.
        PgServerError: no PostgreSQL binaries.
    """
    report = Report(faults={k: 0 for k in cfg.kinds()}, recovery_s={k: [] for k in cfg.kinds()})
    semaphores = named_semaphores()  # those the fleet's group kills leave are unlinked at the end
    work = cfg.work_dir or Path(tempfile.mkdtemp(prefix="nearsync-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(cfg.seed * 7919)
    # Commits must survive the immediate shutdowns injected below: synchronous_commit on (the fast
    # mode turns it off, and a commit lost by the server would count as a change lost by nearsync).
    # fsync may stay off: the OS keeps the WAL through a server crash.
    server = ThrowawayPostgres(fast=True, settings={"max_connections": "300", "synchronous_commit": "on"})
    server.start()
    t_start = time.monotonic()
    try:
        with psycopg.connect(server.dsn, autocommit=True) as c:
            c.execute("CREATE DATABASE chaos")
        dsn = f"postgresql://postgres@127.0.0.1:{server.port}/chaos"
        with search_index(cfg.backend) as (index, proxy):
            settings = write_config(work / "nearsync.toml", dsn, index)
            upgrade(settings)
            async with await connect(dsn) as c:
                await c.execute("ALTER TABLE ads ALTER COLUMN price TYPE text")
                cur = await c.execute("INSERT INTO ads (title, body, price) VALUES "
                                      "('Probe listing', 'The probe row of the chaos run.', '1') RETURNING id")
                probe_id = str((await cur.fetchone())[0])  # type: ignore[index]
            env = {k: v for k, v in os.environ.items() if not k.startswith("NEARSYNC_")}
            fleet = Fleet(work / "nearsync.toml", work, env)
            for i in range(cfg.daemons):
                fleet.spawn(f"daemon-{i + 1}")
            for i in range(cfg.workers):
                fleet.spawn(f"worker-{i + 1}")
            supervisor = asyncio.create_task(fleet.supervise())
            load = Load(dsn, cfg.seed, cfg.rate, cfg.poison_every, report)
            writer = asyncio.create_task(load.run())
            try:  # the fleet is stopped on every exit, including a fault that did not recover
                t_load = time.monotonic()
                try:
                    schedule = [k for k in cfg.kinds() for _ in range(cfg.faults_per_kind)]
                    rng.shuffle(schedule)
                    gap = cfg.duration_s / (len(schedule) + 1)
                    for n, kind in enumerate(schedule, 1):
                        await asyncio.sleep(max(0.0, t_load + n * gap * rng.uniform(0.8, 1.0) - time.monotonic()))
                        print(f"[{time.monotonic() - t_start:7.1f} s] fault {n}/{len(schedule)}: {kind}",
                              file=sys.stderr, flush=True)
                        await inject(kind, fleet, server, proxy, cfg, rng)
                        report.faults[kind] += 1
                        try:
                            report.recovery_s[kind].append(
                                await probe_recovered(settings, probe_id, n, cfg.recovery_timeout_s))
                        except TimeoutError as e:
                            raise TimeoutError(f"{e} after fault {n} ({kind}); queues: "
                                               f"{await queue_snapshot(dsn, probe_id)}") from None
                    await asyncio.sleep(max(0.0, t_load + cfg.duration_s - time.monotonic()))
                finally:
                    load.stopping = True
                    await writer
                    report.load_s = time.monotonic() - t_load
                report.drain_s = await settle(dsn, cfg.recovery_timeout_s * 2)
            finally:
                fleet.supervising = False
                supervisor.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await supervisor
                fleet.stop()
            report.unexpected_exits = fleet.unexpected_exits
            live = await compare(settings, report)
            chaos_flags = await flag_rows(dsn)
            clean = await clean_dedup_rerun(settings, fleet, cfg.recovery_timeout_s * 2)
            check_flags(chaos_flags, live, clean, report)
            async with await connect(dsn) as c:
                row = await (await c.execute(query("pending_total"))).fetchone()
                report.pending_after_drain = int(row[0]) if row else 0
    finally:
        server.stop()
        unlink_orphaned_semaphores(semaphores)
    report.total_s = time.monotonic() - t_start
    return report


def main(argv: list[str] | None = None) -> int:
    """CLI: run the chaos suite, print the JSON report; exit 1 (each broken invariant on stderr) when
    :meth:`Report.violations` finds any: lost changes, double or stale flags, flags that differ from
    the clean rerun, poison records not dead-lettered, faults not injected as asked."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=45.0, help="seconds of load (default 45)")
    p.add_argument("--faults-per-kind", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rate", type=float, default=120.0, help="changes per second written")
    p.add_argument("--poison-every", type=int, default=50)
    p.add_argument("--backend", default="postgres", choices=["postgres", "opensearch", "elasticsearch"])
    p.add_argument("--daemons", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--work-dir", type=Path)
    a = p.parse_args(argv)
    cfg = ChaosConfig(duration_s=a.duration, faults_per_kind=a.faults_per_kind, seed=a.seed, rate=a.rate,
                      poison_every=a.poison_every, backend=a.backend, daemons=a.daemons, workers=a.workers,
                      work_dir=a.work_dir)
    report = asyncio.run(run_chaos(cfg))
    print(json.dumps(report.summary(), indent=2))
    bad = report.violations(cfg)
    for what in bad:
        print(f"chaos: {what}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
