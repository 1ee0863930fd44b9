"""The duplicates queue: decisions over HTTP, the dedup worker honouring dismissals, feedback export,
and the page driven by a real headless browser (Debian chromium through Playwright)."""

from __future__ import annotations

import csv
import os
import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest

from daemon.http.moderation import word_diff
from daemon.http.options import ApiOptions, parse_api_keys
from daemon.cli import main as cli_main
from daemon.config import Settings
from daemon.service import opened_backend
from daemon.evaluation.evaluate import export_feedback
from daemon.ops.reindex import reindex
from tests.conftest import flags, running_indexer, running_worker, with_dedup
from tests.test_api import CAMERA, CAMERA_EDIT, api_client, serve_process
from tests.test_dedup import EDITED, ORIGINAL, add, settle

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
KEYS = ApiOptions(api_keys=parse_api_keys("alice:key-a,bob:key-b,ops:key-o"))
ALICE, BOB, OPS = {"X-API-Key": "key-a"}, {"X-API-Key": "key-b"}, {"X-API-Key": "key-o"}
JSON = {"accept": "application/json"}
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def msettings(settings: Settings) -> Settings:
    """Dedup on, thresholds such that both test edits are potential duplicates (94.1 and 71.2)."""
    return with_dedup(settings, duplicate_threshold=95.0, potential_threshold=60.0)


async def two_potential_duplicates(s: Settings) -> dict[str, str]:
    """A TV ad and a camera ad, each with an edited repost flagged potential_duplicate."""
    async with running_indexer(s), running_worker(s):
        ids = {"tv": await add(s.dsn, ORIGINAL, "now() - interval '2 days'"),
               "cam": await add(s.dsn, CAMERA, "now() - interval '2 days'")}
        ids["tv_edit"] = await add(s.dsn, EDITED, "now() - interval '1 day'")
        await settle(s)  # flag the TV repost first, so the camera repost is the newest flag
        ids["cam_edit"] = await add(s.dsn, CAMERA_EDIT)
        await settle(s)
    got = await flags(s.dsn)
    assert got == {ids["tv_edit"]: ("potential_duplicate", ids["tv"]),
                   ids["cam_edit"]: ("potential_duplicate", ids["cam"])}
    return ids


async def decisions(dsn: str) -> dict[tuple[str, str], tuple[Any, ...]]:
    """``{(a, b): (decision, a_version, b_version, decided_by)}``."""
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        cur = await c.execute("SELECT a, b, decision, a_version, b_version, decided_by FROM nearsync.pair_decisions")
        return {(r[0], r[1]): r[2:] for r in await cur.fetchall()}


async def doc_version(s: Settings, rid: str) -> int:
    """The index document version of ``rid`` (read through the backend)."""
    async with opened_backend(s) as backend:
        return (await backend.get("public.ads", [rid]))[rid].version


