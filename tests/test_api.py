"""``nearsync serve``: the check API and result-set dedup against a real PostgreSQL and index backend,
through the ASGI app in process (httpx ASGI transport) and once through a real uvicorn process."""

from __future__ import annotations

import random

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from daemon.http.app import create_app
from daemon.http.options import ApiOptions, parse_api_keys
from daemon.http.dedup_set import group_sketches, shared_value_counts
from daemon.config import Settings
from daemon.service import opened_backend
from daemon.errors import ConfigError
from tests.conftest import REPO, running_indexer, running_worker
from tests.test_dedup import EDITED, ORIGINAL, OTHER_PRODUCT, add, dsettings, settle  # noqa: F401 (fixture)

CAMERA = {"user_id": "u1", "category": "camera", "title": "Canon EOS 600D DSLR camera with 18-55mm lens",
          "body": "Canon EOS 600D digital SLR, 18 megapixels, with the 18-55 kit lens, two batteries and charger. "
                  "Around 5000 shutter clicks, always kept in its bag. Collection in Lyon.",
          "price": 320.0, "lat": 45.76, "lon": 4.83}
CAMERA_EDIT = CAMERA | {"title": "Canon EOS 600D camera + 18-55 lens, barely used",
                        "body": "Around 5000 shutter clicks. Canon EOS 600D digital SLR camera, 18 MP, comes with "
                                "18-55 kit lens, 2 batteries and the charger. Collect in Lyon.", "price": 299.0}


def as_check(ad: dict[str, Any]) -> dict[str, Any]:
    """A test ad (column names) as a check body (field roles)."""
    return {("user" if k == "user_id" else k): v for k, v in ad.items()}


