"""``nearsync evaluate``: precision/recall/F1 of the real pipeline on any labelled data set.

The records are loaded into a throwaway PostgreSQL as ads (in file order, so the first listed is
the earliest), the real indexing daemon and dedup worker run over them (no shortcut) with the
settings ``nearsync dedup`` would use -- a named profile (:mod:`daemon.profiles`, default
``classified``: the daemon's defaults) with a settings file's ``[signatures]`` / ``[dedup]`` on top
-- and the flags and clusters they write are compared with the true pairs. With ``[dedup] rarity``
or ``max_block`` above 0 (the defaults) a corpus snapshot of the loaded records (title-word rarity,
large candidate-key blocks) is built once they are indexed and before the worker starts
(:func:`daemon.ops.rarity.refresh_rarity`; ``rarity_snapshot`` in the report), as ``nearsync rarity
refresh`` would on a table at rest:

* pair precision/recall/F1 for ``duplicate`` alone and for ``duplicate ∪ potential_duplicate``,
  counted two ways: pairs inside each cluster (for ``duplicate`` alone, among the original and its
  ``duplicate``-flagged members) and record → original (each flag's record with the original it
  names: what a moderator sees); true pairs are the transitive closure of the given pairs;
* candidate recall (share of true pairs the worker ever compared) and candidates per record, so a
  blocking miss and a scoring miss can be told apart;
* cluster metrics: B-cubed precision/recall/F1 (Bagga & Baldwin 1998) and the adjusted Rand index
  (Hubert & Arabie 1985), every record not in a cluster counting as a singleton;
* with a source column, the same pair figures over cross-source pairs only (clean-clean ER);
* three baselines on the same records: datasketch MinHash LSH over word 3-shingles (threshold
  tuned on the same labels: an upper bound for it), simhash Hamming ≤ 3, and a Levenshtein ratio
  ≥ 0.8 on the title (a marketplace's stored procedure); their pairs against the same truth.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import itertools
import json
import operator
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import psycopg

from daemon import heap
from daemon.backends.base import DEFAULT_CANDIDATE_STORE, PlannerStatistics
from daemon.backends.doc_cache import DEFAULT_CACHED_DOCUMENTS
from daemon.config import REFERENCE_COLUMNS, REFERENCE_FIELDS, Settings, settings_from_mapping
from daemon.dedup.settings import DedupOptions, dedup_options
from daemon.profiles import DEFAULT_PROFILE, PROFILES, merged
from daemon.signatures import SignatureParams
from daemon.errors import ConfigError
from daemon.evaluation.datasets import RECORD_ROLES, Dataset, Record, read_pairs_csv, read_records_csv
from daemon.evaluation.loader import add_field_columns, copy_ads, field_column, key_to_id
from daemon.evaluation.measures import adjusted_rand_index, bcubed, clusters_from_pairs, pair_prf, transitive_closure
from daemon.ops.migrate import sync_triggers, upgrade
from daemon.ops.rarity import refresh_rarity
from daemon.db.throwaway import ThrowawayPostgres
from daemon.db.queries import query
from daemon.service import build_indexer, build_worker, opened_backend

PRODUCT_PROFILE: dict[str, Any] = PROFILES["products"]
"""The ``products`` profile's settings (:data:`daemon.profiles.PROFILES`), kept under this name for the demo."""


