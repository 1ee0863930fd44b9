"""``/metrics``, ``/healthz`` and ``/readyz`` on one HTTP port for the daemon and the worker.

* ``/metrics``: Prometheus text format (:class:`daemon.http.metrics.LoopMetrics`); the database-wide
  gauges are re-read at most once a second, on scrape.
* ``/healthz``: 200 while the process is alive and its loop turns (``QueueLoop.last_loop_at``
  younger than ``[daemon] health_max_stall_s``, default 60 s), else 503. The loop turns on every
  wake/poll, after every batch and before every retry, so a daemon waiting out a database outage
  is healthy but not ready.
* ``/readyz``: 200 when the database answers, the index answers, and the oldest pending change on
  the loop's queue is younger than ``[daemon] ready_max_lag_s`` (default 60 s), else 503. The body
  is JSON naming each check.

Served by the same stack as ``nearsync serve`` (a Starlette app under uvicorn), in the process's
own event loop, on a socket bound here (so a taken port is an ``OSError`` at start, and uvicorn
installs no signal handlers: the queue loop keeps its own). The port comes from
``[daemon] metrics_port`` / ``--metrics-port`` / ``NEARSYNC_METRICS_PORT`` (default: off); the
address from ``[daemon] metrics_host`` (default ``127.0.0.1``).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from daemon.backends.base import IndexBackend
from daemon.logs import get_logger
from daemon.capture.loop import QueueLoop
from daemon.config import Settings
from daemon.http.metrics import CONTENT_TYPE_LATEST, LoopMetrics
from daemon.db.queries import query

log = get_logger("nearsync.health")


@dataclass
class HealthServer:
    """The HTTP endpoints of one queue loop.

    Args:
        loop: the queue loop (``last_loop_at``, ``ready``, ``queue_name``); its ``observer`` is set
            to ``metrics``.
        metrics: the loop's metrics.
        dsn: database DSN for the readiness and gauge queries (never logged).
        backend: the opened index backend, probed by ``/readyz``.
        table: ``schema.table`` counted in the index as the index probe.
        max_lag_s / max_stall_s: readiness lag bound and liveness stall bound (s)
            (``[daemon] ready_max_lag_s`` / ``health_max_stall_s``).
        timeout_s: per-check timeout (s).
    """

    loop: QueueLoop
    metrics: LoopMetrics
    dsn: str
    backend: IndexBackend
    table: str
    max_lag_s: float = 60.0
    max_stall_s: float = 60.0
    timeout_s: float = 3.0
    port: int = 0
    _server: uvicorn.Server | None = None
    _last: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.loop.observer = self.metrics

    def app(self) -> Starlette:
        """The Starlette application of the three endpoints."""
        return Starlette(routes=[Route("/metrics", self._metrics), Route("/healthz", self._healthz),
                                 Route("/readyz", self._readyz)])

    async def start(self, port: int, host: str = "127.0.0.1") -> int:
        """Listen on ``host:port`` (port 0: any free port); returns the bound port.

        Raises:
            OSError: the port is taken, or the address is not one of this machine's.
        """
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        config = uvicorn.Config(self.app(), log_level="warning", access_log=False, lifespan="off",
                                server_header=False)
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[sock])
        self._server = server
        self.port = int(sock.getsockname()[1])
        log.info("metrics and health endpoints listening", host=host, port=self.port)
        return self.port

    async def stop(self) -> None:
        """Stop serving. Safe to call twice."""
        if self._server is not None:
            self._server.should_exit = True
            await self._server.shutdown()
            self._server = None

    async def _refresh(self, *, reach: bool = False) -> dict[str, Any]:
        """Re-read the database gauges (at most once a second) and return them.

        Args:
            reach: also when the gauges are fresh, connect and ping the database, so that the answer
                says whether it is reachable now (readiness), not a second ago.
        Raises:
            psycopg.Error: the database is unreachable or the query failed.
        """
        fresh = bool(self._last) and time.monotonic() - self.metrics.refreshed_at < 1.0
        if fresh and not reach:
            return self._last
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True,
                                                         connect_timeout=max(1, int(self.timeout_s))) as conn:
            if fresh:
                await conn.execute(query("ping"))
            else:
                self._last = await self.metrics.refresh(conn)
        return self._last

    def healthy(self) -> tuple[bool, dict[str, Any]]:
        """Liveness: ``(ok, details)`` with the seconds since the loop last turned."""
        age = time.monotonic() - self.loop.last_loop_at
        return age < self.max_stall_s, {"last_loop_age_s": round(age, 3), "max_stall_s": self.max_stall_s}

    async def ready(self) -> tuple[bool, dict[str, Any]]:
        """Readiness: ``(ok, details)`` with one entry per check (database, index, lag, loop)."""
        checks: dict[str, Any] = {"loop": self.loop.ready.is_set()}
        try:
            figures = await asyncio.wait_for(self._refresh(reach=True), self.timeout_s)
            checks["database"] = True
            lag = float(figures["queues"].get(self.loop.queue_name, {}).get("oldest_age_s", 0.0))
            checks["lag_s"] = round(lag, 3)
            checks["lag_ok"] = lag < self.max_lag_s
        except Exception as e:  # noqa: BLE001 - any failure means not ready
            checks["database"] = False
            checks["database_error"] = type(e).__name__
            checks["lag_ok"] = False
        try:
            await asyncio.wait_for(self.backend.count(self.table), self.timeout_s)
            checks["index"] = True
        except Exception as e:  # noqa: BLE001
            checks["index"] = False
            checks["index_error"] = type(e).__name__
        ok = bool(checks["loop"] and checks["database"] and checks["index"] and checks["lag_ok"])
        return ok, checks | {"max_lag_s": self.max_lag_s}

    async def _metrics(self, _request: Request) -> Response:
        self.metrics.observe_loop(self.loop.last_loop_at)
        try:
            await asyncio.wait_for(self._refresh(), self.timeout_s)
        except Exception:  # noqa: BLE001 - serve the last known gauges while the database is down
            pass
        return Response(self.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def _healthz(self, _request: Request) -> Response:
        ok, details = self.healthy()
        return _json(ok, details)

    async def _readyz(self, _request: Request) -> Response:
        ok, details = await self.ready()
        return _json(ok, details)


def _json(ok: bool, details: dict[str, Any]) -> Response:
    return JSONResponse({"ok": ok, **details}, status_code=200 if ok else 503)


@asynccontextmanager
async def serving(loop: QueueLoop, settings: Settings, backend: IndexBackend,
                  table: str) -> AsyncIterator[HealthServer | None]:
    """Serve the endpoints of ``loop`` on ``[daemon] metrics_host:metrics_port`` for the duration
    of the block (no port: nothing is served).

    Args:
        loop: the queue loop. settings: the process settings (DSN, ``[daemon]`` health bounds and
            address). backend: the opened index backend. table: ``schema.table`` probed in the index.

    Yields:
        the running :class:`HealthServer`, or ``None`` when no metrics port is set.

    Raises:
        OSError: the port is taken.
    """
    d = settings.daemon
    if d.metrics_port is None:
        yield None
        return
    server = HealthServer(loop, LoopMetrics(loop.queue_name), settings.require_dsn(), backend, table,
                          max_lag_s=d.ready_max_lag_s, max_stall_s=d.health_max_stall_s)
    await server.start(d.metrics_port, d.metrics_host)
    try:
        yield server
    finally:
        await server.stop()
