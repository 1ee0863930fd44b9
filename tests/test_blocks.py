"""Block purging (daemon.signatures.blocks): exact block sizes, the large blocks a corpus snapshot
stores, and the dedup worker leaving their keys out of its lookups, on a real PostgreSQL (and the
search backends where a server is available)."""

from __future__ import annotations

import random
from dataclasses import replace
from collections import Counter
from typing import Any

import numpy as np
import psycopg
import pytest

from daemon.backends.base import CorpusReader, DeleteOp, Outcome, lookup_keys
from daemon.backends.pg_encoding import key_hashes as backend_key_hashes
from daemon.config import Settings
from daemon.db.queries import query
from daemon.db.rarity import load_active
from daemon.dedup.settings import MAX_BLOCK, dedup_options
from daemon.dedup.worker import is_candidate_pair, query_keys
from daemon.errors import ConfigError
from daemon.ops.rarity import refresh_rarity
from daemon.service import opened_backend
from daemon.signatures.blocks import BlockCounter, LargeBlocks, key_hash, key_hashes, key_prefix, purgeable
from tests.conftest import PG_CANDIDATES, queues_empty, running_indexer, running_worker, wait_until, with_dedup
from tests.test_rarity import _insert, _links, index_done


def test_block_counter_counts_each_block_exactly_across_folds() -> None:
    """Block sizes equal a plain count of (scope, key) over the documents' super tokens, whatever the
    buffer (folds merge partial counts); a document's repeated key counts once, and the keys that
    are never purged (here LSH band keys) are not counted."""
    rng = random.Random(7)
    docs = [({"user": rng.choice("ab")}, [f"{rng.choice(['t:p:', 't:0:', 'b1:'])}{rng.randrange(40)}"
                                           for _ in range(rng.randrange(1, 12))]) for _ in range(500)]
    expected = Counter(h for scope, keys in docs for h in key_hashes("public.ads", scope, filter(purgeable, keys)))
    for buffer in (1, 17, 10_000):
        counter = BlockCounter(buffer=buffer)
        for scope, keys in docs:
            counter.add("public.ads", scope, keys)
        assert counter.sizes() == dict(expected) and counter.documents == len(docs)
        large = counter.larger_than(20)
        assert large.tolist() == sorted(h for h, n in expected.items() if n > 20) and large.dtype == np.int64
    with pytest.raises(ValueError, match="buffer"):
        BlockCounter(buffer=0)


def test_large_blocks_drop_only_their_keys_of_their_scope_in_order() -> None:
    """A large block is one key in one scope of one table: the same key elsewhere is kept, and the
    kept keys keep their order. Only super tokens are purged: an LSH band, simhash block or
    identity key is kept even when listed. The identity is the PostgreSQL backend's stored key hash."""
    table, a, b = "public.ads", {"user": "1"}, {"user": "2"}
    listed = ["t:p:common", "b3:copied", "s1:0f0f", "k:t:title"]
    large = LargeBlocks([key_hash(key_prefix(table, a), k) for k in listed], max_block=10)
    assert large.keep(table, a, ["x", "t:p:common", "y", "b3:copied", "s1:0f0f", "k:t:title"]) == [
        "x", "y", "b3:copied", "s1:0f0f", "k:t:title"]
    assert large.keep(table, b, ["x", "t:p:common", "y"]) == ["x", "t:p:common", "y"]
    assert large.keep("public.other", a, ["t:p:common"]) == ["t:p:common"]
    assert len(large) == 4 and large.max_block == 10
    assert [purgeable(k) for k in listed] == [True, False, False, False]
    assert backend_key_hashes(table, a, ["t:p:common"]) == {key_hash(key_prefix(table, a), "t:p:common")}


def test_max_block_is_validated_and_defaults_to_500(settings: Settings) -> None:
    assert dedup_options(settings).max_block == MAX_BLOCK == 500
    assert dedup_options(with_dedup(settings, max_block=0)).max_block == 0
    for bad in (-1, 1.5, True, "500"):
        with pytest.raises(ConfigError, match="dedup.max_block"):
            dedup_options(with_dedup(settings, max_block=bad))


