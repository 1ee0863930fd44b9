"""The PostgreSQL backend's wire form (daemon.backends.pg_encoding) against a real PostgreSQL: the
packed array slices, and documents encoded ahead (in the signature workers) being stored exactly as
documents encoded by the backend itself."""

from __future__ import annotations

import math

import numpy as np
import psycopg
import pytest

from daemon.backends.base import CandidateQuery, IndexDocument, Outcome
from daemon.backends.pg_encoding import (
    encode,
    encode_document,
    int64_bytes,
    key_hashes,
    packed_slices,
)
from daemon.backends.postgres import PostgresBackend
from daemon.capture.documents import DocumentBuilder
from daemon.ops.migrate import upgrade
from tests.conftest import make_settings
from tests.test_search_backend import T, doc


def test_packed_slices_are_cut_back_by_the_server(fresh_db: str) -> None:
    from daemon.db.arrays import Int4Array, Int8Array

    arrays = [[5, 6, 7], None, [], [2**63 - 1], None]
    flat, offs, lens = packed_slices([None if a is None else np.array(a, dtype=np.int64).tobytes() for a in arrays])
    with psycopg.connect(fresh_db) as c:
        got = c.execute(
            "SELECT CASE WHEN n >= 0 THEN (%b::bigint[])[o + 1 : o + n] END FROM unnest(%b::int[], %b::int[])"
            " WITH ORDINALITY AS u(o, n, i) ORDER BY i",
            [Int8Array(flat), Int4Array(offs), Int4Array(lens)]).fetchall()
    assert [r[0] for r in got] == arrays


def test_int64_bytes_takes_only_lists_of_64_bit_ints() -> None:
    assert np.frombuffer(int64_bytes([1, -(2**63), 2**63 - 1]), dtype=np.int64).tolist() == [1, -(2**63), 2**63 - 1]
    assert int64_bytes([]) == b""
    for bad in ([1.5, 2], ["1", "2"], [2**63], [[1, 2]], "12", None, {"a": 1}):
        assert int64_bytes(bad) is None, bad


def test_encode_moves_int_arrays_out_and_refuses_nan_in_fields() -> None:
    d = doc("1", 3, ["b1:a", "s0:b"], scope={"user": "42"})
    e = encode(d)
    assert np.frombuffer(e.minhash, dtype=np.int64).tolist() == [1, 2, 3]
    assert np.frombuffer(e.bottomk, dtype=np.int64).tolist() == [4, 5]
    assert '"minhash"' not in e.signature and '"bottomk"' not in e.signature and '"bands":["b1:a"]' in e.signature
    assert set(np.frombuffer(e.key_hashes, dtype=np.int64).tolist()) == key_hashes(T, {"user": "42"}, ["b1:a", "s0:b"])
    odd = doc("2", 3, ["b1:a"])
    odd.signature["minhash"] = [0.5, 1.5]  # not a bigint[]: stays in the jsonb
    assert encode(odd).minhash is None and '"minhash":[0.5,1.5]' in encode(odd).signature
    with pytest.raises(ValueError, match="price"):
        encode(doc("3", 3, ["b1:a"], price=math.nan))
    with pytest.raises(ValueError, match=r"extra\.depth\[1\]"):
        encode(doc("4", 3, ["b1:a"], extra={"depth": [1.0, math.inf]}))


async def test_documents_encoded_ahead_are_stored_as_plain_ones(fresh_db: str) -> None:
    upgrade(make_settings(fresh_db))
    be = PostgresBackend(fresh_db)
    await be.open()
    try:
        plain = [doc("p1", 3, ["b1:a", "b2:b"]), doc("p2", 3, ["b1:a", "s0:c"], title="Blue bike ünïcode")]
        ahead = [encode_document(doc("e" + d.record_id[1:], 3, list(d.keys), **{"title": d.fields["title"]}))
                 for d in plain]
        assert ahead[0].fields == {} and ahead[0].encoded is not None  # slim for the trip between processes
        res = await be.write([*plain, *ahead], [])
        assert set(res.outcomes.values()) == {Outcome.APPLIED}
        got = await be.get(T, ["p1", "p2", "e1", "e2"])
        for p, e in (("p1", "e1"), ("p2", "e2")):
            assert (got[p].fields, got[p].keys, got[p].signature) == (got[e].fields, got[e].keys, got[e].signature)
        assert list(got["p2"].signature["minhash"]) == [1, 2, 3] and list(got["p2"].signature["bottomk"]) == [4, 5]
        [found] = await be.candidates_many(T, [CandidateQuery(["b1:a", "s0:c"], {}, exclude_id="p2")], min_match=2)
        assert [c.record_id for c in found] == ["e2"]
        stale = await be.write([encode_document(doc("e1", 2, ["b1:a"]))], [])
        assert stale.outcomes[(T, "e1")] is Outcome.STALE
    finally:
        await be.close()