def load_labelled(records: list[str], pairs: str, *, mapping: dict[str, str], id_column: str, encoding: str,
                  source_column: str | None, delimiter: str = ",") -> Dataset:
    """Read one or more records CSVs and a true-pairs CSV into a :class:`Dataset`.

    ``source_column`` ``"@file"`` takes each file's stem as the source (e.g. Abt / Buy). Ids must be
    unique within a file. When two files use the same ids (each numbered from 0, as DBLP-ACM's
    are), keys become ``<file stem>:<id>`` and the pairs CSV's first column names ids of the first
    file, its second column ids of the second (which needs exactly two files).

    Raises:
        ConfigError: naming the file, line and column: a named column is missing (key ``--id`` /
            ``--map`` / ``--source-column``), an empty or repeated id, bytes invalid in ``encoding``,
            a BOM with a non-UTF-8 encoding; or ids shared by more than two files; no records at
            all (``--records``); a pairs file without pairs, or none of whose pairs names two ids of
            the records (``--pairs``: the wrong ``--id`` or delimiter, the files in the wrong order).
            Pairs naming an id the records lack are otherwise left out and counted
            (:attr:`Dataset.pairs_outside`, ``true_pairs_outside_records`` in the report).
    """
    per_file: list[list[Record]] = []
    for path in records:
        m = dict(mapping)
        extra: dict[str, Any] = {}
        if source_column == "@file":
            extra["source"] = Path(path).stem
        elif source_column:
            m["source"] = source_column
        try:
            per_file.append(read_records_csv(Path(path), mapping=m, id_column=id_column, encoding=encoding,
                                             extra=extra, delimiter=delimiter, strict=True))
        except ConfigError as e:
            if source_column and source_column != "@file" and e.key == "--map" and repr(source_column) in e.message:
                raise ConfigError("--source-column", e.message) from None
            raise
    keys = [r.key for part in per_file for r in part]
    prefixes = ("", "")
    if len(set(keys)) != len(keys):
        if len(per_file) != 2:
            dup = next(k for k, n in Counter(keys).items() if n > 1)
            raise ConfigError("--records", f"id {dup!r} occurs in more than one records file; files that share ids "
                                           "are only supported two at a time (the pairs CSV's columns then follow "
                                           "the files' order)")
        stems = [Path(p).stem for p in records]
        if stems[0] == stems[1]:
            stems = [f"{stems[0]}#1", f"{stems[1]}#2"]
        prefixes = (f"{stems[0]}:", f"{stems[1]}:")
        for part, prefix in zip(per_file, prefixes, strict=True):
            for r in part:
                r.key = prefix + r.key
    recs = [r for part in per_file for r in part]
    if not recs:
        raise ConfigError("--records", f"{', '.join(records)}: no records (a header line and no rows)")
    present = {r.key for r in recs}
    read = read_pairs_csv(Path(pairs), encoding=encoding, prefixes=prefixes, delimiter=delimiter)
    if not read:
        raise ConfigError("--pairs", f"{pairs}: no pairs (expected a header line, then two ids per line, "
                                     f"separated by {delimiter!r})")
    truth = {p for p in read if p[0] in present and p[1] in present}
    if not truth:
        a, b = min(read)
        raise ConfigError("--pairs", f"{pairs}: none of its {len(read)} pairs names two ids of the records "
                                     f"(e.g. {a!r}, {b!r}); check --id, --delimiter and the order of the files")
    return Dataset(Path(records[0]).stem, recs, truth, pairs_outside=len(read) - len(truth))


