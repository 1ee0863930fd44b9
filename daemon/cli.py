"""The ``nearsync`` command line: one console script with subcommands.

Exit codes: 0 ok; 1 the job found a problem (e.g. ``reindex --verify`` saw drift), or an
unexpected error; 2 bad configuration or usage; 3 the database is not ready (missing table, column
or migration); 4 the database or index cannot be reached, or the metrics port cannot be listened on;
141 (quietly) the reader of standard output went away (``nearsync ... | head``), as for any tool
that SIGPIPE ends.

Every failure ends with one line on stderr, ``nearsync: <what is wrong>``, and no traceback unless
``--debug`` is given (:func:`exit_status` maps an exception to its code and line). Usage errors
(a flag out of range) are argparse's: the usage, then ``nearsync <command>: error: ...``, exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import select
import sys
import traceback
from collections.abc import Callable, Coroutine
from typing import Any

import psycopg

from daemon import __version__, heap
from daemon.config import (DEFAULT_CONCURRENCY, Settings, load_settings, parse_duration,
                           redact_dsn)
from daemon.errors import ConfigError
from daemon.logs import configure_logging, get_logger
from daemon.backends.base import TransientIndexError
from daemon.profiles import PROFILES
from daemon.db.throwaway import PgServerError
from daemon.capture.source import SchemaError

EXIT_PROBLEM, EXIT_CONFIG, EXIT_SCHEMA, EXIT_UNREACHABLE = 1, 2, 3, 4

DESCRIPTION = """\
nearsync keeps a search index in sync with a PostgreSQL table through triggers, a change log and
tracking table (a transactional outbox) and LISTEN/NOTIFY, and flags near-duplicate records back
into PostgreSQL.

Typical use:
  nearsync migrate                 # create the nearsync schema and attach the triggers
  nearsync run                     # the indexing daemon (realtime; --mode batch --window 10s)
  nearsync dedup                   # the dedup worker: flags duplicates back into PostgreSQL
  nearsync status                  # lag, pending changes, dead letters, indexed count, sweep
  nearsync reindex                 # one-shot full rebuild (resumable; --verify, --repair)
  nearsync rarity refresh          # title-word rarity snapshot for the dedup worker ([dedup] rarity)
  nearsync evaluate                # precision/recall/F1 on a labelled data set (default: Abt-Buy)
  nearsync compare A B             # two records (JSON) scored as the dedup worker would, and why
  nearsync demo                    # everything above on a throwaway PostgreSQL and real data

Settings come from --config FILE (TOML; or NEARSYNC_CONFIG), then NEARSYNC_* variables, then flags.
The database is --dsn or NEARSYNC_DSN (secrets belong in the environment; they are never logged).
"""


def _settings(args: argparse.Namespace) -> Settings:
    """The command's settings, every section validated (see :func:`daemon.service.validate_settings`).

    Raises:
        ConfigError: naming the first invalid setting.
    """
    from daemon.service import validate_settings

    return validate_settings(load_settings(
        args.config, dsn=args.dsn, backend=getattr(args, "backend", None), mode=getattr(args, "mode", None),
        window_s=parse_duration("--window", args.window) if getattr(args, "window", None) else None,
        batch_size=getattr(args, "batch_size", None), concurrency=getattr(args, "concurrency", None),
        metrics_port=getattr(args, "metrics_port", None), profile=getattr(args, "profile", None)))


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1.

    Raises:
        argparse.ArgumentTypeError: otherwise (argparse then prints the usage and exits 2).
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def open_fraction(text: str) -> float:
    """argparse type: a number strictly between 0 and 1 (a Jaccard similarity threshold).

    Raises:
        argparse.ArgumentTypeError: otherwise.
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1, got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (both excluded), got {text}")
    return value


def _print(obj: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(obj, indent=2, default=str))
    else:
        for k, v in obj.items():
            print(f"{k:>20}: {json.dumps(v, default=str) if isinstance(v, (dict, list)) else v}")


# -- subcommands -----------------------------------------------------------------------------------

def cmd_migrate(args: argparse.Namespace) -> int:
    """``nearsync migrate``: apply the Alembic migrations up to ``--revision`` (default head), or
    downgrade to ``--downgrade``; prints the revision before and after (``from``, ``to``). Returns exit code 0; a
    database that cannot be reached raises (exit 4 by :func:`exit_status`)."""

    from daemon.ops.migrate import downgrade, upgrade

    settings = _settings(args)
    result = downgrade(settings, args.downgrade) if args.downgrade else upgrade(settings, args.revision)
    _print(result, args.json)
    return 0


async def cmd_run(args: argparse.Namespace) -> int:
    """``nearsync run``: the indexing daemon (LISTEN, claim, sign, upsert) until SIGTERM/SIGINT.
    Waits while the database or index is unreachable (retried with backoff); exits 3 when the
    table or migrations are missing. Returns exit code 0 on a clean stop."""

    from daemon.http.health import serving
    from daemon.service import build_indexer, opened_backend, when_available

    settings = _settings(args)
    async with opened_backend(settings, wait=True) as backend:
        indexer = await when_available("database", lambda: build_indexer(settings, backend))
        indexer.loop.install_signal_handlers()
        async with serving(indexer.loop, settings, backend, indexer.table.name):
            # Once the metrics port is bound (a taken one ends the process, and a forkserver it
            # left half started would print a traceback), so the first large batch need not wait
            # for the workers to start: they start on a thread while the loop runs.
            indexer.signer.start()
            heap.settle()
            try:
                await indexer.loop.run()
            finally:
                indexer.signer.close()
    return 0