@contextlib.asynccontextmanager
async def api_client(s: Settings, options: ApiOptions | None = None,
                     headers: dict[str, str] | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """The app for ``s`` with its lifespan run, behind an httpx client on the ASGI transport
    (``Host: localhost``, an allowed host)."""
    app = create_app(s, options)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost",
                                     headers=headers) as c:
            yield c


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serve_process(s: Settings, log: Path, *extra: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Run ``nearsync serve`` as a real uvicorn process on a free loopback port; yields its base URL."""
    port = free_port()
    full_env = {**os.environ, "NEARSYNC_DSN": s.dsn, "NEARSYNC_BACKEND": s.index.backend, **(env or {})}
    cfg = log.with_suffix(".toml")
    cfg.write_text(_toml(s))
    args = [sys.executable, "-m", "daemon", "serve", "--config", str(cfg), "--port", str(port), *extra]
    with open(log, "ab") as out:
        proc = subprocess.Popen(args, env=full_env, cwd=REPO, stdout=out, stderr=out, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"nearsync serve exited {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > end:
                raise AssertionError(f"nearsync serve did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _toml(s: Settings) -> str:
    """The [index] and [dedup] settings of ``s`` as TOML (enough for the test server)."""
    import json

    def val(v: Any) -> str:
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} = {val(x)}" for k, x in v.items()) + "}"
        return json.dumps(v)

    lines = ["[source]", "create_reference_table = true", "[index]"]
    lines += [f"{k} = {val(v)}" for k, v in {"backend": s.index.backend, **s.index.options}.items()]
    lines += ["[dedup]"] + [f"{k} = {val(v)}" for k, v in s.dedup.items()]
    return "\n".join(lines) + "\n"


async def test_check_agrees_with_the_flag_the_worker_writes_later(dsettings: Settings) -> None:
    s = dsettings
    async with running_indexer(s), running_worker(s):
        orig = await add(s.dsn, ORIGINAL, "now() - interval '2 days'")
        cam = await add(s.dsn, CAMERA, "now() - interval '2 days'")
        await settle(s)
        async with api_client(s) as c:
            checked = {}
            for name, ad in (("edited", EDITED), ("camera", CAMERA_EDIT), ("other", OTHER_PRODUCT)):
                r = await c.post("/v1/check", json=as_check(ad))
                assert r.status_code == 200, r.text
                checked[name] = r.json()
        ids = {"edited": await add(s.dsn, EDITED), "camera": await add(s.dsn, CAMERA_EDIT),
               "other": await add(s.dsn, OTHER_PRODUCT)}
        await settle(s)
    async with await psycopg.AsyncConnection.connect(s.dsn) as conn:
        cur = await conn.execute("SELECT record_id, flag, original_id, score, signature_version "
                                 "FROM nearsync.duplicate_flags")
        got = {r[0]: r[1:] for r in await cur.fetchall()}
    assert checked["edited"]["decision"] == "duplicate" and checked["edited"]["matches"][0]["id"] == orig
    assert checked["camera"]["decision"] == "potential_duplicate" and checked["camera"]["matches"][0]["id"] == cam
    assert checked["other"]["decision"] == "unique" and checked["other"]["matches"] == []
    assert ids["other"] not in got
    for name in ("edited", "camera"):
        flag, original, score, version = got[ids[name]]
        res = checked[name]
        assert (res["decision"], res["matches"][0]["id"]) == (flag, original), name
        assert abs(res["score"] - score) < 0.05, (name, res["score"], score)
        assert res["signature_version"] == version
        assert set(res["matches"][0]["reasons"]) >= {"title", "body"}
        assert res["matches"][0]["summary"]


async def test_check_validation_names_the_field(dsettings: Settings) -> None:
    s = dsettings
    good = as_check(ORIGINAL)
    async with api_client(s) as c:
        cases = [
            (good | {"price": "call me"}, "price"),
            (good | {"lat": 123.0}, "lat"),
            (good | {"title": {"nested": 1}}, "title"),
            ({k: v for k, v in good.items() if k != "user"}, "user"),
            ({"price": 3.0, "user": "u1"}, "title"),
            ([good], "(body)"),
        ]
        for body, field in cases:
            r = await c.post("/v1/check", json=body)
            assert r.status_code == 422, (body, r.text)
            assert r.json()["field"] == field, r.json()
        r = await c.post("/v1/check", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["field"] == "(body)"
        r = await c.post("/v1/check", json=good | {"colour": "black"})
        assert r.status_code == 200 and r.json()["decision"] == "unique"
        assert (await c.post("/v1/check", json=good | {"price": "1,299.00"})).status_code == 200
    async with api_client(s, ApiOptions(unknown_fields="reject")) as c:
        r = await c.post("/v1/check", json=good | {"colour": "black"})
        assert r.status_code == 422 and r.json()["field"] == "colour"
        assert (await c.post("/v1/check", json=good)).status_code == 200


async def test_oversized_bodies_are_refused_before_reading(dsettings: Settings) -> None:
    s = dsettings
    async with api_client(s, ApiOptions(max_body_bytes=2000)) as c:
        big = as_check(ORIGINAL) | {"body": "x" * 5000}
        r = await c.post("/v1/check", json=big)
        assert r.status_code == 413

        read: list[int] = []

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked, capped while streaming
            for _ in range(100):
                read.append(1)
                yield b" " * 500

        r = await c.post("/v1/check", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        r = await c.post("/v1/dedup-set", json={"ids": [str(i) for i in range(1000)]})
        assert r.status_code == 413
        r = await c.post("/v1/check", json=as_check(ORIGINAL))
        assert r.status_code == 200


async def test_api_key_and_openapi(dsettings: Settings) -> None:
    s = dsettings
    opts = ApiOptions(api_keys=parse_api_keys("alice:k1,bob:k2"))
    async with api_client(s, opts) as c:
        assert (await c.post("/v1/check", json=as_check(ORIGINAL))).status_code == 401
        assert (await c.post("/v1/check", json=as_check(ORIGINAL), headers={"X-API-Key": "nope"})).status_code == 401
        assert (await c.get("/moderation")).status_code == 401
        r = await c.post("/v1/check", json=as_check(ORIGINAL), headers={"X-API-Key": "k2"})
        assert r.status_code == 200
        assert (await c.get("/healthz")).json() == {"ok": True, "database": "ok", "index": "open"}
        assert (await c.get("/openapi.json")).status_code == 401  # only /healthz (and /login) are public
        spec = (await c.get("/openapi.json", headers={"X-API-Key": "k1"})).json()
    assert spec["openapi"].startswith("3.")
    assert {"/v1/check", "/v1/dedup-set", "/moderation", "/moderation/decide"} <= set(spec["paths"])
    assert "title" in spec["components"]["schemas"]["Ad"]["properties"]
    assert opts.key_name("k1") == "alice" and opts.key_name("k3") is None
    assert parse_api_keys("plain") == {"plain": "api"}
    with pytest.raises(ConfigError):
        parse_api_keys("alice:,bob:k2")
    with pytest.raises(ConfigError):
        ApiOptions(unknown_fields="maybe")


def test_shared_value_counts_equal_set_intersections() -> None:
    rng = random.Random(3)
    pool = [rng.randrange(1 << 62) for _ in range(60)]
    sketches = [sorted(rng.sample(pool, rng.randrange(0, 25))) for _ in range(40)] + [[], [pool[0]]]
    m = shared_value_counts(sketches)
    for i, a in enumerate(sketches):
        for j, b in enumerate(sketches):
            assert m[i, j] == len(set(a) & set(b)), (i, j)
    assert shared_value_counts([]).shape == (0, 0)


def test_group_sketches_keeps_the_first_ranked_and_compares_only_sharing_items() -> None:
    a = list(range(0, 64))
    near = list(range(2, 66))       # Jaccard ~ 0.94 with a
    far = list(range(1000, 1064))   # nothing shared
    groups = group_sketches([far, a, near, [], a], 0.5, 64)
    assert groups == [[0], [1, 2, 4], [3]]
    assert group_sketches([a, near], 0.99, 64) == [[0], [1]]


async def test_dedup_set_groups_near_duplicates_and_caches_signatures(dsettings: Settings) -> None:
    s = dsettings
    async with running_indexer(s), running_worker(s):
        ids = [await add(s.dsn, ad) for ad in (OTHER_PRODUCT, ORIGINAL, CAMERA, EDITED, ORIGINAL, CAMERA_EDIT)]
        await settle(s)
    other, orig, cam, edited, copy, cam2 = ids
    async with api_client(s) as c:
        body = {"ids": [other, orig, cam, edited, int(copy), cam2, "999999"]}
        r1 = (await c.post("/v1/dedup-set", json=body)).json()
        r2 = (await c.post("/v1/dedup-set", json=body)).json()
        assert r1["groups"] == r2["groups"]
        assert r1["groups"][0][0] == orig and copy in r1["groups"][0]
        assert all(other not in g for g in r1["groups"])
        assert r1["missing"] == ["999999"] and r1["cached"] == 0 and r2["cached"] == 6
        assert r1["keep"][:2] == [other, orig] and copy not in r1["keep"]
        strict = (await c.post("/v1/dedup-set", json=body | {"threshold": 1.0})).json()
        assert strict["groups"] == [[orig, copy]]
        # a version that is not the cached one is fetched again
        async with opened_backend(s) as backend:
            version = (await backend.get("public.ads", [orig]))[orig].version
        r3 = (await c.post("/v1/dedup-set", json={"ids": [{"id": orig, "version": version},
                                                          {"id": copy, "version": version + 999}]})).json()
        assert r3["cached"] == 1
        docs = (await c.post("/v1/dedup-set", json={"documents": [as_check(ORIGINAL), as_check(OTHER_PRODUCT),
                                                                  as_check(ORIGINAL) | {"id": "x"}]})).json()
        assert docs["groups"] == [[0, "x"]]
        r = await c.post("/v1/dedup-set", json={"ids": [str(i) for i in range(201)]})
        assert r.status_code == 422 and r.json()["field"] == "ids"
        r = await c.post("/v1/dedup-set", json={"ids": [orig], "threshold": 0})
        assert r.status_code == 422 and r.json()["field"] == "threshold"
        r = await c.post("/v1/dedup-set", json={"documents": [{"title": 5.5, "price": "x"}]})
        assert r.status_code == 422 and r.json()["field"] == "documents[0].price"


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)  # the process, not the backends
async def test_real_uvicorn_process_with_api_key(dsettings: Settings, tmp_path: Path) -> None:
    s = dsettings
    async with running_indexer(s), running_worker(s):
        orig = await add(s.dsn, ORIGINAL)
        await settle(s)
    secret = "s3cret-" + os.urandom(6).hex()
    log = tmp_path / "serve.log"
    with serve_process(s, log, "--access-log", env={"NEARSYNC_API_KEY": f"ops:{secret}"}) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as c:
            assert (await c.post("/v1/check", json=as_check(ORIGINAL))).status_code == 401
            r = await c.post("/v1/check", json=as_check(ORIGINAL), headers={"X-API-Key": secret})
            assert r.status_code == 200
            assert r.json()["decision"] == "duplicate" and r.json()["matches"][0]["id"] == orig
            r = await c.post("/v1/check", content=b"x" * (2 << 20),
                             headers={"X-API-Key": secret, "content-type": "application/json"})
            assert r.status_code == 413
            r = await c.post("/v1/dedup-set", json={"ids": [orig, orig]}, headers={"X-API-Key": secret})
            assert r.json()["groups"] == [] and r.json()["keep"] == [orig]  # never grouped with itself
            await asyncio.sleep(0.2)
    text = log.read_text()
    assert "/v1/check" in text  # the access log is on, and still holds no key
    assert secret not in text


@pytest.mark.parametrize("exhaustive_below", [200, 0], ids=["exhaustive", "keys-only"])
async def test_a_copy_without_body_location_or_category_is_flagged_and_checked(dsettings: Settings,
                                                                               exhaustive_below: int) -> None:
    """Issue 17's reproduction: the same title, model number, seller and price, an empty body, no
    location or category. The default super-token rules ([title, geo], [model, category]) gave
    such a pair no shared key, so it was never compared (/v1/check said unique, no flag). Both the
    exhaustive comparison of a small scope and the keys alone (exhaustive_below = 0: identity keys,
    degraded rules) must now find it."""
    from dataclasses import replace

    s = replace(dsettings, dedup={**dsettings.dedup, "exhaustive_below": exhaustive_below})
    ad = ORIGINAL | {"user_id": "u7", "category": None, "lat": None, "lon": None}
    copy = ad | {"body": None}
    async with running_indexer(s), running_worker(s):
        orig = await add(s.dsn, ad, "now() - interval '1 day'")
        await add(s.dsn, OTHER_PRODUCT | {"user_id": "u7", "category": None, "lat": None, "lon": None})
        await settle(s)
        async with api_client(s) as c:
            r = await c.post("/v1/check", json=as_check(copy))
            assert r.status_code == 200, r.text
            checked = r.json()
        dup = await add(s.dsn, copy)
        await settle(s)
    assert checked["decision"] == "duplicate" and checked["matches"][0]["id"] == orig
    async with await psycopg.AsyncConnection.connect(s.dsn) as conn:
        cur = await conn.execute("SELECT record_id, flag, original_id FROM nearsync.duplicate_flags")
        got = {r[0]: r[1:] for r in await cur.fetchall()}
    assert got == {dup: ("duplicate", orig)}
