"""Prometheus metrics for the indexing daemon and the dedup worker.

One :class:`LoopMetrics` per process (or per loop in tests), on its own
:class:`prometheus_client.CollectorRegistry`, so several loops in one process never collide. Each
process exports only its own series (the indexing daemon no dedup series, and the other way
round), the standard ``process_*`` series of :class:`prometheus_client.ProcessCollector` (resident
memory, CPU seconds, open files), and no ``*_created`` samples. The
queue loop calls :meth:`LoopMetrics.observe_batch` after every acknowledged batch and
:meth:`LoopMetrics.observe_retry` before every transient-error retry; the database-wide gauges
(pending count and oldest pending age per queue, dead letters per queue, notification queue usage)
are refreshed by :meth:`LoopMetrics.refresh` from the same queries ``nearsync status`` uses, so the
two always agree.

Metric names (all prefixed ``nearsync_``, Prometheus naming: base units and ``_total`` /
``_ratio`` / ``_seconds`` / ``_rows`` suffixes; ``queue`` is the process's queue, ``index`` or
``dedup``; (i) the indexing daemon only, (d) the dedup worker only):

* counters: ``changes_claimed_total``, ``changes_indexed_total`` (i), ``changes_deleted_total`` (i),
  ``changes_stale_total`` (i), ``dead_lettered_total``, ``poison_records_total`` (of those, the
  poison records: see daemon.capture.poison), ``retried_total{reason}``,
  ``backend_errors_total{type,status}``, ``candidate_cap_hits_total`` (d);
* histograms: ``batch_size_rows``, ``batch_duration_seconds``, ``commit_to_indexed_seconds`` (i),
  ``commit_to_flagged_seconds`` (d), ``candidates_per_record`` (d);
* gauges: ``pending_changes``, ``oldest_pending_age_seconds``, ``dead_letters`` (rows),
  ``notification_queue_usage_ratio`` (0..1, (i)), ``batch_limit_rows`` (the adaptive batch size),
  ``last_loop_age_seconds``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from psycopg.rows import dict_row

from daemon.db.queries import query

__all__ = ["CONTENT_TYPE_LATEST", "LoopMetrics", "error_status"]

disable_created_metrics()  # no *_created samples: they double the series count for nothing we use

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
SIZE_BUCKETS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 25_000)
CANDIDATE_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
_STATUS = re.compile(r"\b([45]\d\d)\b")


def error_status(error: BaseException) -> str:
    """The HTTP-like status of an index error for the ``status`` label.

    Uses a ``status``/``status_code`` attribute when the exception has one, else the first 4xx/5xx
    number in its message, else ``"none"``.
    """
    for attr in ("status", "status_code"):
        value = getattr(error, attr, None)
        if isinstance(value, int):
            return str(value)
    m = _STATUS.search(str(error))
    return m.group(1) if m else "none"


class LoopMetrics:
    """The metrics of one queue loop, registered on ``registry``.

    Args:
        queue: the loop's queue name (``index`` or ``dedup``), the default ``queue`` label.
        registry: where to register (default: a new private registry).
    """

    def __init__(self, queue: str, registry: CollectorRegistry | None = None) -> None:
        self.queue = queue
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        index_r = r if queue == "index" else None  # a metric made with registry=None is not exported
        dedup_r = r if queue == "dedup" else None
        q = ("queue",)
        self.claimed = Counter("nearsync_changes_claimed", "Tracking rows claimed", q, registry=r)
        self.indexed = Counter("nearsync_changes_indexed", "Documents written to the index", q, registry=index_r)
        self.deleted = Counter("nearsync_changes_deleted", "Documents deleted from the index", q,
                               registry=index_r)
        self.stale = Counter("nearsync_changes_stale", "Writes the index refused as older than its version",
                             q, registry=index_r)
        self.dead = Counter("nearsync_dead_lettered", "Rows moved to the dead-letter table", q, registry=r)
        self.poison = Counter("nearsync_poison_records", "Rows dead-lettered as poison records (their worker "
                              "stopped max_takeovers times with them in hand)", q, registry=r)
        self.retried = Counter("nearsync_retried", "Retries: whole batches (transient error type) or "
                               "single records (reason=record)", ("queue", "reason"), registry=r)
        self.backend_errors = Counter("nearsync_backend_errors", "Index backend errors by type and status",
                                      ("queue", "type", "status"), registry=r)
        self.cap_hits = Counter("nearsync_candidate_cap_hits", "Records whose candidate list hit the cap",
                                q, registry=dedup_r)
        self.batch_size = Histogram("nearsync_batch_size_rows", "Rows per claimed batch", q,
                                    buckets=SIZE_BUCKETS, registry=r)
        self.batch_duration = Histogram("nearsync_batch_duration_seconds", "Claim-to-ack time of a batch",
                                        q, buckets=LATENCY_BUCKETS, registry=r)
        self.to_indexed = Histogram("nearsync_commit_to_indexed_seconds",
                                    "Change recorded (COMMIT) to indexed and acknowledged",
                                    buckets=LATENCY_BUCKETS, registry=index_r)
        self.to_flagged = Histogram("nearsync_commit_to_flagged_seconds",
                                    "Change recorded (COMMIT) to dedup flags written",
                                    buckets=LATENCY_BUCKETS, registry=dedup_r)
        self.candidates = Histogram("nearsync_candidates_per_record", "Candidate pairs scored per record "
                                    "(batch average)", buckets=CANDIDATE_BUCKETS, registry=dedup_r)
        self.pending = Gauge("nearsync_pending_changes", "Changes pending on this queue", q, registry=r)
        self.oldest_age = Gauge("nearsync_oldest_pending_age_seconds", "Age of the oldest pending change",
                                q, registry=r)
        self.dead_letters = Gauge("nearsync_dead_letters", "Rows of this queue in the dead-letter table", q,
                                  registry=r)
        self.notify_usage = Gauge("nearsync_notification_queue_usage_ratio",
                                  "pg_notification_queue_usage(): fraction of the NOTIFY queue in use",
                                  registry=index_r)
        self.batch_limit = Gauge("nearsync_batch_limit_rows", "Current adaptive batch size", q, registry=r)
        self.last_loop_age = Gauge("nearsync_last_loop_age_seconds", "Seconds since the loop last turned",
                                   q, registry=r)
        self.sweep_passes = Gauge("nearsync_dedup_sweep_passes", "Passes of the idle workers' sweep completed "
                                  "over the table (daemon.dedup.sweep)", ("table",), registry=dedup_r)
        self.sweep_last_pass = Gauge("nearsync_dedup_sweep_last_pass_seconds", "Duration of the sweep's last "
                                     "completed pass over the table", ("table",), registry=dedup_r)
        self.sweep_resting = Gauge("nearsync_dedup_sweep_resting", "1 while the sweep rests: its last pass "
                                   "saw no change and nothing changed since", ("table",), registry=dedup_r)
        self.refreshed_at = 0.0
        for g in (self.pending, self.oldest_age, self.dead_letters):  # present from the first scrape
            g.labels(queue)

    def observe_batch(self, *, claimed: int, done_lags_s: Sequence[float], failed: int, dead: int,
                      counts: dict[str, int], duration_s: float, limit: int) -> None:
        """Record one acknowledged batch.

        Args:
            claimed: rows claimed. done_lags_s: per acknowledged row, seconds from its change to now.
            failed: per-record failures (retried later, or dead-lettered: ``dead``).
            counts: the handler's counters (``indexed``, ``deleted``, ``stale``, ``pairs``, ``scored``,
                ``capped``). duration_s: claim-to-ack seconds. limit: the batch limit in force.
        """
        q = self.queue
        self.claimed.labels(q).inc(claimed)
        self.batch_size.labels(q).observe(claimed)
        self.batch_duration.labels(q).observe(duration_s)
        self.batch_limit.labels(q).set(limit)
        if counts.get("indexed"):
            self.indexed.labels(q).inc(counts["indexed"])
        if counts.get("deleted"):
            self.deleted.labels(q).inc(counts["deleted"])
        if counts.get("stale"):
            self.stale.labels(q).inc(counts["stale"])
        if dead:
            self.dead.labels(q).inc(dead)
        if failed - dead > 0:
            self.retried.labels(q, "record").inc(failed - dead)
        if counts.get("capped"):
            self.cap_hits.labels(q).inc(counts["capped"])
        if counts.get("scored"):
            self.candidates.observe(counts.get("pairs", 0) / counts["scored"])
        hist = self.to_flagged if q == "dedup" else self.to_indexed
        for lag in done_lags_s:
            hist.observe(lag)

    def observe_poison(self, dead: int) -> None:
        """Record ``dead`` rows dead-lettered as poison records (also counted as dead-lettered)."""
        self.dead.labels(self.queue).inc(dead)
        self.poison.labels(self.queue).inc(dead)

    def observe_retry(self, error: BaseException) -> None:
        """Record a whole-batch retry after a transient ``error`` (and a backend error if it is one)."""
        self.retried.labels(self.queue, type(error).__name__).inc()
        from daemon.backends.base import TransientIndexError

        if isinstance(error, TransientIndexError):
            self.backend_errors.labels(self.queue, type(error).__name__, error_status(error)).inc()

    def observe_loop(self, last_loop_at: float) -> None:
        """Set the loop-age gauge from the loop's ``last_loop_at`` (``time.monotonic()`` seconds)."""
        self.last_loop_age.labels(self.queue).set(max(0.0, time.monotonic() - last_loop_at))

    async def refresh(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, Any]:
        """Re-read the database-wide gauges on ``conn`` (autocommit); for the dedup queue also the
        sweep's passes, last pass duration (s) and resting state (1/0) per table (``nearsync.dedup_sweeps``).

        Returns:
            ``{"queues": {queue: {pending, oldest_age_s, dead_letters}}, "notification_queue_usage": float}``.

        Raises:
            psycopg.Error: the database could not be read (the gauges keep their last values).
        """
        out: dict[str, Any] = {"queues": {q: {"pending": 0, "oldest_age_s": 0.0, "dead_letters": 0}
                                          for q in ("index", "dedup")}}
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query("queue_status"))
            for r in await cur.fetchall():
                out["queues"].setdefault(r["queue"], {"dead_letters": 0})
                out["queues"][r["queue"]] |= {"pending": r["pending"], "oldest_age_s": r["oldest_age_s"]}
            await cur.execute(query("dead_letter_count"))
            for r in await cur.fetchall():
                out["queues"].setdefault(r["queue"], {"pending": 0, "oldest_age_s": 0.0})["dead_letters"] = r["n"]
            await cur.execute(query("notification_queue_usage"))
            row = await cur.fetchone()
            out["notification_queue_usage"] = float(row["usage"]) if row else 0.0
            if self.queue == "dedup":
                await cur.execute(query("sweeps"))
                for r in await cur.fetchall():
                    self.sweep_passes.labels(r["table_name"]).set(r["passes"])
                    self.sweep_resting.labels(r["table_name"]).set(1 if r["resting"] else 0)
                    if r["last_pass_s"] is not None:
                        self.sweep_last_pass.labels(r["table_name"]).set(r["last_pass_s"])
        own = out["queues"].get(self.queue, {})
        self.pending.labels(self.queue).set(own.get("pending", 0))
        self.oldest_age.labels(self.queue).set(own.get("oldest_age_s", 0.0))
        self.dead_letters.labels(self.queue).set(own.get("dead_letters", 0))
        self.notify_usage.set(out["notification_queue_usage"])
        self.refreshed_at = time.monotonic()
        return out

    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format."""
        return generate_latest(self.registry)