async def cmd_dedup(args: argparse.Namespace) -> int:
    """``nearsync dedup``: the dedup worker (claim indexed records, find and score candidates,
    write links, clusters and flags) until SIGTERM/SIGINT. Waits while the database is
    unreachable. With ``--requeue`` it first puts every live document of the table on the dedup
    queue (:mod:`daemon.ops.requeue`: a pass over the whole table) and logs how many. While its
    queue is idle it sweeps the table (:mod:`daemon.dedup.sweep`, ``[dedup] sweep_per_s``).
    Returns exit code 0 on a clean stop."""

    from daemon.dedup.settings import dedup_options
    from daemon.dedup.sweep import sweep_rate, sweeping
    from daemon.http.health import serving
    from daemon.service import build_worker, opened_backend, when_available

    settings = _settings(args)
    async with opened_backend(settings, wait=True) as backend:
        loop = await when_available("database", lambda: build_worker(settings, backend))
        if args.requeue:
            await _requeue_table(settings, backend)
        loop.install_signal_handlers()
        table = settings.source.qualified
        async with serving(loop, settings, backend, table), \
                sweeping(settings.require_dsn(), table, loop.handler,
                         sweep_rate(dedup_options(settings).sweep_per_s, backend, table), loop.idle,
                         lambda: loop.stopping):
            heap.settle(batches=True)
            await loop.run()
    return 0


async def _requeue_table(settings: Settings, backend: Any) -> None:
    """``nearsync dedup --requeue``: every live document of the source table back on the dedup queue
    (:func:`daemon.ops.requeue.requeue_for_dedup`), logged with the count.
    Raises:
        psycopg.Error, TransientIndexError: the database or the index failed."""
    from daemon.ops.requeue import live_ids, requeue_for_dedup

    table = settings.source.qualified
    ids = await live_ids(backend, table)
    async with await psycopg.AsyncConnection.connect(settings.require_dsn(), autocommit=True) as conn:
        queued = await requeue_for_dedup(conn, table, ids)
    get_logger("nearsync.dedup").info("requeued the table for the dedup worker", table=table, records=queued)


def cmd_grant_role(args: argparse.Namespace) -> int:
    """``nearsync grant-role``: create the least-privilege role ``args.role`` if missing, grant it
    the daemon's privileges and print what was granted. Returns exit code 0."""

    from daemon.ops.roles import grant_role

    _print(grant_role(_settings(args), args.role), args.json)
    return 0


async def cmd_status(args: argparse.Namespace) -> int:
    """``nearsync status``: rows, indexed documents, NOTIFY queue use, per-queue backlog (pending,
    oldest age in s, claimed, retrying, dead letters) and the dedup sweep's progress (passes done,
    position, or resting), as text or ``--json``. Returns exit code 0."""

    from daemon.service import status

    report = await status(_settings(args))
    if args.json:
        _print(report, True)
        return 0
    print(f"table {report['table']}: {report['rows']} rows, {report['indexed']} indexed ({report['backend']} backend), "
          f"NOTIFY queue {report['notification_queue_usage'] * 100:.2f}% used")
    if "candidate_store" in report:
        print(f"  candidate keys: {report['candidate_store']['postgres']} documents in PostgreSQL "
              "(index.candidate_store = \"postgres\")")
    for name, q in report["queues"].items():
        print(f"  {name:>6} queue: {q['pending']} pending (oldest {q['oldest_age_s']:.1f} s), "
              f"{q['claimed']} claimed, {q['retrying']} retrying, {q['dead_letters']} dead letters")
    if "sweep" in report:
        sw = report["sweep"]
        last = f", the last took {sw['last_pass_s']:.0f} s" if sw["last_pass_s"] is not None else ""
        head = f"  dedup sweep: {sw['passes']} pass(es) done{last}; "
        if sw["resting"]:
            print(f"{head}resting: nothing changed since the last pass began ({sw['pass_started_at']})")
        elif not sw["after_id"]:
            print(f"{head}the next pass is due (the last began {sw['pass_started_at']})")
        else:
            eta = f", about {_duration(sw['eta_s'])} left at its rate so far" if sw["eta_s"] is not None else ""
            print(f"{head}this one started {sw['pass_started_at']}, after record {sw['after_id']}: "
                  f"{sw['position']:,} of {sw['records']:,} records{eta}")
    return 0


