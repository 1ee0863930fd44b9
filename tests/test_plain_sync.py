"""Plain sync (``signatures.enabled = false``): fields only, no signature, no candidate key; the
processes that need signatures refuse to start. Against a real PostgreSQL and a real daemon."""

from __future__ import annotations

from dataclasses import replace

import psycopg
import pytest

from daemon.http.app import ApiState
from daemon.http.options import ApiOptions
from daemon.config import Settings
from daemon.capture.documents import DocumentBuilder, SignaturePool
from daemon.errors import ConfigError
from daemon.service import build_indexer, build_worker, open_source, opened_backend
from daemon.signatures import SignatureParams, signatures_enabled
from tests.conftest import index_state, pending, running_indexer, table_state, wait_until, with_dedup
from tests.test_cdc import insert_ads


def plain(s: Settings) -> Settings:
    return replace(s, signatures={**s.signatures, "enabled": False})


async def test_plain_sync_indexes_fields_and_no_signature_or_key(settings: Settings) -> None:
    s = plain(settings)
    async with running_indexer(s) as indexer:
        assert indexer.signer is not None and indexer.signer.workers == 0  # no worker processes to feed
        assert indexer.loop.concurrency == 2  # two batches in flight: one's database waits overlap the other's
        ids = await insert_ads(s.dsn, 40)
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
            await c.execute("UPDATE ads SET title = 'Samsung plasma 50 inch' WHERE id = %s", (int(ids[0]),))
            await c.execute("DELETE FROM ads WHERE id = %s", (int(ids[1]),))
        await wait_until(lambda: _in_sync(s))
        assert await pending(s.dsn) == 0
    state = await index_state(s)
    assert state[ids[0]]["title"] == "Samsung plasma 50 inch" and ids[1] not in state and len(state) == 39
    async with opened_backend(s) as backend:
        docs = await backend.get("public.ads", ids[2:5])
    assert [d.fields["title"] for d in docs.values()] == [f"Sony Bravia KDL-{40 + i} LCD television {i}" for i in (2, 3, 4)]
    assert all(d.keys == [] and not d.signature for d in docs.values())
    if s.index.backend == "postgres":
        async with await psycopg.AsyncConnection.connect(s.dsn) as c:
            keys = await (await c.execute("SELECT count(*) FROM nearsync.document_lookup, unnest(key_hashes)")).fetchone()
            arrays = await (await c.execute("SELECT count(*) FROM nearsync.documents WHERE minhash IS NOT NULL"
                                            " OR bottomk IS NOT NULL")).fetchone()
        assert keys == (0,) and arrays == (0,)


async def _in_sync(s: Settings) -> bool:
    return await index_state(s) == await table_state(s.dsn)


async def test_turning_signatures_off_drops_the_keys_a_record_had(settings: Settings) -> None:
    if settings.index.backend != "postgres":
        pytest.skip("reads the PostgreSQL backend's key table")
    [rid] = await insert_ads(settings.dsn, 1)
    async with running_indexer(settings):
        await wait_until(lambda: _in_sync(settings))
    async with await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as c:
        signed = (await (await c.execute("SELECT count(*) FROM nearsync.document_lookup, unnest(key_hashes)")).fetchone())[0]  # type: ignore[index]
        assert signed > 0
        await c.execute("UPDATE ads SET price = price + 1 WHERE id = %s", (int(rid),))
        s = plain(settings)
        async with running_indexer(s):
            await wait_until(lambda: _in_sync(s))
            await wait_until(lambda: _zero(pending(s.dsn)))
        left = await (await c.execute("SELECT count(*) FROM nearsync.document_lookup, unnest(key_hashes)")).fetchone()
    assert left == (0,)


async def _zero(aw: object) -> bool:
    return (await aw) == 0  # type: ignore[misc]


async def test_what_needs_signatures_refuses_plain_sync(settings: Settings) -> None:
    s = plain(settings)
    async with opened_backend(s) as backend:
        with pytest.raises(ConfigError, match="dedup worker") as e:
            await build_worker(s, backend)
        assert e.value.key == "signatures.enabled"
        with pytest.raises(ConfigError, match="dedup queue") as e:
            await build_indexer(with_dedup(s), backend)
        assert e.value.key == "signatures.enabled"
    with pytest.raises(ConfigError, match="check API") as e:
        ApiState(s, ApiOptions())
    assert e.value.key == "signatures.enabled"


def test_signatures_enabled_is_a_boolean_defaulting_to_true() -> None:
    assert signatures_enabled(None) is True and signatures_enabled({}) is True
    assert signatures_enabled({"enabled": False}) is False
    assert SignatureParams.from_mapping({"enabled": False}) == SignatureParams()  # not a signature parameter
    for bad in ("no", 0, None):
        with pytest.raises(ConfigError) as e:
            signatures_enabled({"enabled": bad})
        assert e.value.key == "signatures.enabled"
        with pytest.raises(ConfigError) as e:
            SignatureParams.from_mapping({"enabled": bad})
        assert e.value.key == "signatures.enabled"


async def test_a_large_batch_without_a_pool_is_built_in_order_on_a_thread(settings: Settings) -> None:
    s = plain(settings)
    await insert_ads(s.dsn, 600)
    table = await open_source(s)
    builder = DocumentBuilder.from_settings(s, table)
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        rows = await (await c.execute("SELECT id, user_id, category, title, body, price, lat, lon, created_at, source,"
                                      " status FROM ads ORDER BY id")).fetchall()
    cols = ("id", "user_id", "category", "title", "body", "price", "lat", "lon", "created_at", "source", "status")
    items = [(dict(zip(cols, r)), k + 1) for k, r in enumerate(rows)]
    pool = SignaturePool(builder)
    assert pool.workers == 0
    parts = [part async for part in pool.build_chunks(items, 250)]
    assert [len(p) for p in parts] == [250, 250, 100]
    assert [d for p in parts for d in p] == builder.build_many(items)
