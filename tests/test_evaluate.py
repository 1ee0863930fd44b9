"""``nearsync evaluate`` and ``nearsync demo`` end to end on a real PostgreSQL (throwaway servers)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from daemon.cli import main
from daemon.evaluation.generator import generate_ads


def write_labelled(tmp: Path, n: int = 120) -> tuple[Path, Path, set[tuple[str, str]]]:
    """A records CSV (latin-1, own column names) and a true-pairs CSV from generated ads."""
    ads = list(generate_ads(n, seed=5, dup_rate=0.3))
    rec = tmp / "listings.csv"
    with rec.open("w", newline="", encoding="latin-1") as f:
        w = csv.writer(f)
        w.writerow(["ref", "headline", "text", "cost", "seller", "feed"])
        for i, a in enumerate(ads):
            fd = a.fields
            w.writerow([f"r{i}", fd["title"] + " café", fd["body"], fd["price"], fd["user"], "A" if i % 2 else "B"])
    pairs = {(f"r{a.duplicate_of}", f"r{i}") for i, a in enumerate(ads) if a.duplicate_of is not None}
    pp = tmp / "pairs.csv"
    with pp.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["left", "right"])
        w.writerows(sorted(pairs))
    return rec, pp, pairs


def test_evaluate_any_labelled_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec, pp, pairs = write_labelled(tmp_path)
    with pp.open("a", newline="") as f:  # a gold standard over a larger set: a pair outside the records
        csv.writer(f).writerow(["r0", "r999"])
    cfg = tmp_path / "eval.toml"
    cfg.write_text('[dedup]\nscope = "user"\n')
    out = tmp_path / "out"
    code = main(["evaluate", "--records", str(rec), "--pairs", str(pp), "--id", "ref", "--encoding", "latin-1",
                 "--map", "title=headline,body=text,price=cost,user=seller", "--config", str(cfg),
                 "--out", str(out), "--json-only"])
    assert code == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["records"] == 120 and report["true_pairs_given"] == len(pairs)
    assert report["true_pairs_outside_records"] == 1
    assert f"nearsync: note: 1 of the true pairs in {pp} name an id the records lack" in captured.err
    union = report["duplicate_or_potential"]
    # Generated reposts of reposts carry typos in their model numbers too, so one ad's copies form
    # two groups of confirmed duplicates linked at ~88 (< 90): they are not merged through such
    # potential-level links (issue 17), which halves the pairs inside clusters; every record is
    # still flagged against a true original (record -> original below).
    assert union["precision"] >= 0.95 and union["recall"] >= 0.5
    assert report["candidate_pairs_examined"] > 0 and report["wall_time_s"] > 0
    # the daemon's defaults, as `nearsync dedup` runs them: user scope, since user is mapped
    assert report["profile"] == "classified" and report["settings"]["dedup"]["scope"] == "user"
    assert report["settings"]["dedup"]["fields"]["price"]["evidence"] == "both"
    assert report["settings"]["signatures"]["super_rules"] == [["title", "geo"], ["model", "category"]]
    assert report["settings"]["dedup"]["exhaustive_below"] == 200
    assert report["candidates"]["candidate_recall"] == 1.0  # every user's ads compared exhaustively
    rto = report["record_to_original"]["duplicate_or_potential"]
    assert rto["recall"] >= 0.85 and rto["precision"] >= 0.95
    cands = report["candidates"]
    assert 0 < cands["candidate_recall"] <= 1 and cands["per_record"] > 0
    assert cands["true_pairs_compared"] <= report["true_pairs_closure"]
    assert set(report["record_to_original"]) == {"duplicate", "duplicate_or_potential"}
    assert set(report["baselines"]) >= {"minhash_lsh_tuned", "simhash_hamming_le_3", "levenshtein_title_ge_0.8"}
    assert "cross_source" not in report
    for name in ("links.csv", "false_positives.csv", "false_negatives.csv"):
        assert (out / name).is_file()
    rows = list(csv.DictReader((out / "links.csv").open()))
    assert rows and all(r["summary"] for r in rows)


def test_evaluate_source_column_adds_cross_source_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec, pp, _ = write_labelled(tmp_path, 60)
    assert main(["evaluate", "--records", str(rec), "--pairs", str(pp), "--id", "ref", "--encoding", "latin-1",
                 "--map", "title=headline,body=text,price=cost", "--source-column", "feed",
                 "--no-baselines", "--json-only"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["settings"]["dedup"]["cross_source_only"] is True
    assert report["settings"]["dedup"]["scope"] == "global"  # no user mapped: one scope for all
    assert report["cross_source"]["duplicate_or_potential"]["true_pairs"] <= report["true_pairs_closure"]


def test_evaluate_bad_mapping_names_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec, pp, _ = write_labelled(tmp_path, 10)
    assert main(["evaluate", "--records", str(rec), "--pairs", str(pp), "--id", "ref", "--encoding", "latin-1",
                 "--map", "title=nope", "--json-only"]) == 2
    err = capsys.readouterr().err
    assert "--map" in err and "listings.csv: line 1: no column 'nope'" in err


@pytest.mark.parametrize(("content", "extra", "says"), [
    (b"\xef\xbb\xbfid,title\r\n1,a\r\n", ["--encoding", "cp1252"], "line 1 starts with a UTF-8 byte-order mark"),
    (b"id,name\n1,a\n", [], "line 1: no column 'title' for title"),
    (b"id,title\n1,a\n,b\n", [], "line 3, column 'id': empty id"),
    (b"id,title\n1,a\n2,b\n1,c\n", [], "line 4, column 'id': id '1' already on line 2"),
    (b"id,title\n1,caf\xc3\xa9\n2,caf\xe9\n", [], "line 3, column 'title': byte b'\\xe9' is not valid utf-8"),
    (b"id,title\n1,a\n2,\"never closed\n3,c\n", [],
     "line 3: not valid CSV (unexpected end of data: a quote opened there is never closed)"),
    (b'id,title\n1,"a"b\n', [], "line 2: not valid CSV"),
    (b"id,title\n", [], "no records (a header line and no rows)"),
], ids=["bom-with-cp1252", "missing-column", "empty-id", "duplicate-id", "mixed-encodings", "quote-never-closed",
        "text-after-a-quote", "header-only"])
def test_bad_records_file_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes,
                                          extra: list[str], says: str) -> None:
    rec = tmp_path / "bad.csv"
    rec.write_bytes(content)
    pp = tmp_path / "pairs.csv"
    pp.write_text("a,b\n1,2\n")
    code = main(["evaluate", "--records", str(rec), "--pairs", str(pp), "--map", "title=title", *extra, "--json-only"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{rec}: {says}" in err, err


@pytest.mark.parametrize(("pairs", "says"), [
    ("a,b\n", "no pairs (expected a header line, then two ids per line, separated by ',')"),
    ("a\n1\n2\n", "no pairs"),
    ("a,b\n1,7\n8,9\n", "none of its 2 pairs names two ids of the records (e.g. '1', '7'); check --id"),
], ids=["header-only", "one-column", "unknown-ids"])
def test_a_pairs_file_that_gives_no_true_pair_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               pairs: str, says: str) -> None:
    """Pairs that name no two ids of the records (the wrong ``--id``, delimiter or file order) used to
    give a report of zero true pairs, precision and recall 0, and no word of why."""
    rec, pp = tmp_path / "r.csv", tmp_path / "p.csv"
    rec.write_text("id,title\n1,Sony KDL-40V4100 TV\n2,Sony KDL40V4100 LCD TV\n")
    pp.write_text(pairs)
    code = main(["evaluate", "--records", str(rec), "--pairs", str(pp), "--map", "title=title", "--json-only"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"config error at '--pairs': {pp}: {says}" in err, err


def test_utf8_bom_is_accepted_and_percent_delimiter_and_shared_ids(tmp_path: Path) -> None:
    from daemon.evaluation.evaluate import load_labelled

    a, b, pp = tmp_path / "left.csv", tmp_path / "right.csv", tmp_path / "gt.csv"
    a.write_bytes("\ufeffid%title\n0%Paper one\n1%Paper two\n".encode())
    b.write_text("id%title\n0%Paper 2\n1%Paper 1\n")
    pp.write_text("D1%D2\n0%1\n1%0\n")
    ds = load_labelled([str(a), str(b)], str(pp), mapping={"title": "title"}, id_column="id", encoding="utf-8",
                       source_column="@file", delimiter="%")
    assert sorted(r.key for r in ds.records) == ["left:0", "left:1", "right:0", "right:1"]
    assert ds.pairs == {("left:0", "right:1"), ("left:1", "right:0")}
    assert {r.fields["source"] for r in ds.records} == {"left", "right"}


def test_demo_runs_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--limit", "150"]) == 0
    out = capsys.readouterr().out
    assert "visible after" in out and "gone from the index" in out
    assert "queued 0 change(s)" in out
    assert "duplicate + potential_duplicate" in out and "three flagged examples" in out


def test_evaluate_maps_and_scores_a_column_of_ones_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--map seller_name=seller,year=yr`` stores fields that are no fixed role; ``--config`` scores
    them (``[dedup.fields.year]``); scoring a field ``--map`` does not map is one error naming it."""
    rec, pp, _ = write_labelled(tmp_path, 60)
    rows = list(csv.reader(rec.open(encoding="latin-1")))
    with rec.open("w", newline="", encoding="latin-1") as f:
        csv.writer(f).writerows([rows[0] + ["yr"], *(r + [str(2000 + i % 3)] for i, r in enumerate(rows[1:]))])
    cfg = tmp_path / "fields.toml"
    cfg.write_text('[dedup.fields.year]\nmetric = "numeric"\nweight = 1.0\n'
                   '[dedup.fields.seller_name]\nmetric = "jaro_winkler"\nweight = 0.5\n')
    out = tmp_path / "out"
    argv = ["evaluate", "--records", str(rec), "--pairs", str(pp), "--id", "ref", "--encoding", "latin-1",
            "--map", "title=headline,body=text,price=cost,seller_name=seller,year=yr", "--config", str(cfg),
            "--no-baselines", "--json-only"]
    assert main([*argv, "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    fields = report["settings"]["dedup"]["fields"]
    assert fields["year"] == {"metric": "numeric", "weight": 1.0, "evidence": "both", "tolerance": 2.0,
                              "relative": False}
    assert fields["seller_name"]["metric"] == "jaro_winkler"
    links = list(csv.DictReader((out / "links.csv").open()))
    scored = [json.loads(r["reasons"]) for r in links]
    assert scored and all(set(r) >= {"year", "seller_name"} for r in scored)
    assert report["duplicate_or_potential"]["precision"] >= 0.9
    argv[argv.index("--map") + 1] = "title=headline,body=text,year=yr"
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dedup.fields.seller_name" in err and "--map seller_name=" in err


def test_evaluate_gives_the_same_flags_from_run_to_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Flags are a function of the data: two runs on Abt-Buy in one table (products profile, global
    scope, capped candidate lists) give the same links and figures. The worker starts once the load
    is indexed, so no record's capped candidate list depends on how far indexing had got."""
    from daemon.evaluation.datasets import default_data_dir

    data = default_data_dir()
    if data is None or not (data / "abt-buy" / "Abt.csv").exists():
        pytest.skip("abt-buy data set absent")
    a = data / "abt-buy"
    reports, links = [], []
    for run in ("one", "two"):
        out = tmp_path / run
        code = main(["evaluate", "--records", str(a / "Abt.csv"), "--records", str(a / "Buy.csv"),
                     "--pairs", str(a / "abt_buy_perfectMapping.csv"), "--encoding", "cp1252",
                     "--map", "title=name,body=description,price=price", "--profile", "products",
                     "--no-baselines", "--json-only", "--out", str(out)])
        assert code == 0
        reports.append(json.loads(capsys.readouterr().out))
        links.append(sorted(map(tuple, csv.reader((out / "links.csv").open()))))
    assert len(links[0]) > 1000 and links[0] == links[1]
    for key in ("duplicate_or_potential", "record_to_original", "candidates", "clusters"):
        assert reports[0][key] == reports[1][key], key


def test_evaluation_index_options_size_the_document_cache_to_the_set() -> None:
    from daemon.backends.doc_cache import DEFAULT_CACHED_DOCUMENTS
    from daemon.evaluation.evaluate import EVALUATE_CACHED_DOCUMENTS_MAX, evaluation_index_options

    assert evaluation_index_options("postgres", 40_000) == {"cached_documents": 40_000}
    assert evaluation_index_options("postgres", 10) == {"cached_documents": DEFAULT_CACHED_DOCUMENTS}
    assert evaluation_index_options("postgres", 10**7) == {"cached_documents": EVALUATE_CACHED_DOCUMENTS_MAX}
    given = {"cached_documents": 7, "pool_size": 2}
    assert evaluation_index_options("postgres", 25_000, given) == given  # the caller's setting wins
    keys_in_search = {"url": "http://x", "candidate_store": "search"}
    assert evaluation_index_options("opensearch", 25_000, keys_in_search) == keys_in_search
    for keyed in ({"url": "http://x"}, {"url": "http://x", "candidate_store": "postgres"}):  # the default store
        assert evaluation_index_options("opensearch", 40_000, keyed) == keyed | {"cached_documents": 40_000}


def test_evaluate_on_a_search_server_from_the_config_gives_the_postgresql_backends_links(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], search_url: str | None) -> None:
    """``--config``'s ``[index]`` (backend, url, candidate_store) applies; the same set gives the same
    links on the PostgreSQL backend and on a search server with its candidate keys in PostgreSQL."""
    if search_url is None:
        pytest.skip("no osmem-server")
    from tests.search_server import allow_es_client_against_osmem

    allow_es_client_against_osmem()
    rec, pp, _ = write_labelled(tmp_path, 60)
    args = ["evaluate", "--records", str(rec), "--pairs", str(pp), "--id", "ref", "--encoding", "latin-1",
            "--map", "title=headline,body=text,price=cost,user=seller", "--json-only", "--no-baselines"]
    links = {}
    for name, index in (("postgres", ""), ("opensearch", f'backend = "opensearch"\nurl = "{search_url}"\n'
                                                        'index = "evalkeyed"\ncandidate_store = "postgres"\n')):
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(f"[index]\n{index}" if index else "")
        assert main([*args, "--config", str(cfg), "--out", str(tmp_path / name)]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["backend"] == name
        links[name] = sorted((r["a"], r["b"], r["score"], r["flag_of_b"]) for r in
                             csv.DictReader((tmp_path / name / "links.csv").open()))
    assert links["postgres"] and links["opensearch"] == links["postgres"]