async def test_a_builder_with_the_encoder_dead_letters_what_cannot_be_encoded(fresh_db: str) -> None:
    s = make_settings(fresh_db)
    upgrade(s)
    from daemon.errors import RecordError
    from daemon.service import open_source

    table = await open_source(s)
    builder = DocumentBuilder.from_settings(s, table)
    from dataclasses import replace

    enc = replace(builder, encoder=PostgresBackend.document_encoder)
    row = {"id": 1, "user_id": "u1", "category": "tv", "title": "Sony Bravia 40 inch", "body": "Like new.",
           "price": 100.0, "lat": 48.85, "lon": 2.35, "status": "active", "created_at": None, "updated_at": None}
    built = enc.build(row, 5)
    assert isinstance(built, IndexDocument) and built.encoded is not None and built.fields == {}
    assert encode(builder.build(row, 5)) == built.encoded  # the same wire form either way
    bad = replace(enc, encoder=lambda d: encode_document(IndexDocument(d.table, d.record_id, d.version,
                                                                       {**d.fields, "x": math.nan})))
    with pytest.raises(RecordError, match="not serialisable"):
        bad.build(row, 5)


def test_documents_pickle_back_whole() -> None:
    """``IndexDocument`` and ``EncodedDocument`` pickle as their field values (the trip back from a
    signature worker): every field comes back, ``side`` and the encoded form included."""
    import pickle

    d = doc("1", 3, ["b1:a", "s0:b"], scope={"user": "42"})
    d.side = ("prepared", 1)
    e = encode_document(d)
    for obj in (d, e, e.encoded, [e, e]):
        back = pickle.loads(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))
        assert back == obj and type(back) is type(obj)
    back = pickle.loads(pickle.dumps(d))
    assert back.side == ("prepared", 1) and back.signature == d.signature and back.keys == d.keys


async def test_signed_keys_are_stored_once_and_read_back_on_both_sides_of_0013(fresh_db: str) -> None:
    """A document whose keys are its signature's own (every document the daemon signs) is stored
    with ``keys`` NULL and read back with the same keys, rebuilt from its signature; keys that are
    not the signature's own are stored as before. The downgrade of migration 0013 writes the rebuilt
    keys into the rows, as the code before it reads them."""
    from daemon.backends.base import SCOPE_KEY
    from daemon.capture.source import SourceTable
    from daemon.config import SourceSettings
    from daemon.ops.migrate import downgrade
    from daemon.signatures import SignatureParams

    s = make_settings(fresh_db)
    upgrade(s)
    builder = DocumentBuilder(SourceTable(SourceSettings(), "int"), SignatureParams(), "user")
    rows = [({"id": i, "user_id": "u1", "title": title, "body": body, "status": "active"}, 7)
            for i, (title, body) in enumerate([("Sony KDL-40V4100 40in LCD TV", "Full HD, barely used"),
                                               ("Red bike", "Almost new, with lights. Call 555-0100"),
                                               ("", "")], start=1)]
    signed = builder.build_many(rows)
    assert all(isinstance(d, IndexDocument) and d.keys[-1] == SCOPE_KEY for d in signed)
    odd = doc("9", 3, ["b1:a", "x:not-in-the-signature"])
    be = PostgresBackend(fresh_db)
    await be.open()
    try:
        assert set((await be.write([*signed, odd], [])).outcomes.values()) == {Outcome.APPLIED}
        got = await be.get("public.ads", ["1", "2", "3"])
        assert {rid: d.keys for rid, d in got.items()} == {d.record_id: d.keys for d in signed}
        assert (await be.get(T, ["9"]))["9"].keys == odd.keys
    finally:
        await be.close()
    with psycopg.connect(fresh_db, autocommit=True) as c:
        stored = dict(c.execute("SELECT record_id, keys FROM nearsync.documents").fetchall())
        assert stored == {"1": None, "2": None, "3": None, "9": odd.keys}
        downgrade(s, "0012")
        stored = dict(c.execute("SELECT record_id, keys FROM nearsync.documents").fetchall())
        assert stored == {**{d.record_id: d.keys for d in signed}, "9": odd.keys}