def _duration(seconds: float) -> str:
    """``seconds`` for a person: ``"42 s"``, ``"17 min"``, ``"3.2 h"``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


async def cmd_reindex(args: argparse.Namespace) -> int:
    """``nearsync reindex``: a full, resumable rebuild of the index from the table (a new index and an
    alias swap on search servers), or ``--verify`` / ``--repair`` (drift between table and index,
    on a sample) or ``--rollback``. After a full rebuild, where the dedup worker is enabled and uses a
    corpus snapshot (``[dedup] rarity`` or ``max_block`` above 0, the defaults), it builds a new
    snapshot of the rebuilt index (:func:`daemon.ops.rarity.refresh_rarity`; the report's
    ``rarity_snapshot``) unless ``--no-snapshot``. Returns 0, or 1 when drift was found and not
    repaired or the rollback is impossible (:class:`PermanentIndexError`)."""

    from daemon.backends.base import PermanentIndexError
    from daemon.dedup.settings import dedup_options
    from daemon.ops.rarity import refresh_rarity
    from daemon.ops.reindex import reindex, rollback, verify
    from daemon.service import dedup_enabled, opened_backend

    settings = _settings(args)
    async with opened_backend(settings) as backend:
        if args.rollback:
            try:
                report = await rollback(settings, backend, page_size=args.page_size, progress=not args.no_progress)
            except PermanentIndexError as e:
                print(f"nearsync: cannot roll back: {e}", file=sys.stderr)
                return EXIT_PROBLEM
            _print(report, args.json)
            return 0
        if args.verify or args.repair:
            report = await verify(settings, backend, sample=args.sample, repair=args.repair)
            _print(report, args.json)
            return EXIT_PROBLEM if report["drift"] and not report["repaired"] else 0
        heap.settle()  # as `nearsync run` does: the main process's collector ran every 700 allocations,
        # walking the pages' rows and documents (~15 µs of CPU per signed row on a 20,000-row reindex)
        report = await reindex(settings, backend, page_size=args.page_size, resume=not args.restart,
                               from_scratch=args.from_scratch, progress=not args.no_progress)
        if not args.no_snapshot and dedup_enabled(settings) and dedup_options(settings).uses_snapshot:
            # the rebuilt index's corpus snapshot, as `nearsync rarity refresh` builds it; a worker
            # that ran beside the rebuild and processed records with the old one sweeps them again
            report["rarity_snapshot"] = await refresh_rarity(settings, backend, progress=not args.no_progress)
        _print(report, args.json)
    return 0


async def cmd_rarity(args: argparse.Namespace) -> int:
    """``nearsync rarity refresh``: build a new corpus snapshot (title-word document frequencies and
    the candidate-key blocks larger than ``[dedup] max_block``) from the indexed documents and make it active (:func:`daemon.ops.rarity.refresh_rarity`); with
    ``--requeue`` the whole table goes back on the dedup queue so every flag uses it. Returns
    exit code 0; exit 3 (by :func:`exit_status`) when the table or migration 0014 is missing."""

    from daemon.dedup.settings import dedup_options
    from daemon.ops.rarity import refresh_rarity
    from daemon.service import open_source, opened_backend

    settings = _settings(args)
    await open_source(settings)  # the table and the migrations (0014) are there, or exit 3
    async with opened_backend(settings) as backend:
        report = await refresh_rarity(settings, backend, requeue=args.requeue, progress=not args.no_progress)
    if not dedup_options(settings).uses_snapshot:
        report["note"] = ("[dedup] rarity and max_block are 0: the dedup worker does not use the snapshot until "
                          "one is set above 0")
    elif not args.requeue:
        report["note"] = ("scores change with the snapshot: re-run dedup over the table (nearsync rarity refresh "
                          "--requeue) for flags that all use it")
    _print(report, args.json)
    return 0


async def cmd_deadletter(args: argparse.Namespace) -> int:
    """``nearsync deadletter list|retry|purge``: list dead-lettered changes with their errors, requeue
    them (all, or ``ids``), or delete them. Returns exit code 0, or 1 when some of the ``ids`` named
    no dead letter (those are named on stderr; the others are retried or purged)."""

    from daemon.ops.deadletters import absent_dead, list_dead, purge_dead, retry_dead

    settings = _settings(args)
    ids = args.ids or None
    absent = await absent_dead(settings, ids) if ids and args.action != "list" else []
    if args.action == "list":
        rows = await list_dead(settings, limit=args.limit)
        if args.json:
            _print({"dead_letters": rows}, True)
        else:
            for r in rows:
                print(f"#{r['id']} {r['queue']} {r['table_name']} id={r['record_id']} op={r['op']} "
                      f"attempts={r['attempts']} failed_at={r['failed_at']}: {r['error']}")
            print(f"{len(rows)} dead letter(s)")
    elif args.action == "retry":
        print(f"requeued {await retry_dead(settings, ids)} record(s)")
    else:
        print(f"purged {await purge_dead(settings, ids)} dead letter(s)")
    if absent:
        print(f"nearsync: no dead letter with id {', '.join(map(str, absent))} (nearsync deadletter list shows "
              "them)", file=sys.stderr)
        return 1
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``nearsync evaluate``: load a labelled set (``--records``/``--pairs``, or the shipped Abt-Buy
    set), run the configured pipeline (profile, ``--config``) on a throwaway or given database and
    print precision/recall/F1, candidate recall and the effective settings as JSON; or, with
    ``--feedback``, export moderators' decisions as labelled pairs. Raises :class:`ConfigError`
    (exit 2) naming the option for a missing ``--pairs``/``--dsn``, a bad ``--delimiter`` or an
    unreadable ``--config``, before any server is started. Returns exit code 0.

    The throwaway server (no ``--dsn``) is started in the background once the options are
    checked, so its ``initdb`` runs while the evaluation code is imported and the CSVs are read
    (~1 s), and in memory (``/dev/shm``) when there is room for it
    (:func:`~daemon.evaluation.datasets.throwaway_memory_bytes`)."""

    from daemon.evaluation.datasets import (abt_buy, abt_buy_files, default_data_dir, missing_abt_buy_files,
                                             parse_mapping, throwaway_memory_bytes)
    from daemon.profiles import DEFAULT_PROFILE, profile_name

    if args.feedback:
        if not args.dsn:
            raise ConfigError("--dsn", "--feedback reads the decisions from a database: give its --dsn")
        from daemon.evaluation.evaluate import export_feedback

        n = export_feedback(args.dsn, args.feedback)
        print(f"wrote {n} labelled pair(s) to {args.feedback}")
        return 0
    if args.records:
        if not args.pairs:
            raise ConfigError("--pairs", "give the true-pairs CSV with --pairs when --records is used")
        mapping = parse_mapping(args.map) or {"title": "title", "body": "body", "price": "price"}
        if len(args.delimiter) != 1:
            raise ConfigError("--delimiter", f"must be one character, got {args.delimiter!r}")
        data = None
    else:
        data = default_data_dir()
        missing = missing_abt_buy_files(data)
        if missing:
            raise ConfigError("--records", "no --records given and the Abt-Buy set is not there: "
                                           f"{', '.join(missing)} not found")
        if args.profile is None:
            args.profile = "products"  # the shipped set is two shops' product listings
    config, index_options = _evaluation_config(args)
    profile = profile_name(args.profile or DEFAULT_PROFILE, "--profile")
    server = None
    if not args.dsn:
        from pathlib import Path

        from daemon.db.throwaway import ThrowawayPostgres

        inputs = [Path(f) for f in args.records] if data is None else list(abt_buy_files(data))
        server = ThrowawayPostgres(fast=True, memory_bytes=throwaway_memory_bytes(inputs))
        server.start_in_background()
    try:
        from daemon.evaluation.evaluate import evaluate, load_labelled

        if data is None:
            ds = load_labelled(args.records, args.pairs, mapping=mapping, id_column=args.id, encoding=args.encoding,
                               source_column=args.source_column, delimiter=args.delimiter)
            if ds.pairs_outside:
                print(f"nearsync: note: {ds.pairs_outside} of the true pairs in {args.pairs} name an id the records "
                      "lack; they are left out of the figures", file=sys.stderr)
        else:
            ds = abt_buy(data)
        report = evaluate(ds, profile=profile, config=config,
                          dsn=args.dsn, backend=args.backend or "postgres", index_options=index_options,
                          out_dir=args.out, baselines=not args.no_baselines, progress=not args.json_only,
                          server=server)
    finally:
        if server is not None:
            server.stop()
    report.pop("_examples", None)
    print(json.dumps(report, indent=2, default=str))
    return 0