TITLES = ["oak table chairs set", "oak table chairs lamp", "oak table chairs walnut", "oak table chairs pine",
          "oak table chairs stool", "oak table chairs bench", "oak table chairs shelf", "oak table chairs desk",
          "brass lamp shade", "brass lamp shades", *["copper kettle whistle"] * 7]


def _ads(user: str, order: list[int]) -> list[dict[str, Any]]:
    # one user (one scope), no body, price or place: the title alone decides, and the blocking path
    # decides candidacy (exhaustive_below 0)
    return [{"user_id": user, "category": "furniture", "title": TITLES[i]} for i in order]


async def test_the_worker_leaves_the_snapshots_large_blocks_out_whatever_the_order(settings: Settings) -> None:
    """With ``max_block`` 5, the super tokens the eight "oak table chairs …" ads of a user all hold
    are large blocks once the snapshot is refreshed: after the requeue a pair stays linked only if it
    shares a key outside them, the pairs that shared nothing else are no longer linked, the snapshot
    lists exactly the super tokens' blocks larger than 5 documents, seven copies of one ad still
    link (through keys that are never purged), and the links are the same whatever order the ads
    came in (user "v" gets the same ads as "u", shuffled and interleaved with them)."""
    s = with_dedup(settings, max_block=5, exhaustive_below=0, rarity=0)
    opts = dedup_options(s)
    shuffled = list(range(len(TITLES)))
    random.Random(3).shuffle(shuffled)
    ads = [ad for pair in zip(_ads("u", list(range(len(TITLES)))), _ads("v", shuffled), strict=True) for ad in pair]
    async with running_indexer(s), running_worker(s):
        ids = await _insert(s.dsn, ads)
        await wait_until(lambda: queues_empty(s.dsn), timeout=60)
        before = await _links(s.dsn)
        async with opened_backend(s) as backend:
            report = await refresh_rarity(s, backend, requeue=True, progress=False)
            docs = await backend.get("public.ads", ids)
        await wait_until(lambda: queues_empty(s.dsn), timeout=60)
        after = await _links(s.dsn)
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        snap = await load_active(c, "public.ads")
    assert snap is not None and snap.version == report["version"]
    large = snap.large_blocks
    assert report["max_block"] == large.max_block == 5 and report["large_blocks"] == len(large) > 0
    blocks = Counter(h for d in docs.values()
                     for h in key_hashes("public.ads", d.scope, filter(purgeable, lookup_keys(d.keys))))
    assert {h for h in blocks if h in large} == {h for h, n in blocks.items() if n > 5}
    purged = replace(opts, scoring=opts.scoring.with_snapshot(snap))
    for a, b in after:
        assert is_candidate_pair(docs[a], docs[b], purged, exhaustive=False)
        assert set(query_keys(docs[a], purged)) & set(docs[b].keys)
    dropped = set(before) - set(after)
    assert dropped, "the large blocks were the only keys some linked pairs shared"
    for a, b in dropped:
        assert not set(query_keys(docs[a], purged)) & set(lookup_keys(docs[b].keys))
        assert not is_candidate_pair(docs[a], docs[b], purged, exhaustive=False)
        assert is_candidate_pair(docs[a], docs[b], opts, exhaustive=False)  # without the snapshot: a candidate pair
    named = {rid: (ad["user_id"], ad["title"]) for rid, ad in zip(ids, ads, strict=True)}

    def of(user: str, links: dict[tuple[str, str], float]) -> dict[frozenset[str], float]:
        return {frozenset((named[a][1], named[b][1])): v for (a, b), v in links.items() if named[a][0] == user}

    assert frozenset(("brass lamp shade", "brass lamp shades")) in of("u", after)  # small blocks still find pairs
    # seven copies: their super tokens are large blocks, their identity and simhash keys are not purged
    copies = [rid for rid in ids if named[rid] == ("u", "copper kettle whistle")]
    assert all(any(rid in pair for pair in after) for rid in copies)
    assert of("u", after) == of("v", after) and of("u", before) == of("v", before)


