"""Issue 19, hostile input: every request that answered HTTP 500 (or was silently accepted) before
the pydantic request models, as a named regression test against a real PostgreSQL and index
backend (the app in process, through httpx's ASGI transport; ``test_api.py`` runs a real uvicorn).

Each test states the answer before the fix in its docstring."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from daemon.config import Settings
from daemon.db.throwaway import ThrowawayPostgres
from daemon.http.models import MAX_DEPTH, MAX_PRICE
from daemon.http.options import ApiOptions, parse_api_keys
from daemon.ops.migrate import upgrade
from tests.conftest import flags, make_settings, running_indexer, running_worker, with_dedup
from tests.test_api import CAMERA, api_client, as_check
from tests.test_dedup import EDITED, ORIGINAL, add, dsettings, settle  # noqa: F401 (fixture)

GOOD = as_check(ORIGINAL)
KEYS = ApiOptions(api_keys=parse_api_keys("ops:key-o,eve:key-e"))
OPS = {"X-API-Key": "key-o"}
JSON = {"content-type": "application/json"}



@pytest.fixture
def backend_name() -> str:
    """The HTTP layer is under test here, not the backends: postgres only."""
    return "postgres"


def raw(obj_text: str) -> bytes:
    """A JSON body written by hand (so it can hold NaN, huge numbers, escapes Python would not emit)."""
    return obj_text.encode()


def good_with(key: str, value_json: str) -> bytes:
    """The good ad with ``key`` set to the raw JSON text ``value_json``."""
    body = json.dumps({k: v for k, v in GOOD.items() if k != key})
    return raw(body[:-1] + f', "{key}": {value_json}}}')


async def post_raw(c: Any, path: str, body: bytes) -> Any:
    """POST ``body`` as JSON."""
    return await c.post(path, content=body, headers=JSON)


def assert_422(r: Any, field: str) -> None:
    """A 422 naming ``field``."""
    assert r.status_code == 422, (r.status_code, r.text[:300])
    assert r.json()["field"] == field, r.json()


async def test_check_400_digit_integer_price_is_422_not_500(dsettings: Settings) -> None:
    """Before: 500 (OverflowError converting the integer to a float)."""
    async with api_client(dsettings) as c:
        assert_422(await post_raw(c, "/v1/check", good_with("price", "9" * 400)), "price")


async def test_dedup_set_document_with_400_digit_price_is_422_not_500(dsettings: Settings) -> None:
    """Before: 500, as for a check."""
    async with api_client(dsettings) as c:
        body = raw('{"documents": [' + json.dumps(GOOD) + ', ' + good_with("price", "9" * 400).decode() + ']}')
        assert_422(await post_raw(c, "/v1/dedup-set", body), "documents[1].price")


async def test_check_price_1e308_against_a_match_is_422_and_prices_in_range_summarise_sanely(
        dsettings: Settings) -> None:
    """Before: 500 (OverflowError in the price comparison with the indexed ad priced 49; the summary
    said "price +3999…%"). Now a price above MAX_PRICE (1e12) is refused naming the field, and a
    check at the bound against the same match answers 200 with a summary that fits on a line."""
    s = dsettings
    async with running_indexer(s), running_worker(s):
        await add(s.dsn, ORIGINAL | {"price": 49})
        await settle(s)
    async with api_client(s) as c:
        for price in ("1e308", "1E308", '"1e308"', "1.7976931348623157e308"):
            assert_422(await post_raw(c, "/v1/check", good_with("price", price)), "price")
        r = await c.post("/v1/check", json=GOOD | {"price": MAX_PRICE})
        assert r.status_code == 200, r.text
        assert r.json()["matches"], "the ad priced 49 is still a match"
        assert all(len(m["summary"]) < 200 and "e+" not in m["summary"] for m in r.json()["matches"])


async def test_check_id_with_nul_is_422_not_500(dsettings: Settings) -> None:
    """Before: 500 (PostgreSQL refuses NUL in the candidate query's text parameter)."""
    async with api_client(dsettings) as c:
        assert_422(await post_raw(c, "/v1/check", good_with("id", '"a\\u0000b"')), "id")


@pytest.mark.parametrize("bad_id", ['"x\\u0000y"', '"\\ud800"', '"ok\\udfffok"'], ids=["nul", "lone-high", "lone-low"])
async def test_dedup_set_ids_with_nul_or_lone_surrogate_are_422_not_500(dsettings: Settings, bad_id: str) -> None:
    """Before: 500 (NUL: PostgreSQL; a lone surrogate: UTF-8 encoding of the query parameter)."""
    async with api_client(dsettings) as c:
        assert_422(await post_raw(c, "/v1/dedup-set", raw(f'{{"ids": ["1", {bad_id}]}}')), "ids[1]")
        assert_422(await post_raw(c, "/v1/dedup-set", raw(f'{{"ids": [{{"id": {bad_id}}}]}}')), "ids[0]")


async def test_5000_digit_integer_id_is_422_not_500(dsettings: Settings) -> None:
    """Before: 500 (json.loads: "Exceeds the limit (4300 digits) for integer string conversion")."""
    huge = "7" * 5000
    async with api_client(dsettings) as c:
        assert_422(await post_raw(c, "/v1/check", good_with("id", huge)), "id")
        assert_422(await post_raw(c, "/v1/dedup-set", raw(f'{{"ids": [{huge}]}}')), "ids[0]")
        assert_422(await post_raw(c, "/v1/dedup-set", raw(f'{{"ids": [{2 ** 63}]}}')), "ids[0]")  # just past int64
        r = await post_raw(c, "/v1/dedup-set", raw(f'{{"ids": [{2 ** 63 - 1}]}}'))
        assert r.status_code == 200 and r.json()["missing"] == [str(2 ** 63 - 1)]


async def test_json_nested_100000_deep_is_422_not_500(dsettings: Settings) -> None:
    """Before: 500 (RecursionError in json.loads). Now any body nested deeper than MAX_DEPTH is 422."""
    async with api_client(dsettings) as c:
        for path in ("/v1/check", "/v1/dedup-set"):
            assert_422(await post_raw(c, path, b"[" * 100_000 + b"]" * 100_000), "(body)")
            assert_422(await post_raw(c, path, raw('{"title": ' + "[" * 100_000 + "]" * 100_000 + "}")), "(body)")
        deep = raw('{"ids": [' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "]}")
        assert_422(await post_raw(c, "/v1/dedup-set", deep), "(body)")
        assert (await c.post("/v1/check", json=GOOD)).status_code == 200  # and it still answers


async def test_moderation_category_with_nul_is_422_not_500(dsettings: Settings) -> None:
    """Before: 500 (the filter reached PostgreSQL)."""
    async with api_client(dsettings) as c:
        r = await c.get("/moderation?category=a%00b")
        assert_422(r, "category")
        assert_422(await c.get("/moderation?min_score=NaN"), "min_score")
        assert_422(await c.get("/moderation?limit=" + "9" * 500), "limit")
        assert (await c.get("/moderation?category=nothing-like-it")).status_code == 200


async def test_moderation_min_score_too_small_for_a_real_is_not_500(dsettings: Settings) -> None:
    """Found by the fuzzer: ``min_score=1e-308`` was a 500 (PostgreSQL ``real`` underflow in the queue
    query); the filter is compared as double precision now."""
    async with api_client(dsettings) as c:
        for value in ("1e-308", "5e-324", "1.1125369292536007e-308"):
            r = await c.get("/moderation", params={"min_score": value})
            assert r.status_code == 200, (value, r.text[:300])


async def test_decide_with_nul_in_record_id_is_422_and_a_moderator_field_cannot_rename_the_key(
        dsettings: Settings) -> None:
    """Before: 500 for NUL in record_id or in moderator (both reached PostgreSQL), and the key ``ops``
    was recorded as ``eve`` when the form or X-Moderator said so. Now the moderator is the key's name."""
    s = with_dedup(dsettings, duplicate_threshold=95.0, potential_threshold=60.0)
    async with running_indexer(s), running_worker(s):
        orig = await add(s.dsn, ORIGINAL, "now() - interval '1 day'")
        copy = await add(s.dsn, EDITED)
        await settle(s)
    assert (await flags(s.dsn))[copy] == ("potential_duplicate", orig)
    async with api_client(s, KEYS, headers=OPS | {"accept": "application/json"}) as c:
        r = await c.post("/moderation/decide", data={"record_id": "1\x002", "original_id": orig, "action": "confirm"})
        assert_422(r, "record_id")
        r = await c.post("/moderation/decide", data={"record_id": copy, "original_id": "\x00", "action": "confirm"})
        assert_422(r, "original_id")
        r = await c.post("/moderation/decide", data={"record_id": copy, "original_id": orig, "action": "confirm",
                                                     "moderator": "eve\x00"}, headers={"X-Moderator": "eve"})
        assert r.status_code == 200, r.text
        assert r.json()["decided_by"] == "ops"
    async with await psycopg.AsyncConnection.connect(s.dsn) as conn:
        cur = await conn.execute("SELECT decided_by FROM nearsync.pair_decisions")
        assert [row[0] for row in await cur.fetchall()] == ["ops"]


@pytest.mark.parametrize(("value", "field"), [
    ("-5", "price"), ('"-5"', "price"), ("NaN", "price"), ("Infinity", "price"), ("-Infinity", "price"),
    ('"NaN"', "price"), ('"$1,2,3"', "price"), ('"1.299,00"', "price"), ("1e400", "price"),
    ("999", "lat"), ("-181", "lon"), ('"91"', "lat"), ("NaN", "lat"), ("true", "price"),
], ids=lambda v: str(v))
async def test_values_once_silently_accepted_are_422(dsettings: Settings, value: str, field: str) -> None:
    """Before: price -5 / NaN / Infinity were "no price" (200), "$1,2,3" was read as 123, 1e400 as no price."""
    async with api_client(dsettings) as c:
        assert_422(await post_raw(c, "/v1/check", good_with(field, value)), field)
        docs = raw('{"documents": [' + good_with(field, value).decode() + "]}")
        assert_422(await post_raw(c, "/v1/dedup-set", docs), f"documents[0].{field}")


async def test_valid_number_text_is_still_accepted(dsettings: Settings) -> None:
    async with api_client(dsettings) as c:
        for price in ("1,299.00", "$49", "€ 1,000,000", " 12.5 ", "1e3", "0", ""):
            r = await c.post("/v1/check", json=GOOD | {"price": price})
            assert r.status_code == 200, (price, r.text)


async def test_repeated_ids_are_grouped_once_at_their_first_place(dsettings: Settings) -> None:
    """Before: {"ids": [3, 3]} answered groups [[3, 3]] (an id grouped with itself). Now a repeated id
    counts once, at its first place; two documents with the same id are refused."""
    s = dsettings
    async with running_indexer(s), running_worker(s):
        a = await add(s.dsn, ORIGINAL)
        b = await add(s.dsn, ORIGINAL)
        cam = await add(s.dsn, CAMERA)
        await settle(s)
    async with api_client(s) as c:
        r = (await c.post("/v1/dedup-set", json={"ids": [int(a), a, {"id": a, "version": 1}]})).json()
        assert r["groups"] == [] and r["keep"] == [a]
        r = (await c.post("/v1/dedup-set", json={"ids": [cam, a, cam, b, a]})).json()
        assert r["groups"] == [[a, b]] and r["keep"] == [cam, a]
        r = await c.post("/v1/dedup-set", json={"documents": [GOOD | {"id": "x"}, GOOD | {"id": "x"}]})
        assert_422(r, "documents[1].id")


async def test_error_answers_never_echo_unencodable_text(dsettings: Settings) -> None:
    """An unknown key holding a lone surrogate, named in a 422, must still encode as UTF-8 JSON."""
    async with api_client(dsettings, ApiOptions(unknown_fields="reject")) as c:
        r = await post_raw(c, "/v1/check", good_with("\\ud800x", "1"))
        assert r.status_code == 422 and r.json()["field"] == "\\ud800x"
        r = await post_raw(c, "/v1/check", raw('{"title": "a", "user": "u", "\\u0000": 1}'))
        assert r.status_code == 422 and r.json()["field"] == "\\x00"


async def test_not_json_content_type_is_415(dsettings: Settings) -> None:
    """A cross-site form can post text/plain JSON without a CORS preflight; /v1/* refuse anything
    but application/json (before: accepted)."""
    async with api_client(dsettings) as c:
        r = await c.post("/v1/check", content=json.dumps(GOOD), headers={"content-type": "text/plain"})
        assert r.status_code == 415


async def test_moderation_and_healthz_answer_503_while_postgresql_is_down() -> None:
    """Before: /moderation answered 500 and serve's /healthz {"ok": true} with PostgreSQL stopped.
    A private server, stopped in the middle of the test (the session's server stays up)."""
    server = ThrowawayPostgres(fast=True)
    server.start()
    try:
        s = make_settings(server.dsn, index={"backend": "postgres"}, dedup={"enabled": True})
        upgrade(s)
        async with api_client(s, KEYS, headers=OPS) as c:
            assert (await c.get("/healthz")).json() == {"ok": True, "database": "ok", "index": "open"}
            assert (await c.get("/moderation")).status_code == 200
            server.stop(remove=False)
            r = await c.get("/moderation")
            assert r.status_code == 503 and "unreachable" in r.json()["error"]
            r = await c.get("/healthz")
            assert r.status_code == 503 and r.json() == {"ok": False, "database": "unreachable", "index": "open"}
            r = await c.post("/v1/check", json=GOOD)
            assert r.status_code == 503, r.text
            r = await c.post("/moderation/decide", data={"record_id": "1", "original_id": "2", "action": "confirm"})
            assert r.status_code == 503, r.text
    finally:
        server.stop()


async def test_healthz_and_queue_say_not_migrated_on_a_bare_database(fresh_db: str) -> None:
    """Before: serve on a database never migrated answered 500 to everything; now 503 naming the cause."""
    s = make_settings(fresh_db, index={"backend": "postgres"}, dedup={"enabled": True})
    async with api_client(s) as c:
        r = await c.get("/healthz")
        assert r.status_code == 503 and r.json()["database"] == "not migrated"
        r = await c.get("/moderation")
        assert r.status_code == 503 and "migrate" in r.json()["error"]
        r = await c.post("/v1/check", json=GOOD)
        assert r.status_code == 503 and "migrate" in r.json()["error"]