async def requeue_for_dedup(dsn: str, *record_ids: str) -> None:
    """Put records back on the dedup queue (as the indexer does), without changing them."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        for rid in record_ids:
            await c.execute("INSERT INTO nearsync.index_tracking (queue, table_name, record_id, op, seq) "
                            "VALUES ('dedup', 'public.ads', %s, 'U', nextval('nearsync.change_seq'))", (rid,))


async def test_confirmed_flag_survives_rescoring_until_an_ad_changes(msettings: Settings) -> None:
    """A confirmed potential duplicate (score 94.1, below duplicate_threshold 95) stays ``duplicate``
    when the worker re-scores the pair, and the score decides again once one of the ads is edited."""
    s = msettings
    ids = await two_potential_duplicates(s)
    async with api_client(s, KEYS) as c:
        r = await c.post("/moderation/decide", data={"record_id": ids["tv_edit"], "original_id": ids["tv"],
                                                     "action": "confirm"}, headers=ALICE | JSON)
        assert r.status_code == 200 and r.json()["decision"] == "duplicate"
    assert (await flags(s.dsn))[ids["tv_edit"]] == ("duplicate", ids["tv"])
    await requeue_for_dedup(s.dsn, ids["tv"], ids["tv_edit"])
    async with running_indexer(s), running_worker(s):
        await settle(s)
        assert (await flags(s.dsn))[ids["tv_edit"]] == ("duplicate", ids["tv"])
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
            await c.execute("UPDATE ads SET price = 263 WHERE id = %s", (int(ids["tv_edit"]),))
        await settle(s)
    assert (await flags(s.dsn))[ids["tv_edit"]] == ("potential_duplicate", ids["tv"])


async def test_confirm_dismiss_and_the_worker_skips_a_dismissed_pair(msettings: Settings, tmp_path: Path) -> None:
    s = msettings
    ids = await two_potential_duplicates(s)
    async with api_client(s, KEYS, headers=ALICE) as c:
        page = (await c.get("/moderation")).text
        assert page.index(f"Ad #{ids['cam_edit']}") < page.index(f"Ad #{ids['tv_edit']}")  # newest first
        assert "<del>" in page and "<ins>" in page and "Per-field reasons" in page
        only_tv = (await c.get("/moderation", params={"category": "tv"})).text
        assert f"Ad #{ids['tv_edit']}" in only_tv and f"Ad #{ids['cam_edit']}" not in only_tv
        high = (await c.get("/moderation", params={"min_score": "90"})).text
        assert f"Ad #{ids['tv_edit']}" in high and f"Ad #{ids['cam_edit']}" not in high
        form = {"record_id": ids["tv_edit"], "original_id": ids["tv"], "action": "confirm"}
        r = await c.post("/moderation/decide", data=form)
        assert r.status_code == 303 and r.headers["location"] == "/moderation"
        r = await c.post("/moderation/decide", data={"record_id": ids["cam_edit"], "original_id": ids["tv"],
                                                     "action": "dismiss"}, headers=BOB | JSON)
        assert r.status_code == 409
        r = await c.post("/moderation/decide", data={"record_id": ids["cam_edit"], "original_id": ids["cam"],
                                                     "action": "dismiss"},
                         headers=BOB | JSON | {"origin": "http://evil.example"})
        assert r.status_code == 403
        r = await c.post("/moderation/decide", data={"record_id": ids["cam_edit"], "original_id": ids["cam"],
                                                     "action": "dismiss"}, headers=BOB | JSON)
        assert r.status_code == 200 and r.json()["decision"] == "not_duplicate" and r.json()["decided_by"] == "bob"
    got = await flags(s.dsn)
    assert got == {ids["tv_edit"]: ("duplicate", ids["tv"])}
    dec = await decisions(s.dsn)
    assert dec[(ids["tv"], ids["tv_edit"])][0::3] == ("duplicate", "alice")
    cam_v, cam_edit_v = await doc_version(s, ids["cam"]), await doc_version(s, ids["cam_edit"])
    assert dec[(ids["cam"], ids["cam_edit"])] == ("not_duplicate", cam_v, cam_edit_v, "bob")

    # the dismissal queued the record: the worker re-scores it, and the original too, without flagging
    await requeue_for_dedup(s.dsn, ids["cam"])
    async with running_indexer(s), running_worker(s):
        await settle(s)
        assert ids["cam_edit"] not in await flags(s.dsn)
        async with await psycopg.AsyncConnection.connect(s.dsn) as c:
            cur = await c.execute("SELECT count(*) FROM nearsync.dedup_links WHERE a = %s AND b = %s",
                                  (ids["cam"], ids["cam_edit"]))
            assert (await cur.fetchone())[0] == 0  # type: ignore[index]
        # an edit of the ad lifts the decision: flagged again
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
            await c.execute("UPDATE ads SET price = 305 WHERE id = %s", (int(ids["cam_edit"]),))
        await settle(s)
    assert (await flags(s.dsn))[ids["cam_edit"]] == ("potential_duplicate", ids["cam"])

    out = tmp_path / "feedback.csv"
    assert export_feedback(s.dsn, out) == 2
    rows = list(csv.DictReader(out.open()))
    assert {(r["a"], r["b"], r["label"], r["decided_by"]) for r in rows} == {
        (ids["tv"], ids["tv_edit"], "1", "alice"), (ids["cam"], ids["cam_edit"], "0", "bob")}
    assert all(r["decided_at"] and float(r["score"]) > 60 for r in rows)
    out2 = tmp_path / "cli.csv"
    assert cli_main(["evaluate", "--feedback", str(out2), "--dsn", s.dsn]) == 0
    assert out2.read_text() == out.read_text()


async def test_a_dismissed_pair_is_not_rejoined_through_a_third_record(msettings: Settings) -> None:
    """Cannot-link: after a moderator dismissed (tv, tv_edit), an exact repost of tv that also
    matches tv_edit (94.1) joins tv's cluster alone; tv_edit is neither flagged nor clustered with tv."""
    s = msettings
    async with running_indexer(s), running_worker(s):
        tv = await add(s.dsn, ORIGINAL, "now() - interval '2 days'")
        tv_edit = await add(s.dsn, EDITED, "now() - interval '1 day'")
        await settle(s)
    assert await flags(s.dsn) == {tv_edit: ("potential_duplicate", tv)}
    async with api_client(s, KEYS) as c:
        r = await c.post("/moderation/decide", data={"record_id": tv_edit, "original_id": tv, "action": "dismiss"},
                         headers=BOB | JSON)
        assert r.status_code == 200 and r.json()["decision"] == "not_duplicate"
    async with running_indexer(s), running_worker(s):
        await settle(s)
        repost = await add(s.dsn, ORIGINAL)
        await settle(s)
        async with await psycopg.AsyncConnection.connect(s.dsn) as c:
            cur = await c.execute("SELECT a, b FROM nearsync.dedup_links ORDER BY a, b")
            links = set(await cur.fetchall())
            cur = await c.execute("SELECT record_id, original_id FROM nearsync.clusters")
            clusters = dict(await cur.fetchall())
    assert (tv, repost) in links and tuple(sorted((tv_edit, repost))) in links  # the bridge exists ...
    assert await flags(s.dsn) == {repost: ("duplicate", tv)}  # ... but does not re-flag tv_edit
    assert clusters == {tv: tv, repost: tv}

    # a reindex gives every document a new version but changes no ad: the dismissal holds
    before = await doc_version(s, tv_edit)
    async with running_indexer(s), running_worker(s):
        async with opened_backend(s) as backend:
            await reindex(s, backend, progress=False)
        await settle(s)
        await requeue_for_dedup(s.dsn, tv, tv_edit, repost)
        await settle(s)
    assert await doc_version(s, tv_edit) > before
    assert await flags(s.dsn) == {repost: ("duplicate", tv)}
    # an edit of tv_edit lifts it: flagged again
    async with running_indexer(s), running_worker(s):
        async with await psycopg.AsyncConnection.connect(s.dsn, autocommit=True) as c:
            await c.execute("UPDATE ads SET price = 263 WHERE id = %s", (int(tv_edit),))
        await settle(s)
    assert (await flags(s.dsn))[tv_edit][1] == tv