def _evaluation_config(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``[signatures]`` and ``[dedup]`` tables of ``--config`` (``{}`` without it) and its
    ``[index]`` options; a ``[dedup] profile`` or ``[index] backend`` there fills ``args.profile``
    / ``args.backend`` when the command line left them unset.

    Raises:
        ConfigError: ``--config`` unreadable or not TOML, or its ``index`` not a table.
    """
    if not args.config:
        return {}, {}
    import tomllib
    from pathlib import Path

    try:
        loaded = tomllib.loads(Path(args.config).read_text())
    except OSError as e:
        raise ConfigError("--config", f"cannot read {args.config}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("--config", f"{args.config} is not valid TOML: {e}") from None
    config: dict[str, Any] = {k: v for k, v in loaded.items() if k in ("signatures", "dedup")}
    config["dedup"] = dict(config.get("dedup") or {})
    file_profile = config["dedup"].pop("profile", None)
    if args.profile is None and file_profile is not None:
        args.profile = file_profile
    index = loaded.get("index")
    if index is not None and not isinstance(index, dict):
        raise ConfigError("index", "must be a table")
    index_options = dict(index or {})
    file_backend = index_options.pop("backend", None)
    if args.backend is None and file_backend is not None:
        args.backend = file_backend
    return config, index_options


def cmd_serve(args: argparse.Namespace) -> int:
    """``nearsync serve``: the HTTP API (``/v1/check``, moderation UI, health) under uvicorn until
    stopped. Refuses a non-loopback bind without API keys unless ``--insecure`` (exit 2), waits
    while the database is unreachable, exits 3 when it is not migrated. Returns exit code 0."""

    import os
    from dataclasses import replace

    import uvicorn

    from daemon.http.app import create_app
    from daemon.http.options import LOOPBACK_HOSTS, ApiOptions, check_bind, parse_api_keys
    from daemon.service import open_source, when_available

    settings = _settings(args)
    settings.require_dsn()
    env_hosts = os.environ.get("NEARSYNC_ALLOWED_HOSTS", "").split(",")
    extra_hosts = [h.strip() for h in [*(args.allowed_host or []), *env_hosts] if h.strip()]
    secret = os.environ.get("NEARSYNC_SESSION_SECRET")
    options = ApiOptions(max_body_bytes=args.max_body_bytes,
                         unknown_fields="reject" if args.reject_unknown else "ignore",
                         api_keys=parse_api_keys(args.api_key or os.environ.get("NEARSYNC_API_KEY")),
                         max_set=args.max_set, max_matches=args.max_matches, cache_size=args.cache_size,
                         cache_ttl_s=args.cache_ttl, allowed_hosts=(*LOOPBACK_HOSTS, *extra_hosts),
                         secure_cookies=args.secure_cookies, **({"session_secret": secret} if secret else {}))
    hosts = check_bind(args.host, options, insecure=args.insecure)  # before waiting: a usage error exits at once
    # Like `run`: wait while the database is unreachable, exit 3 when it is not migrated.
    asyncio.run(when_available("database", lambda: open_source(settings)))
    app = create_app(settings, replace(options, allowed_hosts=hosts))
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log,
                server_header=False)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``nearsync demo``: the whole pipeline on Abt-Buy from ``--data`` (or generated ads when the
    data is absent, which it says), ending with the pair figures. Returns its exit code."""

    from daemon.evaluation.demo import run_demo

    return run_demo(data_dir=args.data, limit=args.limit, dsn=args.dsn, backend=args.backend)


def cmd_lsh(args: argparse.Namespace) -> int:
    """``nearsync lsh``: the LSH layout (bands x rows) chosen for ``--threshold`` and
    ``--num-perm`` and its S-curve table (probability that a pair of Jaccard J shares a band).
    Returns exit code 0."""

    from daemon.signatures import lsh_params, s_curve_table
    from daemon.signatures.params import DEFAULT_LSH_THRESHOLD

    threshold = DEFAULT_LSH_THRESHOLD if args.threshold is None else args.threshold
    b, r = lsh_params(threshold, args.num_perm)
    print(f"threshold {threshold} with {args.num_perm} permutations: {b} bands x {r} rows")
    print(s_curve_table(b, r))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """``nearsync compare A B``: the score, flag, summary and per-field reasons of two records as
    the dedup worker would score them (:mod:`daemon.ops.compare`), offline. Returns exit code 0.

    Raises:
        ConfigError: A or B not a JSON object, or an invalid setting (exit code 2).
    """
    import json

    from daemon.ops.compare import compare_records, format_comparison, read_record

    if args.ids:
        c = asyncio.run(_compare_indexed(args))
    else:
        settings = load_settings(args.config, profile=args.profile)
        c = compare_records(settings, read_record(args.a, "A"), read_record(args.b, "B"))
    print(json.dumps(c.as_json(), ensure_ascii=False, indent=2) if args.json else format_comparison(c))
    return 0


async def _compare_indexed(args: argparse.Namespace) -> Any:
    """``nearsync compare --ids A B``: :func:`daemon.ops.compare.compare_indexed` on the configured
    database and index."""
    from daemon.db.pool import configure_session
    from daemon.ops.compare import compare_indexed
    from daemon.service import opened_backend

    settings = _settings(args)
    async with opened_backend(settings) as backend, \
            await psycopg.AsyncConnection.connect(settings.dsn, autocommit=True) as conn:
        await configure_session(conn)
        return await compare_indexed(settings, backend, conn, args.a, args.b)


# -- parser ----------------------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """The top-level parser: its epilog (:func:`_lsh_epilog`, which imports the signature code:
    numpy, the stemmers, ~0.3 s of CPU) is made when the help is printed, not when the parser is
    built for every command."""

    def format_help(self) -> str:
        """The help text, with the LSH epilog made on first use."""
        if self.epilog is None:
            self.epilog = _lsh_epilog()
        return super().format_help()


def _lsh_epilog() -> str:
    try:
        from daemon.signatures import lsh_params, s_curve_table
        from daemon.signatures.params import DEFAULT_LSH_THRESHOLD

        b, r = lsh_params(DEFAULT_LSH_THRESHOLD, 128)
        return (f"MinHash LSH defaults: 128 permutations, {b} bands x {r} rows (target Jaccard {DEFAULT_LSH_THRESHOLD}).\n"
                f"Probability that a pair becomes a candidate, 1-(1-s^r)^b:\n{s_curve_table(b, r)}")
    except Exception:  # noqa: BLE001 - help must never fail
        return ""


def _add_loop_options(p: argparse.ArgumentParser, unit: str, concurrency: str) -> None:
    """Options shared by the queue loops (``run`` and ``dedup``); ``concurrency``: the command's default."""
    p.add_argument("--mode", choices=["realtime", "batch"], help="default realtime ([daemon] mode)")
    p.add_argument("--window", help="batch window, e.g. 10s, 500ms, 2m ([daemon] window_s)")
    p.add_argument("--batch-size", type=int, help=f"{unit} per micro-batch ([daemon] batch_size, default 500)")
    p.add_argument("--concurrency", type=int, metavar="N",
                   help=f"batches kept in flight by this process, each on rows of its own, so one batch's "
                        f"database waits overlap another's work ([daemon] concurrency, default {concurrency})")
    p.add_argument("--backend", choices=["postgres", "elasticsearch", "opensearch"], help="index backend")
    p.add_argument("--metrics-port", type=int, help="serve /metrics, /healthz, /readyz on this port "
                                                    "([daemon] metrics_port or $NEARSYNC_METRICS_PORT; default off)")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser for ``nearsync`` (exposed for docs and tests)."""
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="print the traceback of a failure (default: one line naming the problem)")
    common = argparse.ArgumentParser(add_help=False, parents=[debug])
    common.add_argument("--config", metavar="FILE", help="TOML settings file (default: $NEARSYNC_CONFIG)")
    common.add_argument("--dsn", help="PostgreSQL DSN (default: $NEARSYNC_DSN or [database] dsn)")
    common.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                        help="default info; warning for reindex and rarity refresh while their progress bar is "
                             "drawn on a terminal (the bar shows the progress; warnings and errors still print)")
    common.add_argument("--json", action="store_true", help="print results as JSON")
    common.add_argument("--profile", choices=list(PROFILES),
                        help="dedup profile the [signatures]/[dedup] settings start from ([dedup] profile; default "
                             "classified: classified ads, one seller's reposts; products: listings from independent "
                             "shops or feeds). Give the indexer (run, reindex), dedup and serve the same one")

    p = _Parser(prog="nearsync", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"nearsync {__version__}")
    p.add_argument("--debug", action="store_true",
                   help="print the traceback of a failure (default: one line naming the problem)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=argparse.ArgumentParser)

    m = sub.add_parser("migrate", parents=[common], help="create/upgrade the nearsync schema and attach triggers",
                       description="Run the Alembic migrations (idempotent) and re-attach triggers if the "
                                   "configured tracked columns changed. --downgrade base removes everything.")
    m.add_argument("--revision", default="head", help="upgrade target (default head)")
    m.add_argument("--downgrade", metavar="REV", help="downgrade to REV instead (e.g. base, 0001)")
    m.set_defaults(func=cmd_migrate)

    r = sub.add_parser("run", parents=[common], help="run the indexing daemon",
                       description="LISTEN for changes and index them. realtime: process as soon as woken; "
                                   "batch: gather for --window, then process everything in one bulk. "
                                   "SIGTERM/SIGINT finish the batch in hand and exit 0. Started while PostgreSQL "
                                   "or the index is down, it waits for them (logging each retry) rather than exit; "
                                   "configuration errors still exit at once.")
    _add_loop_options(r, "rows", str(DEFAULT_CONCURRENCY["index"]))
    r.set_defaults(func=cmd_run, is_async=True)

    w = sub.add_parser("dedup", parents=[common], help="run the dedup worker (candidates, scoring, flags, clusters)",
                       description="Take indexed records from the dedup queue, look up candidates in the index, "
                                   "score each pair per field, and write duplicate / potential_duplicate flags and "
                                   "clusters to PostgreSQL. Needs [dedup] enabled = true so the indexer queues "
                                   "records. Several workers may run side by side. Waits for PostgreSQL and the "
                                   "index at start, like run. While the queue is idle it sweeps the table: "
                                   "up to [dedup] sweep_per_s records a second (default 20; 0: off) are "
                                   "processed again, a pass after another until a pass sees no change (then it rests until "
                                   "the table changes), so that the few flags that depended on the "
                                   "order records arrived in (the candidate cap, exhaustive_below) become "
                                   "those of a clean pass without --requeue.")
    _add_loop_options(w, "records", str(DEFAULT_CONCURRENCY["dedup"]))
    w.add_argument("--requeue", action="store_true",
                   help="first put every indexed record of the table on the dedup queue, then run: a pass "
                        "over the whole table, after a change of [dedup] or [scoring] settings, or to bring "
                        "the few flags that depended on the order records arrived in (the candidate cap) "
                        "back to those of a clean pass at once (the sweep does it slowly)")
    w.set_defaults(func=cmd_dedup, is_async=True)

    g = sub.add_parser("grant-role", parents=[common], help="create/grant the daemon's least-privilege role",
                       description="Create ROLE (LOGIN) if missing and grant it SELECT on the tracked table and "
                                   "read/write on the nearsync schema's tables and sequences, nothing else. "
                                   "The password comes from $NEARSYNC_ROLE_PASSWORD (never logged). Run as the "
                                   "owner of the schema; then run the daemon with a DSN for ROLE.")
    g.add_argument("role", help="role name")
    g.set_defaults(func=cmd_grant_role)

    s = sub.add_parser("status", parents=[common],
                       help="lag, pending changes, dead letters, indexed count, the dedup sweep's progress")
    s.add_argument("--backend", choices=["postgres", "elasticsearch", "opensearch"])
    s.set_defaults(func=cmd_status, is_async=True)

    x = sub.add_parser("reindex", parents=[common], help="full rebuild of the index (resumable), or verify/repair",
                       description="Rebuild the index from the table by keyset pagination, with a progress bar. "
                                   "Interrupted runs resume from the last checkpointed key (--restart to start "
                                   "over). Changes made meanwhile are not lost. On elasticsearch/opensearch "
                                   "it builds a new index version <alias>_v{N} while running daemons "
                                   "dual-write to it, then swaps the alias atomically and keeps "
                                   "index.keep_versions versions (--rollback goes back one). With [dedup] "
                                   "enabled, a full rebuild ends by building the corpus snapshot the dedup "
                                   "worker uses (as nearsync rarity refresh; --no-snapshot skips it). --verify "
                                   "reports drift (exit 1 if any); --repair fixes it.")
    x.add_argument("--verify", action="store_true", help="compare index and table, report drift")
    x.add_argument("--rollback", action="store_true",
                   help="search backends: point the alias back at the previous kept version and catch it up")
    x.add_argument("--repair", action="store_true", help="verify, then fix the drift")
    x.add_argument("--sample", type=positive_int, default=200, help="documents compared field by field (verify)")
    x.add_argument("--page-size", type=positive_int, default=5000, help="rows per page (default 5000)")
    x.add_argument("--restart", action="store_true", help="ignore a checkpoint and start over")
    x.add_argument("--from-scratch", action="store_true", help="clear the table's documents first")
    x.add_argument("--no-progress", action="store_true", help="no progress bar")
    x.add_argument("--no-snapshot", action="store_true",
                   help="do not build the corpus snapshot after the rebuild (by default it is built when "
                        "[dedup] enabled and the worker uses one: nearsync rarity refresh)")
    x.add_argument("--backend", choices=["postgres", "elasticsearch", "opensearch"])
    x.set_defaults(func=cmd_reindex, is_async=True, progress_bar=True)

    y = sub.add_parser("rarity", parents=[common],
                       help="build the corpus snapshot (title-word rarity, large key blocks) the dedup worker uses",
                       description="refresh: count every indexed document's title words (document frequency, "
                                   "with the scorer's own tokenisation) and candidate-key blocks (documents of a "
                                   "scope holding a key) and store the counts as the table's new active snapshot "
                                   "(nearsync.rarity_snapshots). The dedup worker then weighs title words by "
                                   "their rarity in it (IDF; [dedup] rarity, default 0.25 of the title's "
                                   "similarity, 0 = off) and leaves the keys of blocks larger than [dedup] "
                                   "max_block (default 500, 0 = off) out of its candidate lookups (block "
                                   "purging: common word pairs that name hundreds of products); it picks up a "
                                   "new snapshot at its next batch. Run it after a bulk load and then now and "
                                   "then (daily, or when the table has grown by a tenth). A new snapshot changes "
                                   "scores and candidates, as a signature change does: --requeue puts every "
                                   "indexed record on the dedup queue so the whole table is deduplicated with it.")
    y.add_argument("action", choices=["refresh"])
    y.add_argument("--requeue", action="store_true", help="also queue every indexed record for the dedup worker")
    y.add_argument("--no-progress", action="store_true", help="no progress bar")
    y.add_argument("--backend", choices=["postgres", "elasticsearch", "opensearch"])
    y.set_defaults(func=cmd_rarity, is_async=True, progress_bar=True)

    d = sub.add_parser("deadletter", parents=[common], help="list, retry or purge dead letters")
    d.add_argument("action", choices=["list", "retry", "purge"])
    d.add_argument("ids", nargs="*", type=int, help="dead-letter ids (default: all); an id that names no dead "
                   "letter is reported on stderr and the exit code is 1, the others are retried or purged")
    d.add_argument("--limit", type=positive_int, default=100, help="most dead letters listed (default 100)")
    d.set_defaults(func=cmd_deadletter, is_async=True)

    demo = sub.add_parser("demo", parents=[debug],
                          help="run the whole pipeline on a throwaway PostgreSQL and real data",
                          description="Starts a throwaway PostgreSQL (or uses --dsn), migrates, loads the Abt-Buy "
                                      "listings from ../shared/data/abt-buy (or generated ads when absent), runs "
                                      "the daemon, applies live inserts/updates/deletes and prints what reached "
                                      "the index.")
    demo.add_argument("--data", help="data directory (default: ../shared/data beside the checkout)")
    demo.add_argument("--limit", type=int, help="load at most this many listings per shop")
    demo.add_argument("--dsn", help="use this database instead of a throwaway one (its ads table is replaced)")
    demo.add_argument("--backend", choices=["postgres", "elasticsearch", "opensearch"], default=None)
    demo.add_argument("--config", help=argparse.SUPPRESS)
    demo.set_defaults(func=cmd_demo)

    ev = sub.add_parser("evaluate", parents=[debug], help="precision/recall/F1 of the real pipeline on a labelled data set",
                        description="Load labelled records into a throwaway PostgreSQL, run the real indexing "
                                    "daemon and dedup worker with the settings nearsync dedup would use (the "
                                    "--profile, then --config on top), and print JSON: the profile and every "
                                    "effective setting; pair precision/recall/F1 for duplicate and "
                                    "duplicate+potential_duplicate, counted as pairs inside clusters and as record -> "
                                    "original (what a moderator sees); candidate recall (share of true pairs ever "
                                    "compared) and candidates per record; B-cubed and adjusted Rand index of the "
                                    "clusters; wall time; three baselines side by side. Without --records: the "
                                    "shipped Abt-Buy data set (each shop a source; profile products unless "
                                    "--profile says otherwise).",
                        epilog="Example: nearsync evaluate --records Abt.csv --records Buy.csv --pairs map.csv "
                               "--map title=name,body=description,price=price --encoding cp1252 "
                               "--source-column @file --out /tmp/eval",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ev.add_argument("--records", action="append", metavar="CSV", help="records CSV (repeat for several files)")
    ev.add_argument("--pairs", metavar="CSV", help="true pairs CSV: two id columns, header first; a pair naming "
                    "an id the records lack is left out and counted (true_pairs_outside_records), and none "
                    "left is an error")
    ev.add_argument("--map", help="field=column list, e.g. title=name,body=description,price=price; a field that "
                                  "is no role (authors=authors,year=year) is stored, and scored when --config "
                                  "gives it a metric ([dedup.fields.year] metric = \"numeric\")")
    ev.add_argument("--id", default="id", help="id column (default id)")
    ev.add_argument("--encoding", default="utf-8", help="CSV encoding (e.g. cp1252)")
    ev.add_argument("--delimiter", default=",", help="CSV field separator of the records and pairs files "
                                                     "(default ','; DBLP-ACM uses '%%')")
    ev.add_argument("--source-column", help="column naming each record's source/feed, or @file for the file name; "
                                            "adds cross-source figures and assumes each source lists an item once")
    ev.add_argument("--out", metavar="DIR", help="write links.csv, false_positives.csv, false_negatives.csv")
    ev.add_argument("--profile", choices=list(PROFILES), default=None,
                    help="the dedup profile to measure (default: [dedup] profile of --config, else classified, the "
                         "daemon's defaults: candidates within one user's ads when user is mapped); products: "
                         "listings from independent shops (global scope, model-number keys, body and price as "
                         "positive evidence)")
    ev.add_argument("--config", metavar="FILE", help="TOML settings file; its [signatures] / [dedup] apply on top "
                                                     "of the profile, as for nearsync dedup, and its [index] "
                                                     "options (url, candidate_store, ...) to the index; its "
                                                     "[index] backend when --backend is not given")
    ev.add_argument("--dsn", help="use this (empty) database instead of a throwaway one")
    ev.add_argument("--backend", choices=["postgres", "elasticsearch", "opensearch"])
    ev.add_argument("--no-baselines", action="store_true", help="skip the three baselines")
    ev.add_argument("--json-only", action="store_true", help="no progress line (it goes to stderr; stdout is the JSON report)")
    ev.add_argument("--feedback", metavar="OUT.csv",
                    help="instead: export moderators' confirmed/dismissed pairs from the --dsn database as labelled "
                         "pairs (a, b, label 1/0, decided_by, decided_at, score)")
    ev.set_defaults(func=cmd_evaluate)

    sv = sub.add_parser("serve", parents=[common], help="HTTP service: check API, result-set dedup, duplicates queue",
                        description="Serve POST /v1/check (would this ad be flagged?), POST /v1/dedup-set "
                                    "(near-duplicate groups in a ranked set), the moderators' duplicates queue at "
                                    "/moderation (people sign in at /login with their key) and the OpenAPI "
                                    "description at /openapi.json. API keys come from $NEARSYNC_API_KEY "
                                    "(\"secret\" or \"name:secret,name2:secret2\", one per moderator), checked in "
                                    "the X-API-Key header or exchanged for a session cookie at /login. Binds "
                                    "127.0.0.1; another address needs keys (or --insecure).",
                        epilog="Example: curl -s -X POST localhost:8000/v1/check -H 'Content-Type: application/json' "
                               "-d '{\"title\": \"Sony Bravia 40 inch TV\", \"body\": \"...\", \"price\": 250, "
                               "\"user\": \"u1\"}'")
    sv.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    sv.add_argument("--backend", choices=["postgres", "elasticsearch", "opensearch"], help="index backend")
    sv.add_argument("--max-body-bytes", type=int, default=1 << 20, help="largest request body (default 1 MiB)")
    sv.add_argument("--reject-unknown", action="store_true", help="422 for fields that are no configured role "
                                                                  "(default: ignore them)")
    sv.add_argument("--api-key", help="API key(s) (prefer $NEARSYNC_API_KEY: flags show in the process list)")
    sv.add_argument("--max-set", type=int, default=200, help="most items per /v1/dedup-set request (default 200)")
    sv.add_argument("--max-matches", type=int, default=5, help="most matches per /v1/check answer (default 5)")
    sv.add_argument("--cache-size", type=int, default=200_000, help="signatures kept in the LRU cache")
    sv.add_argument("--cache-ttl", type=float, default=10.0,
                    help="seconds a cached signature is trusted for an id sent without a version (default 10)")
    sv.add_argument("--access-log", action="store_true", help="log every request (never the API key)")
    sv.add_argument("--insecure", action="store_true",
                    help="allow a non-loopback --host without API keys (an open service: anyone who reaches it "
                         "can decide flags)")
    sv.add_argument("--allowed-host", action="append", metavar="NAME",
                    help="a Host header value to answer besides localhost/127.0.0.1/::1 and --host (repeatable; "
                         "also $NEARSYNC_ALLOWED_HOSTS, comma-separated; *.example.com patterns allowed)")
    sv.add_argument("--secure-cookies", action="store_true",
                    help="mark the session cookie Secure (serve behind HTTPS)")
    sv.set_defaults(func=cmd_serve)

    cmp = sub.add_parser(
        "compare", parents=[debug], help="score two records as the dedup worker would, and say why",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Score two records offline, as the dedup worker scores a candidate pair: the signatures\n"
                    "the indexer would compute, the profile's and the settings file's fields, weights and\n"
                    "thresholds. Prints the score, the flag it would get, the moderator's summary and each\n"
                    "field's metric, weight and similarity. No database is needed; token rarity and the\n"
                    "common-code rule, which need the corpus snapshot of an indexed table, are left out.",
        epilog="example:\n  nearsync compare '{\"title\": \"Galaxy S21 128GB\", \"price\": 400}' "
               "'{\"title\": \"Galaxy S21+ 128GB\", \"price\": 450}'\n"
               "  nearsync compare @a.json @b.json --profile products --json\n"
               "  nearsync compare --ids 1042 1187 --config nearsync.toml")
    cmp.add_argument("a", metavar="A", help="the earlier record: a JSON object of its fields by role (title, body, "
                                            "price, lat, lon, user, category, ...), inline or @FILE")
    cmp.add_argument("b", metavar="B", help="the other record, the same way")
    cmp.add_argument("--ids", action="store_true",
                     help="A and B are record ids of the tracked table: score their indexed documents with the "
                          "table's corpus snapshot, exactly as the dedup worker does now (needs the database)")
    cmp.add_argument("--config", metavar="FILE", help="TOML settings file (default: $NEARSYNC_CONFIG)")
    cmp.add_argument("--dsn", help="PostgreSQL DSN, with --ids (default: $NEARSYNC_DSN or [database] dsn)")
    cmp.add_argument("--profile", choices=list(PROFILES), help="dedup profile (default: [dedup] profile, or classified)")
    cmp.add_argument("--json", action="store_true", help="print the result as JSON")
    cmp.set_defaults(func=cmd_compare)

    lsh = sub.add_parser("lsh", parents=[debug], help="print the LSH band/row choice and its S-curve for a threshold")
    lsh.add_argument("--threshold", type=open_fraction, default=None,
                     help="target Jaccard similarity, 0-1 (default: signatures.lsh.threshold's default, 0.6)")
    lsh.add_argument("--num-perm", type=positive_int, default=128, help="MinHash permutations (default 128)")
    lsh.set_defaults(func=cmd_lsh)
    return p


_NOT_MIGRATED = (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName, psycopg.errors.UndefinedFunction)
"""Errors of a statement on nearsync's tables that say the database was never (fully) migrated."""

