"""Token rarity (issue 17, item 3): the pure weighted similarity, the snapshot built by
``nearsync rarity refresh`` against a real PostgreSQL, and the dedup worker scoring with it."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import psycopg
import pytest

from daemon.config import Settings
from daemon.db.rarity import active_version, load_active
from daemon.ops.rarity import refresh_rarity
from daemon.profiles import PROFILES
from daemon.scoring import ScoringConfig, score_pair
from daemon.scoring.rarity import FrequencyCounter, Rarity, blended, title_tokens, token_hash, weighted_overlap
from daemon.service import opened_backend
from tests.conftest import flags, pending, queues_empty, running_indexer, running_worker, wait_until, with_dedup

CORPUS = ["oak table vintage set", "vintage oak table lot", "oak table set", "vintage table lot for sale",
          "oak vintage set", "table set oak vintage lot"]


def _snapshot(titles: list[str], version: int = 1) -> Rarity:
    fc = FrequencyCounter()
    for t in titles:
        fc.add(t)
    return Rarity(version, fc.documents, *fc.arrays())


def test_weights_are_idf_relative_to_log_n_and_unknown_words_are_the_rarest() -> None:
    r = _snapshot(CORPUS + ["walnut oak table"])
    w = r.weights(title_tokens("Oak WALNUT table brand-new-word"))
    n = len(CORPUS) + 1
    assert w["walnut"] == pytest.approx(math.log((n + 1) / 2) / math.log(n + 1))  # df 1
    assert w["oak"] == pytest.approx(math.log((n + 1) / 7) / math.log(n + 1))  # df 6
    assert w["word"] == 1.0 and w["brand"] == 1.0  # in no counted document
    assert 0.0 <= w["oak"] < w["walnut"] < 1.0


def test_an_all_digit_code_many_titles_carry_is_no_agreement() -> None:
    """With a corpus snapshot in which a postcode is in more titles than COMMON_CODE_DOCUMENTS, an
    agency's two flats sharing it no longer share a "model number" (the other fields decide); two
    different postcodes still tell two flats apart, a rare all-digit code still counts, and a
    letters-and-digits model number counts however common."""
    from daemon.scoring.combine import COMMON_CODE_DOCUMENTS
    from daemon.signatures import compute_signature

    cfg = ScoringConfig.from_mapping({})
    titles = [f"flat {i} rooms paris 75011 ref{i}" for i in range(COMMON_CODE_DOCUMENTS + 1)]
    snapshot = _snapshot(titles + ["sony kdl40v4100 tv"] * (COMMON_CODE_DOCUMENTS + 1) + ["garage sale 4471203"])
    with_snapshot = cfg.with_snapshot(snapshot)

    def pair(a: dict[str, Any], b: dict[str, Any], c: ScoringConfig) -> Any:
        return score_pair(a, compute_signature(a).to_document(), b, compute_signature(b).to_document(), c)

    one = {"title": "Appartement 2 pièces 75011 Paris", "body": "Bright flat near the metro, 2nd floor.", "price": 1500}
    two = {"title": "Appartement 2 pièces 75011 Paris", "body": "Quiet studio on the courtyard, 5th floor.", "price": 1500}
    assert pair(one, two, cfg).reasons["models"]["similarity"] == 1.0
    assert "models" not in pair(one, two, with_snapshot).reasons
    elsewhere = {**two, "title": "Appartement 2 pièces 75015 Paris"}
    assert pair(one, elsewhere, with_snapshot).reasons["models"]["similarity"] == 0.0
    rare = ({"title": "Garage sale 4471203 tools"}, {"title": "Garage sale 4471203 tools and more"})
    assert pair(*rare, with_snapshot).reasons["models"]["similarity"] == 1.0
    tv = ({"title": "Sony KDL40V4100 TV"}, {"title": "Sony Bravia KDL40V4100 LCD"})
    assert pair(*tv, with_snapshot).reasons["models"]["similarity"] == 1.0


def test_weighted_overlap_counts_what_is_not_shared_by_its_rarity() -> None:
    r = _snapshot(CORPUS * 8 + ["chairs", "lamp", "walnut"])

    def sim(a: str, b: str) -> float | None:
        return weighted_overlap(r.weights(title_tokens(a)), r.weights(title_tokens(b)))

    # equal titles, and a title all of whose words the other has, score 1 whatever their words
    assert sim("oak table vintage set", "oak table vintage set") == 1.0
    assert sim("oak table vintage", "oak table vintage set chairs") == 1.0
    # differing in a rare word: low; differing in a common word while sharing a rare one: high
    generic = sim("oak table vintage set chairs", "oak table vintage set lamp")
    rare = sim("oak table vintage set walnut", "oak table vintage lot walnut")
    assert generic is not None and rare is not None and generic < 0.5 < 0.8 < rare
    # a mistyped word (Jaro-Winkler >= 0.9) still counts, a different code does not
    assert sim("walnut table chairs", "walnut table chiars") > 0.9  # type: ignore[operator]
    assert sim("walnut table ab1234", "walnut table ab1235") < 0.7  # type: ignore[operator]
    # a code written with and without separators is one code
    assert sim("walnut table ab-12-34", "walnut table ab1234") == 1.0
    assert sim("", "oak") is None
    assert weighted_overlap({"oak": 0.0}, {"oak": 0.0}) is None  # only words of weight 0: nothing said
    # symmetric
    assert sim("oak table chairs walnut", "table lamp") == sim("table lamp", "oak table chairs walnut")
    # the blend: share 0 keeps the metric's similarity, share 1 is the weighted one
    wa, wb = r.weights(title_tokens("oak table set chairs")), r.weights(title_tokens("oak table set lamp"))
    assert blended(0.9, wa, wb, 0.0) == 0.9 and blended(None, wa, wb, 0.5) is None
    assert blended(0.9, wa, wb, 1.0) == weighted_overlap(wa, wb)


def test_prepared_titles_and_kept_soft_matches_give_the_same_floats() -> None:
    """Rarity.prepared (one Weighted per normalised title, shared) equals weighing the title afresh,
    and overlaps computed again through a title's kept soft matches (Weighted.soft) are the same
    floats as the first time and as on fresh Weighted objects (soft matching exercised: typos)."""
    from daemon.scoring import metrics as m
    from daemon.scoring.rarity import Weighted, overlap

    r = _snapshot(CORPUS)
    titles = CORPUS + ["Sony Bravia KDL40V4100 recieve bluetoth", "sony bravia kdl-40v4100 receive bluetooth", "", None]
    prepared = [r.prepared(m._text(t)) for t in titles]
    fresh = [Weighted(r.weights(title_tokens(t))) for t in titles]
    assert [p.weights for p in prepared] == [f.weights for f in fresh]
    assert r.prepared(m._text(titles[0])) is prepared[0]  # kept, not weighed again
    first = [[overlap(a, b) for b in prepared] for a in prepared]
    again = [[overlap(a, b) for b in prepared] for a in prepared]
    reference = [[weighted_overlap(dict(a.weights), dict(b.weights)) for b in fresh] for a in fresh]
    assert first == again == reference
    assert any(p.soft for p in prepared)  # the soft matches were kept and read back


def test_tokens_and_hashes_follow_the_title_metric_normalisation() -> None:
    assert title_tokens("Sony DVP-FX820  Portable, DVD! sony") == ("sony", "dvp", "fx820", "portable", "dvd")
    assert title_tokens(None) == () and title_tokens("  ") == ()
    h = token_hash("sony")
    assert -(1 << 63) <= h < (1 << 63) and h == token_hash("sony")
    fc = FrequencyCounter()
    for t in ["a b b", "b c", None]:
        fc.add(t)
    hashes, dfs = fc.arrays()
    assert fc.documents == 3 and list(hashes) == sorted(hashes)
    assert dict(zip(hashes.tolist(), dfs.tolist(), strict=True)) == {token_hash("a"): 1, token_hash("b"): 2,
                                                                     token_hash("c"): 1}


@pytest.mark.parametrize("profile", ["classified", "products"])
def test_without_a_snapshot_or_with_rarity_0_scores_are_unchanged(profile: str) -> None:
    """No snapshot, or ``rarity = 0``: the same scores and reasons as the configuration without rarity."""
    plain = ScoringConfig.from_mapping(PROFILES[profile]["dedup"])  # the default rarity, no snapshot
    assert plain.rarity > 0 and plain.snapshot is None
    on_no_snapshot = ScoringConfig.from_mapping({**PROFILES[profile]["dedup"], "rarity": 0.7})
    off_with_snapshot = ScoringConfig.from_mapping({**PROFILES[profile]["dedup"], "rarity": 0}).with_snapshot(
        _snapshot(CORPUS))
    on = plain.with_snapshot(_snapshot(CORPUS))
    pairs = [({"title": "oak table vintage set chairs", "price": 100}, {"title": "oak table vintage set lamp", "price": 95}),
             ({"title": "Sony KDL-40V4100 LCD TV"}, {"title": "Sony KDL40V4100 40in LCD television"}),
             ({"title": "oak table"}, {"title": "walnut chairs"})]
    for a, b in pairs:
        ref = score_pair(a, {}, b, {}, plain)
        assert score_pair(a, {}, b, {}, on_no_snapshot) == ref
        assert score_pair(a, {}, b, {}, off_with_snapshot) == ref
    a, b = pairs[0]
    assert score_pair(a, {}, b, {}, on).score < score_pair(a, {}, b, {}, plain).score


# -- against PostgreSQL and the dedup worker ------------------------------------------------------------

COLS = ("user_id", "category", "title", "body", "price", "lat", "lon")


async def _insert(dsn: str, ads: list[dict[str, Any]]) -> list[str]:
    rows = ", ".join(f"({', '.join(['%s'] * len(COLS))}, now())" for _ in ads)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        cur = await c.execute(f"INSERT INTO ads ({', '.join(COLS)}, created_at) VALUES {rows} RETURNING id",
                              [ad.get(k) for ad in ads for k in COLS])
        return [str(r[0]) for r in await cur.fetchall()]


async def index_done(dsn: str) -> bool:
    return await pending(dsn, "index") == 0


def _ad(user: str, title: str) -> dict[str, Any]:
    # no body, price or place: the title alone decides the score
    return {"user_id": user, "category": "furniture", "title": title}


async def _links(dsn: str) -> dict[tuple[str, str], float]:
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        cur = await c.execute("SELECT a, b, score FROM nearsync.dedup_links")
        return {(a, b): s for a, b, s in await cur.fetchall()}


async def test_refresh_counts_the_indexed_titles_and_the_worker_scores_with_the_snapshot(settings: Settings) -> None:
    """``refresh_rarity`` stores the document frequencies of the indexed titles as the active snapshot;
    the worker, which linked two ads sharing only common words without a snapshot, separates them
    once it reads one, and keeps two ads that share a rare word."""
    s = with_dedup(settings, rarity=1.0)
    filler = [_ad(f"f{i}", CORPUS[i % len(CORPUS)]) for i in range(40)]
    async with running_indexer(s), running_worker(s):
        await _insert(s.dsn, filler)
        generic = await _insert(s.dsn, [_ad("u1", "oak table vintage set chairs"), _ad("u1", "oak table vintage set lamp")])
        rare = await _insert(s.dsn, [_ad("u2", "oak table vintage set walnut"), _ad("u2", "oak table vintage lot walnut")])
        await wait_until(lambda: queues_empty(s.dsn), timeout=60)
        before = await flags(s.dsn)
        async with opened_backend(s) as backend:
            report = await refresh_rarity(s, backend, requeue=True, progress=False)
            docs = await backend.get("public.ads", [*generic, *rare])
        await wait_until(lambda: queues_empty(s.dsn), timeout=60)
        after = await flags(s.dsn)
        links = await _links(s.dsn)
    # without a snapshot (rarity set, none built yet): both pairs flagged on their titles
    assert generic[1] in before and rare[1] in before
    # the snapshot: every indexed title counted, with the scorer's tokens
    titles = [ad["title"] for ad in filler] + [d.fields["title"] for d in docs.values()]
    df = Counter(token_hash(t) for title in titles for t in title_tokens(title))
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        snap = await load_active(c, "public.ads")
        assert await active_version(c, "public.ads") == report["version"]
    assert snap is not None and snap.version == report["version"] and snap.documents == report["documents"] == 44
    assert dict(zip(snap.hashes.tolist(), snap.dfs.tolist(), strict=True)) == df
    assert report["requeued"] == 44 and report["tokens"] == len(df)
    # with it: the generic pair is no longer linked, the pair sharing a rare word still is
    assert generic[1] not in after and tuple(sorted(generic)) not in links
    assert after[rare[1]][1] == before[rare[1]][1] == rare[0]


async def test_a_second_refresh_replaces_the_active_snapshot(settings: Settings) -> None:
    s = with_dedup(settings, rarity=0.5)
    async with running_indexer(s):
        await _insert(s.dsn, [_ad("u", t) for t in CORPUS])
        await wait_until(lambda: index_done(s.dsn), timeout=60)
    async with opened_backend(s) as backend:
        first = await refresh_rarity(s, backend, progress=False)
        second = await refresh_rarity(s, backend, progress=False)
    assert second["version"] > first["version"] and second["documents"] == first["documents"] == len(CORPUS)
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        cur = await c.execute("SELECT version, active FROM nearsync.rarity_snapshots")
        assert await cur.fetchall() == [(second["version"], True)]  # the old one is dropped
        snap = await load_active(c, "public.ads")
    assert snap is not None and snap.hashes.dtype == np.int64 and len(snap.hashes) == second["tokens"]


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
async def test_the_rarity_refresh_command_stores_a_snapshot_and_queues_the_table(settings: Settings,
                                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``nearsync rarity refresh --requeue --json``: exit 0, the report names the stored version, and
    every indexed record is on the dedup queue; on a database never migrated: exit 3."""
    import asyncio
    import json

    from daemon.cli import main

    s = with_dedup(settings)
    async with running_indexer(s):
        await _insert(s.dsn, [_ad("u", t) for t in CORPUS])
        await wait_until(lambda: index_done(s.dsn), timeout=60)
    async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
        await c.execute("DELETE FROM nearsync.index_tracking WHERE queue = 'dedup'")
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["rarity", "refresh", "--requeue", "--json", "--no-progress", "--dsn", s.dsn])
    out = capsys.readouterr().out  # log lines (captured here too), then the report
    report = json.loads(out[out.index("\n{\n") + 1:] if not out.startswith("{") else out)
    assert code == 0 and report["documents"] == len(CORPUS) and report["requeued"] == len(CORPUS)
    assert await pending(s.dsn, "dedup") == len(CORPUS)
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        assert await active_version(c, "public.ads") == report["version"]
        await c.execute("DROP TABLE nearsync.rarity_snapshots")
        await c.commit()
    code = await asyncio.to_thread(main, ["rarity", "refresh", "--no-progress", "--dsn", s.dsn])
    assert code == 3 and "nearsync migrate" in capsys.readouterr().err