def test_word_diff_escapes_and_marks_changed_words() -> None:
    left, right = word_diff("Sony <b>TV</b> 40 inch", "Sony <b>TV</b> 42 inch boxed")
    assert left == "Sony &lt;b&gt;TV&lt;/b&gt; <del>40</del> inch"
    assert right == "Sony &lt;b&gt;TV&lt;/b&gt; <ins>42</ins> inch<ins> boxed</ins>"


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium) — browser test skipped")
@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)  # the page, not the backends
async def test_queue_in_a_real_browser(msettings: Settings, tmp_path: Path) -> None:
    pytest.importorskip("playwright", reason="playwright (Python package) not installed")
    from playwright.async_api import async_playwright

    s = msettings
    ids = await two_potential_duplicates(s)
    shot = tmp_path / "moderation.png"
    secret = "carol-" + os.urandom(8).hex()
    log = tmp_path / "serve.log"
    with serve_process(s, log, env={"NEARSYNC_API_KEY": f"carol:{secret},dave:other-key"}) as url:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1366, "height": 900})
                # not signed in: the queue sends the browser to the sign-in form
                await page.goto(f"{url}/moderation")
                assert page.url == f"{url}/login"
                await page.get_by_label("Your moderator key").fill("wrong-key")
                async with page.expect_navigation():
                    await page.get_by_role("button", name="Sign in").click()
                assert "not valid" in await page.locator("p.error").inner_text()
                await page.get_by_label("Your moderator key").fill(secret)
                async with page.expect_navigation():
                    await page.get_by_role("button", name="Sign in").click()
                assert page.url == f"{url}/moderation"
                assert await page.locator("#user").inner_text() == "carol"
                cookies = {c["name"]: c for c in await page.context.cookies()}
                session = cookies["nearsync_session"]
                assert session["httpOnly"] and session["sameSite"] == "Strict"
                assert secret not in session["value"]
                assert await page.locator("article.item").count() == 2
                await page.screenshot(path=str(shot), full_page=False)
                # keyboard: j focuses the first (newest: the camera repost), c confirms it
                await page.keyboard.press("j")
                focused = await page.evaluate("document.activeElement.dataset.record")
                assert focused == ids["cam_edit"]
                async with page.expect_navigation():
                    await page.keyboard.press("c")
                assert "confirmed" in await page.locator("p.status").inner_text()
                assert await page.locator("article.item").count() == 1
                # the mouse/Tab way: the real button of the remaining item
                button = page.get_by_role("button", name="Not a duplicate")
                await button.focus()
                async with page.expect_navigation():
                    await page.keyboard.press("Enter")
                assert "dismissed" in await page.locator("p.status").inner_text()
                assert await page.locator("article.item").count() == 0
                # a reload shows the queue without the message: it lived in the session, not the URL
                await page.reload()
                assert await page.locator("p.status").count() == 0
                # signing out ends the session: the queue asks for the key again
                async with page.expect_navigation():
                    await page.get_by_role("button", name="Sign out").click()
                await page.goto(f"{url}/moderation")
                assert page.url == f"{url}/login"
            finally:
                await browser.close()
    print(f"moderation screenshot: {shot}")
    assert shot.stat().st_size > 10_000
    assert secret not in log.read_text()
    assert await flags(s.dsn) == {ids["cam_edit"]: ("duplicate", ids["cam"])}
    dec = await decisions(s.dsn)
    assert dec[(ids["cam"], ids["cam_edit"])][0::3] == ("duplicate", "carol")
    assert dec[(ids["tv"], ids["tv_edit"])][0::3] == ("not_duplicate", "carol")