_CANNOT_LISTEN = (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES)
"""``OSError`` numbers of a server socket that cannot be bound (the metrics port)."""


def _first_line(e: BaseException) -> str:
    """The first non-empty line of ``str(e)`` with any DSN password redacted (the type name if empty)."""
    text = str(e).strip()
    return redact_dsn(text.splitlines()[0] if text else type(e).__name__)


def _causes(e: BaseException) -> list[BaseException]:
    """``e`` and what it wraps, outermost first: exception groups' members, ``__cause__``, the
    DB-API error of a SQLAlchemy error (``orig``), ``__context__`` (unless suppressed)."""
    out: list[BaseException] = []
    todo = [e]
    while todo:
        x = todo.pop(0)
        if x is None or any(x is y for y in out):
            continue
        out.append(x)
        todo += list(getattr(x, "exceptions", ()) if isinstance(x, BaseExceptionGroup) else ())
        todo += [x.__cause__, getattr(x, "orig", None), None if x.__suppress_context__ else x.__context__]
    return out


def exit_status(e: BaseException) -> tuple[int, str]:
    """The exit code and the one line (without the ``nearsync:`` prefix) for a failed command.

    The first exception of :func:`_causes` of a known kind decides: ConfigError → 2; SchemaError,
    or a missing nearsync table, schema or function → 3; a database that cannot be reached
    (psycopg.OperationalError, also inside a SQLAlchemy error; a throwaway server that would not
    start), an index that cannot be reached (TransientIndexError), or a port that cannot be listened
    on → 4. Anything else is unexpected → 1, with its type. Passwords in DSNs are redacted.

    Args:
        e: the exception that ended the command.
    Returns:
        ``(exit code, message)``.
    """
    for x in _causes(e):
        if isinstance(x, ConfigError):
            return EXIT_CONFIG, str(x)
        if isinstance(x, SchemaError):
            return EXIT_SCHEMA, str(x)
        if isinstance(x, _NOT_MIGRATED):
            return EXIT_SCHEMA, f"the database is not ready ({_first_line(x)}): run `nearsync migrate` first"
        if isinstance(x, (psycopg.OperationalError, PgServerError)):
            return EXIT_UNREACHABLE, f"cannot reach the database: {_first_line(x)}"
        if isinstance(x, TransientIndexError):
            return EXIT_UNREACHABLE, f"cannot reach the index: {_first_line(x)}"
        if isinstance(x, OSError) and x.errno in _CANNOT_LISTEN:
            return EXIT_UNREACHABLE, f"cannot listen: {_first_line(x)}"
    return EXIT_PROBLEM, f"unexpected error: {type(e).__name__}: {_first_line(e)} (--debug shows the traceback)"


