"""The daemon against a search server that goes away: refused connections, a black hole, and a
server replaced by an empty one. Real osmem-server processes, a fault-injecting TCP proxy
(``tests.search_server.TcpProxy``) and a real PostgreSQL; nothing may be lost.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from daemon.backends import search_admin as A
from daemon.config import Settings
from daemon.ops.reindex import verify
from daemon.service import opened_backend
from tests.conftest import PG_CANDIDATES, index_state, pending, running_indexer, table_state, wait_until
from tests.test_cdc import insert_ads

try:
    from tests.search_server import TcpProxy, start_osmem
    from tests.test_search_backend import search_proxy  # noqa: F401 - the fixture
except ImportError:  # pragma: no cover - osmem-server not installed
    pytest.skip("osmem-server unavailable", allow_module_level=True)


@pytest.fixture
def proxy(search_proxy: TcpProxy) -> TcpProxy:
    """A fault-injecting proxy to the session osmem-server (``search_proxy``)."""
    return search_proxy


def through(s: Settings, proxy: TcpProxy) -> Settings:
    """``s`` with the search backend reached through ``proxy`` and a short request timeout."""
    return replace(s, index=replace(s.index, options={**s.index.options, "url": proxy.url, "timeout_s": 2.0}))


async def in_sync(s: Settings) -> bool:
    return await pending(s.dsn) == 0 and await index_state(s) == await table_state(s.dsn)


async def write_through_outage(s: Settings, proxy: TcpProxy, mode: str, outage_s: float) -> None:
    async with running_indexer(s):
        await insert_ads(s.dsn, 20)
        await wait_until(lambda: in_sync(s), timeout=30)
        proxy.set_mode(mode)
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
            end = asyncio.get_running_loop().time() + outage_s
            i = 0
            while asyncio.get_running_loop().time() < end:  # keep writing during the whole outage
                await insert_ads(s.dsn, 2, start=100 + 2 * i)
                await c.execute("UPDATE ads SET title = %s WHERE id = %s", (f"edited in outage {i}", 1 + i % 20))
                if i % 5 == 0:
                    await c.execute("DELETE FROM ads WHERE id = (SELECT max(id) FROM ads)")
                i += 1
                await asyncio.sleep(0.25)
        assert await pending(s.dsn) > 0  # the outage held work back
        proxy.set_mode("forward")
        await wait_until(lambda: in_sync(s), timeout=90, interval=0.5)
    async with opened_backend(s) as be:
        report = await verify(s, be, sample=1000)
    assert report["drift"] is False and report["rows"] > 20, report
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        dead = await (await c.execute("SELECT count(*) FROM nearsync.dead_letters")).fetchone()
    assert dead == (0,)


@pytest.mark.parametrize(("backend_name", "mode"), [("opensearch", "refuse"), ("elasticsearch", "blackhole"),
                                                    (PG_CANDIDATES, "refuse")], indirect=["backend_name"])
async def test_daemon_survives_10s_outage(settings: Settings, proxy: TcpProxy, mode: str) -> None:
    await write_through_outage(through(settings, proxy), proxy, mode, 10.0)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
@pytest.mark.parametrize("backend_name", ["opensearch", "elasticsearch"], indirect=True)
async def test_daemon_survives_30s_outage(settings: Settings, proxy: TcpProxy, mode: str) -> None:
    await write_through_outage(through(settings, proxy), proxy, mode, 30.0)


@pytest.mark.parametrize("backend_name", ["opensearch", "elasticsearch"], indirect=True)
async def test_wiped_index_detected_by_verify_and_rebuilt_by_repair(settings: Settings, proxy: TcpProxy) -> None:
    s = through(settings, proxy)
    await insert_ads(s.dsn, 40)
    async with running_indexer(s):
        await wait_until(lambda: in_sync(s), timeout=30)
        with start_osmem() as fresh_url:  # the server is replaced by a new, empty process
            host, port = fresh_url.split("://", 1)[1].rsplit(":", 1)
            proxy.target = (host, int(port))
            proxy.set_mode("forward")  # drops pooled connections to the old server
            # the running daemon recreates the alias (not a concrete index named like it) and goes on
            await insert_ads(s.dsn, 3, start=500)
            await wait_until(lambda: _zero(pending(s.dsn)), timeout=30)
            async with opened_backend(s) as be:
                report = await verify(s, be)
                assert report["drift"] and report["missing"] == 40 and report["indexed"] == 3, report
                fixed = await verify(s, be, repair=True)
                assert fixed["repaired"]
                assert (await verify(s, be, sample=1000))["drift"] is False
                assert [v.name for v in await A.list_versions(be.client, be.alias)] == [f"{be.alias}_v1"]
            assert await index_state(s) == await table_state(s.dsn)


async def _zero(aw: Any) -> bool:
    return await aw == 0


@pytest.mark.parametrize("backend_name", ["opensearch"], indirect=True)
async def test_daemon_started_during_an_outage_waits_then_indexes(settings: Settings, proxy: TcpProxy,
                                                                  tmp_path: Any) -> None:
    """``nearsync run`` started while the index is unreachable waits for it (it used to exit, and a
    supervisor restarted it in a loop), then indexes what was written meanwhile."""
    from tests.test_reindex_search import spawn_search_daemon

    s = through(settings, proxy)
    proxy.set_mode("refuse")
    daemon = spawn_search_daemon(s, tmp_path)
    try:
        await insert_ads(s.dsn, 10)
        log = tmp_path / "daemon.log"

        async def waiting() -> bool:  # said so in its log (a loaded machine may take seconds to start it)
            return "unavailable at start" in log.read_text() or daemon.poll() is not None

        await wait_until(waiting, timeout=60, interval=0.2)
        await asyncio.sleep(1.0)  # and keeps waiting rather than exiting
        assert daemon.poll() is None, log.read_text()[-2000:]
        assert "unavailable at start" in log.read_text()
        proxy.set_mode("forward")
        await wait_until(lambda: in_sync(s), timeout=60)
    finally:
        daemon.terminate()
        code = daemon.wait(30)
    assert code == 0
    assert len(await index_state(s)) == 10
