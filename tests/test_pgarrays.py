"""Packed integer arrays (daemon.db.arrays) and the orjson codec (daemon.db.jsoncodec) against a real
PostgreSQL: what is sent is what the server reads back."""

from __future__ import annotations

import math

import numpy as np
import psycopg
import pytest

from daemon.db import jsoncodec
from daemon.db.arrays import Int4Array, Int8Array
from daemon.db.pool import configure_session

EDGES = [0, 1, -1, 2**63 - 1, -(2**63), 123456789012345, -98765]


def test_packed_arrays_round_trip_through_the_server(fresh_db: str) -> None:
    with psycopg.connect(fresh_db) as c:
        for values in (EDGES, [], [7], list(range(-5000, 5000, 3))):
            row = c.execute("SELECT %b::bigint[], %b::integer[], cardinality(%b::bigint[])",
                            [Int8Array(values), Int4Array([v % 2**31 for v in values]), Int8Array(values)]).fetchone()
            assert row == (values, [v % 2**31 for v in values], len(values))
        row = c.execute("SELECT %b::bigint[] = ARRAY[1, 2, 3]::bigint[]", [Int8Array(np.array([1, 2, 3]))]).fetchone()
        assert row == (True,)


def test_packed_arrays_refuse_what_they_cannot_hold() -> None:
    with pytest.raises(OverflowError):
        Int4Array([2**31])
    with pytest.raises(OverflowError):
        Int8Array([2**63])
    with pytest.raises(ValueError, match="one-dimensional"):
        Int8Array(np.zeros((2, 2), dtype=np.int64))


async def test_json_codec_on_pooled_sessions(fresh_db: str) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as c:
        await configure_session(c)
        doc = {"a": [1, 2.5, None, "é"], "big": 2**70, "nested": {"x": True}}
        text = jsoncodec.dumps(doc)
        cur = await c.execute("SELECT %s::jsonb, %s::jsonb", [text, jsoncodec.dumps({"n": np.float64(1.5), "nan": math.nan})])
        row = await cur.fetchone()
        assert row is not None
        assert row[0] == doc  # an integer beyond 64 bits falls back to the standard library both ways
        assert row[1] == {"n": 1.5, "nan": None}  # jsonb has no NaN: it is written as null