def log_level(args: argparse.Namespace) -> str:
    """The log level of a parsed command line: ``--log-level`` if given; else ``"warning"`` for a
    command that draws a progress bar (``reindex``, ``rarity refresh``: ``progress_bar`` in its
    defaults) on a terminal without ``--no-progress``, where the bar shows the progress and the
    per-batch info lines would only scroll it away (they still go to a pipe or the journal); else
    ``"info"``."""
    if getattr(args, "log_level", None):
        return str(args.log_level)
    bar = getattr(args, "progress_bar", False) and not getattr(args, "no_progress", False)
    return "warning" if bar and sys.stderr.isatty() else "info"


def _stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (``| head`` that exited): polled, the
    write end of such a pipe reports an error or a hang-up. Then it is pointed at ``/dev/null``, so
    that the interpreter's own flush at exit does not fail again (the recipe of Python's ``signal``
    module documentation, "Note on SIGPIPE"). False for anything else (a file, a terminal, a pipe
    still read) and when it cannot tell."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        gone = any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor (captured output), or no poll()
        return False
    if gone:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
    return gone


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``nearsync`` console script; returns the exit code (see the module
    docstring). A failure prints one line, ``nearsync: <problem>``, on stderr (with ``--debug``, the
    traceback first); argparse usage errors exit 2 by themselves."""
    args = build_parser().parse_args(argv)
    args.log_level = log_level(args)
    configure_logging(args.log_level)
    func: Callable[[argparse.Namespace], Any] = args.func
    try:
        if getattr(args, "is_async", False):
            coro: Coroutine[Any, Any, int] = func(args)
            return asyncio.run(coro)
        return int(func(args))
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - every failure ends as one line and a documented code
        if isinstance(e, BrokenPipeError) and _stdout_closed():  # ``nearsync ... | head``: quiet, as cat is
            return 141
        code, message = exit_status(e)
        if getattr(args, "debug", False):
            traceback.print_exc(file=sys.stderr)
        print(f"nearsync: {message}", file=sys.stderr)
        return code


def console() -> int:
    """Entry point of the ``nearsync`` console script and of ``python -m daemon``: :func:`main`
    (returns its exit code), with the heap frozen for the interpreter's shutdown
    (:func:`daemon.heap.freeze_for_exit`: seconds saved at the end of a large ``evaluate``)."""
    return heap.freeze_for_exit(main())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(console())
