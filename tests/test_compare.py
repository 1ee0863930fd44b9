"""``nearsync compare``: two records scored offline as the dedup worker scores a pair."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.cli import main
from daemon.scoring import ScoringConfig, score_pair
from daemon.signatures import compute_signature

PHONE = "Like new, always in a case, with box and charger."
S21 = {"title": "Samsung Galaxy S21 128GB black", "body": PHONE, "price": 400}
S21_PLUS = {"title": "Samsung Galaxy S21+ 128GB black", "body": PHONE, "price": 450}


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["compare", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_compare_prints_the_score_the_flag_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    """The text output: score and flag with the thresholds, the summary, a row per field; the score
    is the worker's pair score of the two records (the same fields, a NULL for a field not given)."""
    code, out, _ = _run(capsys, json.dumps(S21), json.dumps(S21_PLUS))
    assert code == 0
    first, summary = out.splitlines()[:2]
    assert first == "score 57.9: not flagged (duplicate >= 90, potential_duplicate >= 70)"
    assert "different model (S21 / S21 PLUS)" in summary
    assert any(line.split()[:2] == ["variants", "variants"] and line.split()[3] == "0.0000" for line in out.splitlines())
    fields = [{**{"title": None, "body": None, "price": None, "lat": None, "lon": None, "user": None,
                  "category": None}, **r} for r in (S21, S21_PLUS)]
    expected = score_pair(fields[0], compute_signature(fields[0]).to_document(),
                          fields[1], compute_signature(fields[1]).to_document(), ScoringConfig.from_mapping({}))
    assert expected.score == 57.9


def test_compare_json_files_profile_and_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Records from ``@FILE``, ``--json`` output, and the settings file's thresholds applied on top
    of the profile: the same pair is flagged once the file lowers the potential threshold."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(S21))
    b.write_text(json.dumps(S21_PLUS))
    code, out, _ = _run(capsys, f"@{a}", f"@{b}", "--json", "--profile", "products")
    result = json.loads(out)
    assert code == 0 and result["decision"] is None and result["potential_threshold"] == 70
    assert result["reasons"]["variants"]["similarity"] == 0
    toml = tmp_path / "n.toml"
    toml.write_text("[dedup]\npotential_threshold = 50\n")
    code, out, _ = _run(capsys, f"@{a}", f"@{b}", "--json", "--config", str(toml))
    assert code == 0 and json.loads(out)["decision"] == "potential_duplicate"


@pytest.mark.parametrize(("a", "message"), [
    ('{"title": 1', "config error at 'A': is not JSON"),
    ("[1, 2]", "must be a JSON object of fields, got list"),
    ("@/nonexistent/record.json", "cannot read /nonexistent/record.json"),
    ('{"title": "x", "price": "call me"}', "price: must be a number"),
    ('{"title": "x", "lat": 95, "lon": 2}', "lat: must be within [-90, 90]"),
])
def test_compare_refuses_bad_records_with_one_line(capsys: pytest.CaptureFixture[str], a: str, message: str) -> None:
    """A record that is not a JSON object, or holds a value the indexer would dead-letter, ends the
    command with exit code 2 and one line naming the argument."""
    code, out, err = _run(capsys, a, '{"title": "x"}')
    assert code == 2 and out == "" and message in err and err.startswith("nearsync: ")


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)  # the command's default backend
async def test_compare_ids_scores_indexed_records_with_the_corpus_snapshot(settings: Any,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """``--ids``: two records of the tracked table, read from the index, scored with the table's
    active corpus snapshot: the score is ``score_pair`` of their documents under the snapshot, and the
    output names the snapshot's version. An id without a document ends with exit code 2."""
    import asyncio

    import psycopg

    from daemon.db.rarity import load_active
    from daemon.dedup.settings import dedup_options
    from daemon.ops.rarity import refresh_rarity
    from daemon.service import opened_backend
    from tests.conftest import running_indexer, wait_until
    from tests.test_rarity import CORPUS, _ad, _insert, index_done

    s = settings
    async with running_indexer(s):
        await _insert(s.dsn, [_ad(f"f{i}", CORPUS[i % len(CORPUS)]) for i in range(30)])
        a, b = await _insert(s.dsn, [_ad("u1", "oak table vintage set walnut"), _ad("u1", "oak table vintage lot walnut")])
        await wait_until(lambda: index_done(s.dsn), timeout=60)
    async with opened_backend(s) as backend:
        report = await refresh_rarity(s, backend, requeue=False, progress=False)
        docs = await backend.get("public.ads", [a, b])
    async with await psycopg.AsyncConnection.connect(s.dsn) as c:
        snapshot = await load_active(c, "public.ads")
    cfg = dedup_options(s).scoring.with_snapshot(snapshot)
    expected = score_pair(docs[a].fields, docs[a].signature, docs[b].fields, docs[b].signature, cfg)
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["compare", "--ids", a, b, "--dsn", s.dsn, "--json"])
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{"):])
    assert code == 0 and result["snapshot"] == report["version"]
    assert result["score"] == expected.score and result["summary"] == expected.summary()
    code = await asyncio.to_thread(main, ["compare", "--ids", a, "999999", "--dsn", s.dsn])
    assert code == 2 and "record '999999' of public.ads has no document in the index" in capsys.readouterr().err


def test_a_reader_that_went_away_ends_the_command_quietly(tmp_path: Path) -> None:
    """``nearsync compare A B | head -1``: when standard output's reader has gone, the command ends
    with 141 (as a tool that SIGPIPE ends) and no "unexpected error" line on stderr."""
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    try:
        done = subprocess.run([sys.executable, "-m", "daemon", "compare", json.dumps(S21), json.dumps(S21_PLUS)],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")