class _DocumentsOnly:
    """A backend seen through ``iter_versions`` and ``get`` only: no ``CorpusReader``, so
    ``refresh_rarity`` reads whole documents (the path of the search backends)."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def iter_versions(self, table: str) -> Any:
        return self._backend.iter_versions(table)

    async def get(self, table: str, record_ids: Any) -> Any:
        return await self._backend.get(table, record_ids)


async def _stored_snapshot(dsn: str) -> tuple[Any, ...]:
    """The active snapshot of ``public.ads`` as stored, less its version (documents, packed word
    hashes and frequencies, max_block, packed large blocks)."""
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        cur = await c.execute(query("rarity_load"), {"table": "public.ads"})
        row = await cur.fetchone()
    assert row is not None
    return tuple(row[1:])


@pytest.mark.parametrize("backend_name", ["postgres", PG_CANDIDATES], indirect=True)
async def test_the_corpus_read_stores_the_snapshot_reading_whole_documents_stores(settings: Settings) -> None:
    """On a backend holding the signed documents in PostgreSQL, ``refresh_rarity`` reads titles,
    scopes and super tokens only (``CorpusReader``); the snapshot it stores (documents, word
    frequencies, large blocks) is byte for byte the one reading every whole document through ``get``
    stores. The index has three scopes, documents whose keys are stored apart from their signature
    (with a repeated and an extra super token), a numeric title, one without a title, a deleted one
    and documents of another table."""
    s = with_dedup(settings, max_block=2)
    ads = [*_ads("u", list(range(len(TITLES)))), *_ads("v", list(range(10))), *_ads("w", [0, 1, 8])]
    async with running_indexer(s):
        ids = await _insert(s.dsn, ads)
        await wait_until(lambda: index_done(s.dsn), timeout=60)
    async with opened_backend(s) as backend:
        assert isinstance(backend, CorpusReader) and not isinstance(_DocumentsOnly(backend), CorpusReader)
        docs = await backend.get("public.ads", ids)
        first = docs[ids[0]]
        stored_keys = [*first.keys, "t:p:extra"]  # not the signature's own: stored apart from it
        extra = [replace(first, record_id=f"x{i}", version=first.version + 1, keys=stored_keys, side=None)
                 for i in range(4)]
        extra[0] = replace(extra[0], keys=[*stored_keys, "t:p:extra", "b9:not-counted"])
        extra[1] = replace(extra[1], fields={**first.fields, "title": 12345})
        extra[2] = replace(extra[2], fields={k: v for k, v in first.fields.items() if k != "title"})
        extra[3] = replace(extra[3], scope={"user": "other"})
        other = [replace(d, table="public.other", side=None) for d in list(docs.values())[:6]]
        result = await backend.write([*extra, *other], [DeleteOp("public.ads", ids[1], docs[ids[1]].version + 1)])
        assert set(result.outcomes.values()) == {Outcome.APPLIED}
        fast = await refresh_rarity(s, backend, progress=False)
        from_corpus = await _stored_snapshot(s.dsn)
        slow = await refresh_rarity(s, _DocumentsOnly(backend), progress=False)  # type: ignore[arg-type]
        from_documents = await _stored_snapshot(s.dsn)
    assert slow["version"] > fast["version"]
    assert from_corpus == from_documents
    assert {k: v for k, v in fast.items() if k not in ("version", "seconds")} == {
        k: v for k, v in slow.items() if k not in ("version", "seconds")}
    assert fast["documents"] == len(ids) - 1 + len(extra) and fast["large_blocks"] > 0
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        large = (await load_active(c, "public.ads")).large_blocks  # type: ignore[union-attr]
    # the stored keys count: three documents of the first scope hold the extra super token
    assert key_hash(key_prefix("public.ads", first.scope), "t:p:extra") in large
    assert key_hash(key_prefix("public.ads", {"user": "other"}), "t:p:extra") not in large