async def _add_columns(dsn: str, names: list[str]) -> None:
    """Add the ``ads`` columns of fields that are not fixed roles (:func:`add_field_columns`)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await add_field_columns(conn, names)


def _pairs_of_groups(groups: list[list[str]]) -> set[tuple[str, str]]:
    out = set()
    for g in groups:
        for a, b in itertools.combinations(sorted(g), 2):
            out.add((a, b))
    return out


def _cross(pairs: set[tuple[str, str]], source: dict[str, Any]) -> set[tuple[str, str]]:
    of = source.get
    return {p for p in pairs if of(p[0]) != of(p[1])}


def _keyed_pairs(pairs: set[tuple[str, str]], key_of: dict[str, str]) -> set[tuple[str, str]]:
    """The record-id pairs ``pairs`` as ordered ``(key, key)`` pairs of the dataset's keys, without
    those whose records are gone. One loop without a ``sorted`` call per pair: ~800,000 pairs
    after a 25,000-listing run."""
    out = set()
    add, of = out.add, key_of.get
    for a, b in pairs:
        x, y = of(a), of(b)
        if x is not None and y is not None:
            add((x, y) if x <= y else (y, x))
    return out


def _prf(pred: set[tuple[str, str]], true: set[tuple[str, str]]) -> dict[str, Any]:
    m = pair_prf(pred, true)
    return {"precision": round(m.precision, 4), "recall": round(m.recall, 4), "f1": round(m.f1, 4),
            "predicted_pairs": len(pred), "true_pairs": len(true)}


def custom_fields(ds: Dataset) -> list[str]:
    """The records' field names that are not fixed roles (:data:`RECORD_ROLES`; ``evaluate --map
    authors=...``), in order of first appearance."""
    return list(dict.fromkeys(k for r in ds.records for k in r.fields if k not in RECORD_ROLES))


def source_mapping(ds: Dataset) -> dict[str, Any]:
    """The ``[source]`` table ``evaluate`` runs ``ds`` with: the reference ``ads`` table, plus each
    field of :func:`custom_fields` mapped to (and tracked in) its own text column
    (:func:`daemon.evaluation.loader.field_column`)."""
    custom = custom_fields(ds)
    out: dict[str, Any] = {"create_reference_table": True}
    if custom:
        out["fields"] = {**REFERENCE_FIELDS, **{n: field_column(n) for n in custom}}
        out["tracked_columns"] = [*REFERENCE_COLUMNS, *(field_column(n) for n in custom)]
    return out


_END_A, _END_B = operator.attrgetter("a"), operator.attrgetter("b")
"""The two ends of a scored candidate pair (:class:`~daemon.dedup.worker.ScoredCandidate`)."""


class _Raw:
    """The pipeline's raw results, boxed: the main task's result must have a short ``repr``.

    ``asyncio.run`` looks its SIGINT handler up on the way out (``signal.getsignal``), and on
    Python 3.11 that lookup formats the handler, a ``functools.partial`` holding the main task,
    into an exception message it then discards: the task's ``repr`` includes its result, and
    ``reprlib`` sorts a set in full before it cuts it short. With the ~800,000 compared pairs of
    a 25,000-record run that took ~3 s (and 8 s in a synthetic repro) after the last flag.
    """

    __slots__ = ("value",)

    def __init__(self, value: dict[str, Any]) -> None:
        self.value = value


async def _run_pipeline(settings: Settings, ds: Dataset, *, progress: bool) -> _Raw:
    """Load, index, then dedup; returns raw results keyed by record key (boxed, see :class:`_Raw`).

    :func:`evaluate` runs it, and computes its figures, with the garbage collector set as
    ``nearsync dedup`` did before its batch mode (:func:`daemon.heap.settled`: the dataset and
    start-up state frozen, young collections every 50,000 allocations): with CPython's defaults the
    full collections walked the dataset, every candidate document and the ~800,000 compared pairs
    again and again. Not the daemons' batch mode (:func:`daemon.heap.after_batch`): the
    25,000-listing run took 6-7 s more with it (user CPU 38.6-44.3 against 34.4-37.9 s, 3 runs
    alternated), where the daemons and the evaluation share one heap.

    The dedup worker starts once the load is indexed, so every record is compared with the whole
    table, as a clean single-worker pass is: the figures do not depend on how indexing and
    deduplication happened to interleave (the candidate cap keeps each record's best
    ``candidate_cap`` candidates of the whole table, not of the part indexed before it)."""
    t0 = time.perf_counter()
    rarity: dict[str, Any] | None = None
    compared: set[tuple[str, str]] = set()
    per_record: dict[str, int] = {}

    def observe(rid: str, scored: Any) -> None:
        per_record[rid] = len(scored)  # the last lookup of a record counts (a record may be re-queued)
        compared.update(zip(map(_END_A, scored), map(_END_B, scored)))  # C-level loop: ~800,000 pairs a run

    async with opened_backend(settings) as backend:
        indexer = await build_indexer(settings, backend)
        indexer.signer.start()  # as `nearsync run` does; the batches before it is ready are built inline
        worker = await build_worker(settings, backend)
        worker.handler.observer = observe  # type: ignore[attr-defined]
        tasks = [asyncio.create_task(indexer.loop.run())]
        await indexer.loop.ready.wait()
        phases = {"start_s": time.perf_counter() - t0}
        try:
            async with await psycopg.AsyncConnection.connect(settings.require_dsn(), autocommit=True) as conn:
                await copy_ads(conn, ((r.key, r.fields) for r in ds.records), custom_fields(ds))
                phases["loaded_s"] = time.perf_counter() - t0
                analyzed = False
                while True:
                    await asyncio.sleep(0.2)
                    cur = await conn.execute(query("queue_status"))
                    pend = {r[0]: r[1] for r in await cur.fetchall()}
                    if not analyzed and not pend.get("index"):
                        # the bulk load is indexed: statistics for the lookups still to come
                        # (autovacuum would take up to a minute; see PostgresBackend)
                        phases["indexed_s"] = time.perf_counter() - t0
                        if isinstance(backend, PlannerStatistics):
                            await backend.refresh_statistics()
                        analyzed = True
                        if dedup_options(settings).uses_snapshot:  # the snapshot the worker uses
                            rarity = await refresh_rarity(settings, backend, progress=False)
                        tasks.append(asyncio.create_task(worker.run()))
                        await worker.ready.wait()
                    if progress:
                        print(f"\r  indexing {pend.get('index', 0):>6} / dedup {pend.get('dedup', 0):>6} pending",
                              end="", flush=True, file=sys.stderr)
                    if not pend.get("index") and not pend.get("dedup") and worker.totals["claimed"] >= len(ds.records):
                        break
                if progress:
                    print("\r" + " " * 60 + "\r", end="", flush=True, file=sys.stderr)
                wall = time.perf_counter() - t0
                id_of = await key_to_id(conn)
                key_of = {v: k for k, v in id_of.items()}
                cur = await conn.execute(query("flags_of_table"), {"table": "public.ads"})
                flags = {key_of[r[0]]: {"flag": r[1], "original": key_of.get(r[2]), "cluster": r[3], "score": r[4],
                                        "summary": r[5], "reasons": r[6]} for r in await cur.fetchall()}
                cur = await conn.execute(query("clusters_of_table"), {"table": "public.ads"})
                clusters: dict[str, list[str]] = defaultdict(list)
                for rid, cid, _orig in await cur.fetchall():
                    clusters[cid].append(key_of[rid])
                cur = await conn.execute(query("links_of_table"), {"table": "public.ads"})
                links = [(key_of[a], key_of[b], s, summ, reasons) for a, b, s, summ, reasons in await cur.fetchall()]
        finally:
            indexer.loop.stop()
            worker.stop()
            await asyncio.gather(*tasks, return_exceptions=True)
    phases["drained_s"] = wall
    return _Raw({"wall_s": wall, "phases": {k: round(v, 2) for k, v in phases.items()}, "flags": flags,
                 "clusters": dict(clusters), "links": links,
                 "pairs_examined": worker.totals.get("pairs", 0), "rarity_snapshot": rarity,
                 "compared": _keyed_pairs(compared, key_of),
                 "candidates_per_record": sum(per_record.values()) / max(1, len(per_record))})


def _baselines(ds: Dataset, truth: set[tuple[str, str]], source: dict[str, Any], cross: bool) -> dict[str, Any]:
    try:
        from daemon.evaluation.baselines import (
            levenshtein_title_pairs,
            minhash_lsh_pairs,
            simhash_pairs,
            tune_minhash_lsh,
        )
    except ImportError as e:  # the `eval` extra is not installed
        return {"skipped": f"the baselines need {e.name}: pip install 'nearsync[eval]' (or pass --no-baselines)"}

    recs = [(r.key, r.fields.get("title"), r.fields.get("body")) for r in ds.records]

    def norm(pairs: Any) -> set[tuple[str, str]]:
        out: set[tuple[str, str]] = {tuple(sorted(p)) for p in pairs}  # type: ignore[misc]
        return _cross(out, source) if cross else out

    keep = (lambda p: len({source.get(k) for k in p}) > 1) if cross else None
    threshold, _, _ = tune_minhash_lsh(recs, truth, keep=keep)
    return {
        "minhash_lsh_tuned": {"threshold": threshold, **_prf(norm(minhash_lsh_pairs(recs, threshold=threshold)), truth)},
        "simhash_hamming_le_3": _prf(norm(simhash_pairs(recs, max_distance=3)), truth),
        "levenshtein_title_ge_0.8": _prf(norm(levenshtein_title_pairs(recs, threshold=0.8)), truth),
    }


def evaluation_mapping(ds: Dataset, *, profile: str = DEFAULT_PROFILE, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``[signatures]`` / ``[dedup]`` settings ``evaluate`` runs ``ds`` with: what ``nearsync
    dedup`` would run with ``[dedup] profile = profile`` and the ``config`` file's tables on top.

    Only what the data dictates is added: ``dedup.enabled`` (the indexer must queue records);
    ``scope = "global"`` when the records carry no ``user`` and neither the profile nor ``config``
    sets a scope other than the default (records without a user would all share the empty user
    anyway; the report then says what was run); with a source column,
    ``best_match_per_source`` and ``cross_source_only`` (each source lists an item once) unless
    ``config`` sets them.

    Args:
        profile: a name of :data:`daemon.profiles.PROFILES`. config: a parsed settings file (its
            ``signatures`` and ``dedup`` tables are used).
    Returns:
        ``{"signatures": {...}, "dedup": {...}}`` in settings-file shape (``dedup.profile`` set).
    """
    config = config or {}
    dedup = merged(config.get("dedup") or {}, {"profile": profile, "enabled": True})
    effective_scope = dedup.get("scope", PROFILES[profile]["dedup"].get("scope", "user"))
    if effective_scope == "user" and not any(r.fields.get("user") for r in ds.records):
        dedup["scope"] = "global"
    if any(r.fields.get("source") for r in ds.records):
        dedup.setdefault("best_match_per_source", True)
        dedup.setdefault("cross_source_only", True)
    return {"signatures": dict(config.get("signatures") or {}), "dedup": dedup}