async def test_reindex_builds_the_snapshot_where_the_dedup_worker_uses_one(settings: Settings, tmp_path: Any,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """``nearsync reindex --json`` with ``[dedup] enabled``: the rebuild ends with a new active
    snapshot of the rebuilt index (the report's ``rarity_snapshot`` names it and counts every
    document); ``--no-snapshot`` leaves the active one alone, and with the dedup worker off no
    snapshot is built (on every backend under test: the snapshot is read through the backend)."""
    import asyncio
    import json

    from daemon.cli import main
    from tests.test_api import _toml

    s = with_dedup(settings)
    async with running_indexer(s):
        await _insert(s.dsn, [_ad("u", t) for t in CORPUS])
        await wait_until(lambda: index_done(s.dsn), timeout=60)

    def reindex(*extra: str, dedup: bool = True) -> tuple[int, dict[str, Any]]:
        cfg = tmp_path / "nearsync.toml"
        cfg.write_text(f'[database]\ndsn = "{s.dsn}"\n' + _toml(s if dedup else settings))
        capsys.readouterr()
        code = main(["reindex", "--json", "--no-progress", "--config", str(cfg), *extra])
        out = capsys.readouterr().out  # log lines (captured here too), then the report
        return code, json.loads(out[out.index("\n{\n") + 1:] if not out.startswith("{") else out)

    code, report = await asyncio.to_thread(reindex)
    snap = report["rarity_snapshot"]
    assert code == 0 and report["rows"] == len(CORPUS) and snap["documents"] == len(CORPUS) and snap["tokens"] > 0
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        assert await active_version(c, "public.ads") == snap["version"]
    for extra, dedup in ((["--no-snapshot"], True), ([], False)):
        code, report = await asyncio.to_thread(reindex, *extra, dedup=dedup)
        assert code == 0 and report["rows"] == len(CORPUS) and "rarity_snapshot" not in report
        async with await psycopg.AsyncConnection.connect(s.dsn) as c:
            assert await active_version(c, "public.ads") == snap["version"]


def _on_a_terminal(argv: list[str], cols: int = 150) -> str:
    """Run ``argv`` with stdin, stdout and stderr on a new pseudo-terminal of ``cols`` columns (as a
    user at a terminal would); returns everything it wrote there, decoded. Raises
    subprocess.TimeoutExpired after 120 s."""
    import fcntl
    import os
    import struct
    import subprocess
    import termios
    from pathlib import Path

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=Path(__file__).parents[1],
                            start_new_session=True)
    os.close(slave)
    out = bytearray()
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            out += chunk
        proc.wait(timeout=120)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out.decode(errors="replace")


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
async def test_reindex_on_a_terminal_draws_its_bar_without_the_batch_log_lines(settings: Settings, tmp_path: Any) -> None:
    """``nearsync reindex`` at a terminal: the progress bar, the report and no per-batch info line
    (the default level there is warning); with ``--log-level info`` the batch lines print, each
    through tqdm's ``write`` (the bar is cleared before the line and drawn again after it)."""
    import asyncio
    import re
    import sys

    from tests.test_api import _toml

    s = with_dedup(settings)
    async with running_indexer(s):
        await _insert(s.dsn, [_ad("u", t) for t in CORPUS])
        await wait_until(lambda: index_done(s.dsn), timeout=60)
    cfg = tmp_path / "nearsync.toml"
    cfg.write_text(f'[database]\ndsn = "{s.dsn}"\n' + _toml(s))
    argv = [sys.executable, "-m", "daemon", "reindex", "--restart", "--config", str(cfg)]
    plain = lambda text: re.sub(r"\x1b\[[0-9;]*m", "", text)  # noqa: E731 - without the console colours
    quiet = plain(await asyncio.to_thread(_on_a_terminal, argv))
    assert re.search(r"reindex: 100%\|█+\| 6/6 docs", quiet) and re.search(r"rarity: 100%", quiet), quiet
    assert "rows: 6" in quiet and " batch " not in quiet and "[info" not in quiet, quiet
    loud = plain(await asyncio.to_thread(_on_a_terminal, [*argv, "--log-level", "info"]))
    batches = re.findall(r"\[info +\] batch ", loud)
    # each batch line comes after the bar was cleared (a carriage return, blanks, a carriage return)
    # and before it is drawn again
    cleared = re.findall(r"\r {20,}\r\S+Z \[info +\] batch [^\n]*\n\rreindex: ", loud)
    assert batches and len(cleared) == len(batches) and "rows: 6" in loud, loud


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
async def test_the_check_api_scores_with_the_active_snapshot_as_the_worker_does(settings: Settings) -> None:
    """``/v1/check`` reads the active snapshot too: an ad sharing only common words with an indexed
    one is ``potential_duplicate`` without rarity and ``unique`` with it, as the worker decides."""
    from tests.test_api import api_client

    s = with_dedup(settings, rarity=1.0)
    async with running_indexer(s):
        await _insert(s.dsn, [_ad(f"f{i}", CORPUS[i % len(CORPUS)]) for i in range(40)]
                      + [_ad("u1", "oak table vintage set chairs")])
        await wait_until(lambda: index_done(s.dsn), timeout=60)
    body = {"user": "u1", "category": "furniture", "title": "oak table vintage set lamp"}
    async with api_client(s) as c:
        before = (await c.post("/v1/check", json=body)).json()
    async with opened_backend(s) as backend:
        await refresh_rarity(s, backend, progress=False)
    async with api_client(s) as c:
        after = (await c.post("/v1/check", json=body)).json()
    async with api_client(with_dedup(settings, rarity=0)) as c:
        off = (await c.post("/v1/check", json=body)).json()
    assert before["decision"] == off["decision"] == "potential_duplicate" and before["score"] == off["score"]
    assert after["decision"] == "unique" and after["score"] < before["score"]