EVALUATE_CACHED_DOCUMENTS_MAX = 50_000
"""Most documents :func:`evaluation_index_options` lets the PostgreSQL backend's document cache hold
(~8-19 kB each with the scorer's prepared values, see
:data:`~daemon.backends.doc_cache.DEFAULT_CACHED_DOCUMENTS`: ~1 GB at most)."""


def evaluation_index_options(backend: str, records: int, given: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``[index]`` options ``evaluate`` runs with: ``given`` (the caller's, kept as they are),
    plus, for the PostgreSQL backend (and a search backend's PostgreSQL candidate store,
    ``candidate_store = "postgres"``, the default), a document cache that holds the whole set
    (``cached_documents`` = ``records``, at least the daemon's default and at most
    :data:`EVALUATE_CACHED_DOCUMENTS_MAX`) unless ``given`` sets one.

    An evaluation compares every record with its candidates from the whole set (global scope on a
    product catalogue), so with a cache smaller than the set the least recently used documents are
    dropped and read, decoded and prepared for scoring again and again: on the 25,000-listing
    two-shop set with the daemon's 20,000, the scorer prepared 62,800 documents' values instead of
    25,000 and the run took 41.7-41.9 s of CPU against 33.3-33.7 s (2 runs each, alternated, idle),
    peak memory 887 against 947 MB. A daemon on a table that size is tuned the same way, by
    ``[index] cached_documents`` (docs/operations.md); the figures ``evaluate`` prints do not
    depend on it.

    Args:
        backend: ``index.backend`` (``postgres``, ``elasticsearch`` or ``opensearch``).
        records: records in the evaluated set.
        given: options the caller passes (None: none).
    Returns:
        The options mapping (a new dict).
    """
    options = dict(given or {})
    store = "postgres" if backend == "postgres" else options.get("candidate_store", DEFAULT_CANDIDATE_STORE)
    if store == "postgres" and "cached_documents" not in options:
        options["cached_documents"] = min(max(DEFAULT_CACHED_DOCUMENTS, records), EVALUATE_CACHED_DOCUMENTS_MAX)
    return options


def effective_settings(settings: Settings) -> dict[str, Any]:
    """Every effective ``[dedup]`` and ``[signatures]`` setting (defaults filled in), JSON-ready.

    Raises:
        ConfigError: an invalid setting (its key named).
    """
    opts: DedupOptions = dedup_options(settings)
    sc = opts.scoring
    dedup = {"profile": settings.profile, "enabled": opts.enabled, "scope": sc.scope, "min_match": opts.min_match,
             "candidate_cap": sc.candidate_cap, "best_match_per_source": opts.best_match_per_source,
             "cross_source_only": opts.cross_source_only, "max_component": opts.max_component,
             "duplicate_threshold": sc.duplicate_threshold, "potential_threshold": sc.potential_threshold,
             "strong_negative_cap": sc.strong_negative_cap,
             "single_field_cap": sc.single_field_cap, "rarity": sc.rarity,
             "fields": {f.name: {"metric": f.metric, "weight": f.weight, "evidence": f.evidence, **dict(f.params)}
                        for f in sc.fields},
             "cluster": dataclasses.asdict(sc.cluster)}
    for f in dataclasses.fields(opts):  # worker keys added later are reported too
        if f.name != "scoring" and f.name not in dedup:
            dedup[f.name] = getattr(opts, f.name)
    params = SignatureParams.from_mapping(settings.signatures)
    sig = {k: v for k, v in dataclasses.asdict(params).items() if not k.startswith("_")}
    sig["fields"] = {name: dataclasses.asdict(o) for name, o in params.fields}
    sig["lsh_bands_rows"] = list(params.bands_rows)
    sig["fingerprint"] = params.fingerprint()
    return {"dedup": dedup, "signatures": json.loads(json.dumps(sig, default=list))}


@heap.settled()
def evaluate(ds: Dataset, *, profile: str = DEFAULT_PROFILE, config: dict[str, Any] | None = None,
             dsn: str | None = None, backend: str = "postgres", out_dir: str | None = None, baselines: bool = True,
             progress: bool = True, index_options: dict[str, Any] | None = None,
             server: ThrowawayPostgres | None = None) -> dict[str, Any]:
    """Run the pipeline on ``ds`` as ``nearsync dedup`` would with ``profile`` and ``config``
    (:func:`evaluation_mapping`) and return the report (JSON-serialisable).

    Without ``dsn`` it runs on a throwaway server: ``server`` when given (one the caller began
    with :meth:`~daemon.db.throwaway.ThrowawayPostgres.start_in_background`, so ``initdb`` ran
    while the data was read), else a new one. Either is stopped and removed on return.

    Report keys: ``profile``, ``settings`` (:func:`effective_settings`); pair figures against the
    transitive closure of the true pairs, each ``{precision, recall, f1, predicted_pairs,
    true_pairs}``: ``duplicate`` / ``duplicate_or_potential`` (every pair inside a cluster, the
    cluster's ``duplicate`` core for the first) and ``record_to_original`` (the pairs a moderator
    sees: each flagged record with the original its flag names); ``candidates``: distinct pairs
    ever compared, candidates scored per record, and **candidate recall** (share of true pairs
    that were compared at least once: a true pair missed with recall short of it is a blocking
    miss, one compared but not predicted is a scoring or clustering miss); ``clusters`` (B-cubed,
    ARI); ``cross_source`` with a source column; ``baselines``; ``wall_time_s`` (the pipeline, s:
    from the daemons' start to the last flag) and ``phases_s``, the seconds from that start at
    which the daemons were ready (``start_s``), the records loaded (``loaded_s``), indexed
    (``indexed_s``) and all deduplicated (``drained_s``). The collector is settled for the call
    (:func:`daemon.heap.settled`; see :func:`_run_pipeline`).

    Raises:
        ConfigError: an invalid setting. PgServerError: the throwaway server cannot start.
    """
    cfg = evaluation_mapping(ds, profile=profile, config=config)
    has_source = any(r.fields.get("source") for r in ds.records)
    if dsn is not None:
        server = None
    try:
        if dsn is None:
            server = server or ThrowawayPostgres(fast=True)
            dsn = server.start()
        base = {"database": {"dsn": dsn}, "daemon": {"poll_interval_s": 0.5, "batch_size": 500},
                "index": {"backend": backend, **evaluation_index_options(backend, len(ds.records), index_options)},
                **cfg}
        settings = settings_from_mapping({**base, "source": source_mapping(ds)}, env={})
        effective = effective_settings(settings)
        # The reference table is created by the migration, which attaches its triggers: first with
        # the fixed columns, then (once the columns of the other fields exist) with them.
        upgrade(settings_from_mapping({**base, "source": {"create_reference_table": True}}, env={}))
        if custom_fields(ds):
            asyncio.run(_add_columns(dsn, custom_fields(ds)))
            sync_triggers(settings)
        raw = asyncio.run(_run_pipeline(settings, ds, progress=progress)).value
    finally:
        if server is not None:
            server.stop()
    source = {r.key: r.fields.get("source") for r in ds.records}
    truth = transitive_closure(ds.pairs)
    truth = {tuple(sorted(p)) for p in truth}  # type: ignore[misc]
    groups = list(raw["clusters"].values())
    pred_all = _pairs_of_groups(groups)
    dup_groups = []
    for members in groups:
        core = [m for m in members if m not in raw["flags"] or raw["flags"][m]["flag"] == "duplicate"]
        dup_groups.append(core)
    pred_dup = _pairs_of_groups(dup_groups)
    position = {r.key: i for i, r in enumerate(ds.records)}
    to_orig_all = {k: f["original"] for k, f in raw["flags"].items() if f["original"]}
    to_orig_dup = {k: o for k, o in to_orig_all.items() if raw["flags"][k]["flag"] == "duplicate"}
    pred_cluster = {k: cid for cid, members in raw["clusters"].items() for k in members}
    true_cluster = {k: f"t{label}" for k, label in clusters_from_pairs(truth).items()}
    all_keys = [r.key for r in ds.records]
    pc = {k: pred_cluster.get(k, f"p:{k}") for k in all_keys}
    tc = {k: true_cluster.get(k, f"s:{k}") for k in all_keys}
    b3 = bcubed(pc, tc)
    compared = raw["compared"]
    report: dict[str, Any] = {
        "dataset": ds.name, "records": len(ds.records), "true_pairs_given": len(ds.pairs),
        "true_pairs_outside_records": ds.pairs_outside,
        "true_pairs_closure": len(truth), "backend": backend, "profile": settings.profile,
        "settings": effective,
        "duplicate": _prf(pred_dup, truth),
        "duplicate_or_potential": _prf(pred_all, truth),
        "record_to_original": {"duplicate": _flag_prf(to_orig_dup, truth, position),
                               "duplicate_or_potential": _flag_prf(to_orig_all, truth, position)},
        "candidates": _candidates(compared, truth, raw["candidates_per_record"]),
        "clusters": {"count": len(groups), "bcubed_precision": round(b3.precision, 4),
                     "bcubed_recall": round(b3.recall, 4), "bcubed_f1": round(b3.f1, 4),
                     "adjusted_rand_index": round(adjusted_rand_index(pc, tc), 4),
                     "largest": max((len(g) for g in groups), default=0)},
        "candidate_pairs_examined": raw["pairs_examined"],
        "rarity_snapshot": raw["rarity_snapshot"],
        "links_stored": len(raw["links"]),
        "flags": {"duplicate": sum(1 for f in raw["flags"].values() if f["flag"] == "duplicate"),
                  "potential_duplicate": sum(1 for f in raw["flags"].values() if f["flag"] == "potential_duplicate")},
        "wall_time_s": round(raw["wall_s"], 2),
        "phases_s": raw["phases"],
    }
    if has_source:
        tx = _cross(truth, source)
        report["cross_source"] = {"duplicate": _prf(_cross(pred_dup, source), tx),
                                  "duplicate_or_potential": _prf(_cross(pred_all, source), tx),
                                  "record_to_original": {
                                      "duplicate": _flag_prf(to_orig_dup, tx, position),
                                      "duplicate_or_potential": _flag_prf(to_orig_all, tx, position)},
                                  "candidates": _candidates(_cross(compared, source), tx,
                                                            raw["candidates_per_record"])}
    if baselines:
        t0 = time.perf_counter()
        report["baselines"] = _baselines(ds, _cross(truth, source) if has_source else truth, source, has_source)
        report["baselines"]["note"] = ("scored on cross-source pairs" if has_source else "scored on all pairs") + \
            "; the MinHash LSH threshold is tuned on the labels (an upper bound for that baseline)"
        report["baselines"]["wall_time_s"] = round(time.perf_counter() - t0, 2)
    if out_dir:
        _write_out(Path(out_dir), ds, raw, pred_all, truth)
        report["out"] = str(out_dir)
    report["_examples"] = _examples(ds, raw, truth)
    return report


def _flag_prf(flags: dict[str, str], truth: set[tuple[str, str]], position: dict[str, int]) -> dict[str, Any]:
    """Record -> original figures (what a moderator sees): a flag is right when its record and the
    original it names are a true pair; precision = right flags / flags, recall = right flags /
    records that have an earlier true duplicate (load order is creation order), so a record of a
    true group of three counts once, whichever earlier member its flag names."""
    earlier: dict[str, int] = {}
    for a, b in truth:
        later = a if position.get(a, -1) > position.get(b, -1) else b
        earlier[later] = 1
    right = sum(1 for k, o in flags.items() if tuple(sorted((k, o))) in truth)
    p = right / len(flags) if flags else 1.0
    r = right / len(earlier) if earlier else 1.0
    return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(2 * p * r / (p + r), 4) if p + r else 0.0,
            "flags": len(flags), "records_with_an_earlier_duplicate": len(earlier)}


def _candidates(compared: set[tuple[str, str]], truth: set[tuple[str, str]], per_record: float) -> dict[str, Any]:
    """Blocking figures: distinct pairs compared, candidates per record, candidate recall."""
    hit = len(truth & compared)
    return {"pairs_compared": len(compared), "per_record": round(per_record, 2),
            "true_pairs_compared": hit, "candidate_recall": round(hit / len(truth), 4) if truth else 1.0}


def _examples(ds: Dataset, raw: dict[str, Any], truth: set[tuple[str, str]], n: int = 3) -> list[dict[str, Any]]:
    """``n`` flags spread over the score range (highest, middle, lowest), with both records."""
    by_key = {r.key: r for r in ds.records}
    flagged = sorted(((k, f) for k, f in raw["flags"].items() if f["original"] in by_key),
                     key=lambda kv: -float(kv[1]["score"]))
    if not flagged:
        return []
    picks = sorted({round(i * (len(flagged) - 1) / max(1, n - 1)) for i in range(n)})
    out = []
    for i in picks:
        key, f = flagged[i]
        orig = f["original"]
        out.append({"record": key, "original": orig, "flag": f["flag"], "score": f["score"], "summary": f["summary"],
                    "correct": tuple(sorted((key, orig))) in truth,
                    "record_title": by_key[key].fields.get("title"), "original_title": by_key[orig].fields.get("title"),
                    "record_price": by_key[key].fields.get("price"), "original_price": by_key[orig].fields.get("price")})
    return out


def _write_out(out: Path, ds: Dataset, raw: dict[str, Any], pred: set[tuple[str, str]], truth: set[tuple[str, str]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    by_key = {r.key: r for r in ds.records}
    link_of = {tuple(sorted((a, b))): (s, summ, reasons) for a, b, s, summ, reasons in raw["links"]}

    def title(k: str) -> Any:
        return by_key[k].fields.get("title") if k in by_key else None

    compared = raw.get("compared", set())
    with (out / "links.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["a", "b", "score", "flag_of_b", "in_cluster_pairs", "true", "summary", "reasons", "a_title", "b_title"])
        for a, b, s, summ, reasons in sorted(raw["links"], key=lambda x: (-x[2], x[0], x[1])):
            p = tuple(sorted((a, b)))
            w.writerow([a, b, s, (raw["flags"].get(b) or {}).get("flag", ""), p in pred, p in truth, summ,
                        json.dumps(reasons), title(a), title(b)])
    for name, pairs in (("false_positives.csv", pred - truth), ("false_negatives.csv", truth - pred)):
        with (out / name).open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["a", "b", "linked_score", "compared", "summary", "a_title", "b_title"])
            for a, b in sorted(pairs):
                s, summ, _ = link_of.get((a, b), ("", "", None))
                w.writerow([a, b, s, (a, b) in compared, summ, title(a), title(b)])


FEEDBACK_COLUMNS = ("a", "b", "label", "decided_by", "decided_at", "score")


def export_feedback(dsn: str, out: str | Path, *, table: str | None = None) -> int:
    """Write moderators' decisions (``nearsync.pair_decisions``) as labelled pairs to a CSV file.

    Columns: ``a``, ``b`` (record ids, canonical order), ``label`` (1: confirmed duplicate, 0:
    dismissed as not a duplicate), ``decided_by``, ``decided_at`` (ISO 8601), ``score`` (the pair's
    score 0-100 when decided, empty if unknown); oldest decision first.

    Args:
        dsn: the database holding the decisions. out: CSV path (overwritten). table: only this
            tracked table (``schema.table``); None: all.
    Returns:
        The number of pairs written.
    Raises:
        psycopg.OperationalError: the database cannot be reached. OSError: ``out`` cannot be written.
    """
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(query("feedback_pairs"), {"table": table}).fetchall()
    with open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(FEEDBACK_COLUMNS)
        for _t, a, b, decision, by, at, score in rows:
            w.writerow([a, b, 1 if decision == "duplicate" else 0, by, at.isoformat(),
                        "" if score is None else round(float(score), 1)])
    return len(rows)
