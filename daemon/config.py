"""Validated settings, read from a TOML file and the environment, checked at start.

Every error names the dotted setting (``ConfigError("daemon.batch_size", ...)``). Secrets (the DSN's
password, API keys) come from the environment (``NEARSYNC_DSN``, ``NEARSYNC_INDEX_API_KEY``, ...)
and are never logged: use :func:`redact_dsn` before printing a DSN.

The file has these tables (all optional; defaults track the reference ``ads`` table)::

    [database]  dsn
    [source]    schema, table, id_column, tracked_columns, create_reference_table,
                active_column, active_values, [source.fields] role = column (a fixed role or
                any other field name, see :func:`check_field_name`)
    [daemon]    mode, window_s, batch_size, poll_interval_s, max_attempts, retry_backoff_s
    [index]     backend, url, ... (backend-specific)
    [signatures] ... (see daemon.signatures.SignatureParams)
    [dedup]      profile, ... (see daemon.profiles, daemon.dedup.settings, daemon.scoring)
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict

from daemon.errors import ConfigError
from daemon.profiles import DEFAULT_PROFILE, apply_profile, profile_name

REFERENCE_COLUMNS = ("user_id", "category", "title", "body", "price", "lat", "lon", "status", "source")
REFERENCE_FIELDS = {
    "user": "user_id",
    "category": "category",
    "title": "title",
    "body": "body",
    "price": "price",
    "lat": "lat",
    "lon": "lon",
    "created_at": "created_at",
    "source": "source",
}
FIELD_ROLES = ("title", "body", "price", "lat", "lon", "user", "category", "group", "created_at", "source")
FIELD_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
"""A field name other than a role of :data:`FIELD_ROLES` (``authors``, ``year``, ``isbn``): lower-case
letters, digits and ``_``, starting with a letter, at most 40 characters (safe as a JSON key, a metric
label and an HTTP field name)."""
RESERVED_FIELD_NAMES = frozenset({
    "id", "models", "phones", "emails", "numbers", "colours", "variants", "price_gap", "location",
    "v", "params", "simhash", "minhash", "bottomk", "bands", "blocks", "geo", "super", "tokens", "text",
})
"""Names a mapped field may not take: ``id`` (the check API's record id), the scorer's own fields
that do not read a column (``models``, ``phones``, ``emails``, ``numbers``, ``colours``,
``variants``, ``price_gap``, ``location``: see :data:`daemon.scoring.config.DEFAULT_FIELDS`) and the keys of a
signature document (``exact`` reads ``sig[name]`` when it is a list, so a field named ``tokens``
would silently compare the signature's tokens instead of the column)."""
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")
MODES = ("realtime", "batch")
BACKENDS = ("postgres", "elasticsearch", "opensearch")


def redact_dsn(dsn: str) -> str:
    """Return ``dsn`` with any password replaced by ``***`` (URI and key=value forms)."""
    dsn = re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", dsn, flags=re.I)


def check_dsn(key: str, dsn: str) -> str:
    """Check that ``dsn`` parses as a libpq connection string or URI (without connecting).

    Args:
        key: the setting or variable it came from, named in the error (``database.dsn``,
            ``NEARSYNC_DSN (database.dsn)``).
        dsn: the connection string (``host=... dbname=...``) or URI (``postgresql://...``).
    Returns:
        ``dsn`` unchanged.
    Raises:
        ConfigError: naming ``key`` when libpq cannot parse it or a port is not a TCP port. The
            message never holds the password: libpq's own words are shown only when the text has
            none.
    """
    try:
        parts = conninfo_to_dict(dsn)
    except ProgrammingError as e:
        secret = re.search(r"password\s*=|://[^/@\s]*:[^/@\s]*@", dsn, flags=re.IGNORECASE)
        why = ("the reason is not shown: the text holds a password" if secret
               else redact_dsn(str(e).strip().splitlines()[0]))
        raise ConfigError(key, f"not a PostgreSQL connection string or URI ({why})") from None
    for port in str(parts.get("port") or "").split(","):
        if port.strip() and not (port.strip().isdigit() and 1 <= int(port) <= 65535):
            raise ConfigError(key, f"port must be a TCP port from 1 to 65535, got {port.strip()!r}")
    return dsn


def check_field_name(key: str, name: Any) -> str:
    """Check the name of a mapped field (``[source.fields]`` key, ``evaluate --map`` role).

    Args:
        key: the setting or option named in the error (``source.fields.authors``, ``--map``).
        name: a role of :data:`FIELD_ROLES`, or another name matching :data:`FIELD_NAME` and not
            in :data:`RESERVED_FIELD_NAMES`.
    Returns:
        ``name`` unchanged.
    Raises:
        ConfigError: naming ``key``: a malformed or reserved name.
    """
    if name in FIELD_ROLES:
        return str(name)
    if not isinstance(name, str) or not FIELD_NAME.match(name):
        raise ConfigError(key, f"field name {name!r} must be a role ({', '.join(FIELD_ROLES)}) or a name of "
                               "lower-case letters, digits and _ starting with a letter, at most 40 characters")
    if name in RESERVED_FIELD_NAMES:
        raise ConfigError(key, f"field name {name!r} is reserved (used by the scorer or the signature: "
                               f"{', '.join(sorted(RESERVED_FIELD_NAMES))}); choose another name")
    return name


def _ident(key: str, value: Any) -> str:
    if not isinstance(value, str) or not _IDENT.match(value):
        raise ConfigError(key, f"must be a plain SQL identifier (letters, digits, _), got {value!r}")
    return value


def _pos_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(key, f"must be a positive integer, got {value!r}")
    return value


def _pos_float(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(key, f"must be a positive number, got {value!r}")
    return float(value)


def _check_keys(prefix: str, d: Mapping[str, Any], allowed: set[str]) -> None:
    if not isinstance(d, Mapping):
        raise ConfigError(prefix, f"must be a table, got {type(d).__name__}")
    for k in d:
        if k not in allowed:
            raise ConfigError(f"{prefix}.{k}", f"unknown setting (allowed: {', '.join(sorted(allowed))})")


@dataclass(frozen=True)
class SourceSettings:
    """The tracked table.

    Attributes:
        schema / table: where the records live (quoted with ``sql.Identifier`` wherever used).
        id_column: primary key column (integer, text or uuid).
        tracked_columns: an UPDATE touching none of these enqueues nothing.
        fields: field name -> column: a fixed role (title, body, price, lat, lon, user, category,
            ...) or any other name (:func:`check_field_name`), stored in the index document and
            scored when ``[dedup.fields.NAME]`` names a metric for it.
        active_column / active_values: rows whose column value is not in ``active_values`` are
            removed from the index (``None`` column: every row is active).
        create_reference_table: let ``migrate`` create the reference ``ads`` table (demo, tests).
    """

    schema: str = "public"
    table: str = "ads"
    id_column: str = "id"
    tracked_columns: tuple[str, ...] = REFERENCE_COLUMNS
    fields: Mapping[str, str] = field(default_factory=lambda: dict(REFERENCE_FIELDS))
    active_column: str | None = "status"
    active_values: tuple[str, ...] = ("active",)
    create_reference_table: bool = False

    @property
    def qualified(self) -> str:
        """``schema.table``, the table's name in tracking rows and index documents."""
        return f"{self.schema}.{self.table}"

    @property
    def custom_fields(self) -> tuple[str, ...]:
        """Mapped field names that are not fixed roles (:data:`FIELD_ROLES`), in mapping order."""
        return tuple(name for name in self.fields if name not in FIELD_ROLES)

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any]) -> SourceSettings:
        """Validate the ``[source]`` table. Raises ConfigError naming the key."""
        p = "source"
        _check_keys(p, d, {"schema", "table", "id_column", "tracked_columns", "fields", "active_column",
                           "active_values", "create_reference_table"})
        out = cls()
        kw: dict[str, Any] = {}
        for k in ("schema", "table", "id_column"):
            if k in d:
                kw[k] = _ident(f"{p}.{k}", d[k])
        if "tracked_columns" in d:
            cols = d["tracked_columns"]
            if not isinstance(cols, list) or not cols:
                raise ConfigError(f"{p}.tracked_columns", "must be a non-empty list of column names")
            kw["tracked_columns"] = tuple(_ident(f"{p}.tracked_columns[{i}]", c) for i, c in enumerate(cols))
        if "fields" in d:
            f = d["fields"]
            if not isinstance(f, Mapping):
                raise ConfigError(f"{p}.fields", f"must be a table, got {type(f).__name__}")
            for name in f:
                check_field_name(f"{p}.fields.{name}", name)
            kw["fields"] = {role: _ident(f"{p}.fields.{role}", col) for role, col in f.items()}
        if "active_column" in d:
            v = d["active_column"]
            kw["active_column"] = None if v in ("", None) else _ident(f"{p}.active_column", v)
        if "active_values" in d:
            v = d["active_values"]
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise ConfigError(f"{p}.active_values", "must be a list of strings")
            kw["active_values"] = tuple(v)
        if "create_reference_table" in d:
            if not isinstance(d["create_reference_table"], bool):
                raise ConfigError(f"{p}.create_reference_table", "must be true or false")
            kw["create_reference_table"] = d["create_reference_table"]
        return replace(out, **kw)


DEFAULT_CONCURRENCY = {"index": 2, "dedup": 2}
"""Batches in flight per process when ``[daemon] concurrency`` is unset.

* dedup worker: it waits on PostgreSQL for about two thirds of a batch, so a second batch in flight
  uses the other core (see README).
* indexing daemon: a batch is claimed, loaded, signed, written and acknowledged in turn, and a
  second batch in flight overlaps one's signing with the other's writes and database waits. Plain
  sync (``bench/bench_cdc.py --signatures off``, 2026-11-23): 100,000 rows 9,736-11,688 rows/s with
  one, 14,741-15,773 with two. Signed (2026-11-27, idle, 2 runs each alternated): a 10,000-row
  transaction 3,534-3,687 against 4,297-4,437 rows/s on the PostgreSQL backend and 1,199-1,738
  against 1,884-2,155 on an osmem-server (``bench_cdc.py --backend opensearch``, 4 runs each); a
  20,000-ad reindex 3,425-3,891 against 3,968-4,057 docs/s. (One was the signed default until
  2026-11-27, measured no better on a busy machine on 2026-11-23.)"""

MAX_TAKEOVERS = 3
"""Default ``[daemon] max_takeovers``: worker stops with a change in hand before it is dead-lettered
as a poison record (:mod:`daemon.capture.poison`). One stop is routine (a deploy, a host restart);
two with the same rows in hand make them suspects, handled alone, so a third stop can only be the
suspect's own doing. 2 would dead-letter innocent records after two unrelated crashes; more only
delays the same outcome by one more crash and restart."""

STALL_TIMEOUT_S = 45.0
"""Default ``[daemon] stall_timeout_s`` (s): longer than any step of a batch takes between two
awaits (scoring one lookup chunk of 200 records, clustering one part: a few seconds on dense
listings), shorter than the 60 s of the systemd units' ``WatchdogSec``, so that the process writes
its stacks (where it hung) before systemd kills it without them."""

MAX_CONCURRENCY = 16
"""Upper bound of ``[daemon] concurrency`` (each batch in flight holds a connection)."""


@dataclass(frozen=True)
class DaemonSettings:
    """How the indexing daemon and the dedup worker batch and retry.

    Attributes:
        mode: ``realtime`` (process as soon as woken, micro-batches) or ``batch`` (gather for
            ``window_s`` seconds, then process everything).
        window_s: batch-mode window in seconds.
        batch_size: rows claimed per micro-batch (realtime) or per chunk (batch).
        poll_interval_s: poll the tracking table this often (s) in case a NOTIFY was missed.
        max_attempts: a record failing this many times goes to the dead-letter table.
        retry_backoff_s: first retry delay (s) for transient errors and failed records; doubles
            per attempt, capped at 30 s for the whole-batch retries.
        concurrency: batches one process keeps in flight (each claims its own rows), so one
            batch's database waits overlap another's CPU work; ``None``: the command's default
            (:data:`DEFAULT_CONCURRENCY`).
        batch_floor / batch_ceiling: bounds (rows) of the adaptive batch size; ``None``:
            ``batch_size // 10`` (the index backend's write size with signatures when it has one,
            see :meth:`for_write_rows`, and at least the signature pool's ``min_parallel``, see
            :func:`daemon.service.build_indexer`) and ``batch_size * 8``.
        batch_target_s: the batch duration (s) the adaptive batch size holds: a slower batch halves
            it, a full batch faster than half of it grows it by half.
        index_chunk_rows: rows per part of a large indexing batch (each part is written as soon as
            it is signed, while the next is signed); ``None``: see :meth:`chunk_rows_for`.
        max_takeovers: a queued change whose worker stopped this many times with it in hand (a
            crash, a kill, the stall watchdog) is dead-lettered as a poison record; from one stop
            fewer it is handled alone (see :mod:`daemon.capture.poison`). At least 2.
        stall_timeout_s: when the process's event loop has not run for this long (s) — a call that
            never returns — every thread's stack is written to stderr and the process exits with
            status 1, so that its supervisor restarts it (:mod:`daemon.capture.watchdog`); 0: off.
        health_max_stall_s: ``/healthz`` fails when the loop has not turned for this long (s).
        ready_max_lag_s: ``/readyz`` fails when the oldest pending change is older than this (s).
        metrics_port: port of ``/metrics``, ``/healthz`` and ``/readyz`` (``None``: not served).
        metrics_host: the address they bind.

    Every key can be set in ``[daemon]``; the environment variables of :data:`DAEMON_ENV` override
    the file, and an invalid value is reported under the variable's name.
    """

    mode: str = "realtime"
    window_s: float = 10.0
    batch_size: int = 500
    poll_interval_s: float = 2.0
    max_attempts: int = 3
    retry_backoff_s: float = 0.2
    concurrency: int | None = None
    batch_floor: int | None = None
    batch_ceiling: int | None = None
    batch_target_s: float = 1.0
    index_chunk_rows: int | None = None
    max_takeovers: int = MAX_TAKEOVERS
    stall_timeout_s: float = STALL_TIMEOUT_S
    health_max_stall_s: float = 60.0
    ready_max_lag_s: float = 60.0
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"

    def batch_bounds(self) -> tuple[int, int]:
        """``(floor, ceiling)`` of the adaptive batch size in rows (ceiling >= floor >= 1)."""
        floor = self.batch_floor or max(1, self.batch_size // 10)
        return floor, max(floor, self.batch_ceiling or self.batch_size * 8)

    def chunk_rows_for(self, *, signed: bool, preferred: int | None = None) -> int:
        """``index_chunk_rows``, or its default: the index backend's ``preferred`` write size for
        signed documents when it has one (``IndexBackend.write_rows``: the search backends' bulk
        request size), else 250 rows signed, 2,500 in plain sync (where a part builds in a few ms
        and smaller parts mostly add round trips: 10,000-row batches 8,076-9,638 rows/s with 250,
        10,547-10,800 with 2,500)."""
        return self.index_chunk_rows or (preferred if signed and preferred else None) or (250 if signed else 2_500)

    def for_write_rows(self, preferred: int | None) -> DaemonSettings:
        """These settings with the batch floor raised to the index backend's ``preferred`` write size
        (``IndexBackend.write_rows``, capped at the ceiling) when ``batch_floor`` is unset, so a
        backlog is written in requests of that size however slow each batch is (a batch over
        ``batch_target_s`` would otherwise halve the batch down to ``batch_size // 10`` rows, and a
        search server would build and merge a small segment for each). Batches of fewer waiting
        rows are not held back: the floor bounds the claim limit, not what a claim must find.

        Returns:
            ``self`` when ``preferred`` is None or ``batch_floor`` is set, else a copy.
        """
        if not preferred or self.batch_floor:
            return self
        return replace(self, batch_floor=min(preferred, self.batch_bounds()[1]))

    def concurrency_for(self, queue: str) -> int:
        """``concurrency``, or the default for ``queue`` (``index`` or ``dedup``) when unset
        (:data:`DEFAULT_CONCURRENCY`)."""
        if self.concurrency:
            return self.concurrency
        return DEFAULT_CONCURRENCY.get(queue, 1)

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any]) -> DaemonSettings:
        """Validate the ``[daemon]`` table. Raises ConfigError naming the key."""
        p = "daemon"
        floats = ("window_s", "poll_interval_s", "retry_backoff_s", "batch_target_s", "health_max_stall_s",
                  "ready_max_lag_s")
        ints = ("batch_size", "max_attempts", "concurrency", "batch_floor", "batch_ceiling", "index_chunk_rows",
                "max_takeovers")
        _check_keys(p, d, {"mode", "metrics_port", "metrics_host", "stall_timeout_s", *floats, *ints})
        kw: dict[str, Any] = {}
        if "mode" in d:
            if d["mode"] not in MODES:
                raise ConfigError(f"{p}.mode", f"must be one of {', '.join(MODES)}, got {d['mode']!r}")
            kw["mode"] = d["mode"]
        for k in floats:
            if k in d:
                kw[k] = _pos_float(f"{p}.{k}", d[k])
        for k in ints:
            if k in d:
                kw[k] = _pos_int(f"{p}.{k}", d[k])
        if kw.get("max_takeovers", 2) < 2:
            raise ConfigError(f"{p}.max_takeovers", f"must be at least 2 (one stop is routine), got {kw['max_takeovers']}")
        if "stall_timeout_s" in d:
            v = d["stall_timeout_s"]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v == 0 or v >= 1):
                raise ConfigError(f"{p}.stall_timeout_s", f"must be 0 (off) or a number of seconds >= 1, got {v!r}")
            kw["stall_timeout_s"] = float(v)
        if kw.get("concurrency", 1) > MAX_CONCURRENCY:
            raise ConfigError(f"{p}.concurrency", f"must be at most {MAX_CONCURRENCY}, got {kw['concurrency']}")
        if "metrics_port" in d:
            port = d["metrics_port"]
            if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
                raise ConfigError(f"{p}.metrics_port", f"must be a TCP port from 1 to 65535, got {port!r}")
            kw["metrics_port"] = port
        if "metrics_host" in d:
            if not isinstance(d["metrics_host"], str) or not d["metrics_host"].strip():
                raise ConfigError(f"{p}.metrics_host", f"must be a host name or address, got {d['metrics_host']!r}")
            kw["metrics_host"] = d["metrics_host"].strip()
        return replace(cls(), **kw)


@dataclass(frozen=True)
class IndexSettings:
    """Which index backend and how to reach it.

    Attributes:
        backend: ``postgres`` (tables in the ``nearsync`` schema of the same database),
            ``elasticsearch`` or ``opensearch``.
        options: backend-specific settings (URL, auth, timeouts, index name), validated by the
            backend itself when it is created.
    """

    backend: str = "postgres"
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any]) -> IndexSettings:
        """Validate the ``[index]`` table. Raises ConfigError naming the key."""
        if not isinstance(d, Mapping):
            raise ConfigError("index", "must be a table")
        backend = d.get("backend", "postgres")
        if backend not in BACKENDS:
            raise ConfigError("index.backend", f"must be one of {', '.join(BACKENDS)}, got {backend!r}")
        return cls(backend=backend, options={k: v for k, v in d.items() if k != "backend"})


@dataclass(frozen=True)
class Settings:
    """All of nearsync's settings. Build with :func:`load_settings`."""

    dsn: str = ""
    source: SourceSettings = field(default_factory=SourceSettings)
    daemon: DaemonSettings = field(default_factory=DaemonSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    signatures: Mapping[str, Any] = field(default_factory=dict)
    dedup: Mapping[str, Any] = field(default_factory=dict)
    profile: str = "classified"
    """The dedup profile (:mod:`daemon.profiles`) ``signatures`` and ``dedup`` were merged over."""

    def require_dsn(self) -> str:
        """The DSN, or ConfigError('database.dsn') naming where to set it."""
        if not self.dsn:
            raise ConfigError("database.dsn", "no database given: pass --dsn, set NEARSYNC_DSN, or set [database] dsn")
        return self.dsn


TOP_LEVEL = {"database", "source", "daemon", "index", "signatures", "dedup"}

DAEMON_ENV = {
    "NEARSYNC_MODE": "mode",
    "NEARSYNC_BATCH_FLOOR": "batch_floor",
    "NEARSYNC_BATCH_CEILING": "batch_ceiling",
    "NEARSYNC_BATCH_TARGET_S": "batch_target_s",
    "NEARSYNC_INDEX_CHUNK_ROWS": "index_chunk_rows",
    "NEARSYNC_HEALTH_MAX_STALL_S": "health_max_stall_s",
    "NEARSYNC_STALL_TIMEOUT_S": "stall_timeout_s",
    "NEARSYNC_MAX_TAKEOVERS": "max_takeovers",
    "NEARSYNC_READY_MAX_LAG_S": "ready_max_lag_s",
    "NEARSYNC_METRICS_PORT": "metrics_port",
    "NEARSYNC_METRICS_HOST": "metrics_host",
}
"""Environment variables that override a ``[daemon]`` key (the variable wins over the file)."""


def _env_value(var: str, key: str, raw: str) -> Any:
    """The typed value of environment variable ``var`` for ``[daemon] key`` (text as given for
    ``mode`` and ``metrics_host``; numbers parsed).

    Raises:
        ConfigError: naming ``var`` and the key when the text is not a number.
    """
    if key in ("mode", "metrics_host"):
        return raw.strip()
    try:
        number = float(raw)
    except ValueError:
        raise ConfigError(f"{var} (daemon.{key})", f"must be a number, got {raw!r}") from None
    return int(number) if number.is_integer() else number


def _daemon_settings(d: Mapping[str, Any], env: Mapping[str, str]) -> DaemonSettings:
    """``[daemon]`` validated with the environment overrides of :data:`DAEMON_ENV` applied.

    Raises:
        ConfigError: an invalid key; a value from the environment is named by its variable.
    """
    if not isinstance(d, Mapping):
        raise ConfigError("daemon", f"must be a table, got {type(d).__name__}")
    merged = dict(d)
    from_env: dict[str, str] = {}
    for var, key in DAEMON_ENV.items():
        raw = env.get(var, "")
        if raw.strip():
            merged[key] = _env_value(var, key, raw)
            from_env[f"daemon.{key}"] = var
    try:
        return DaemonSettings.from_mapping(merged)
    except ConfigError as e:
        if e.key in from_env:
            raise ConfigError(f"{from_env[e.key]} ({e.key})", e.message) from None
        raise


def settings_from_mapping(d: Mapping[str, Any], *, env: Mapping[str, str] | None = None) -> Settings:
    """Validate a whole settings mapping (as parsed from TOML) plus environment overrides.

    Environment: ``NEARSYNC_DSN`` (overrides ``database.dsn``), ``NEARSYNC_BACKEND``, and the
    ``[daemon]`` overrides of :data:`DAEMON_ENV` (``NEARSYNC_MODE``, ``NEARSYNC_METRICS_PORT``, ...).

    Raises:
        ConfigError: naming the first invalid key.
    """
    env = os.environ if env is None else env
    _check_keys("(top level)", d, TOP_LEVEL)
    db = d.get("database", {})
    _check_keys("database", db, {"dsn"})
    dsn = env.get("NEARSYNC_DSN") or db.get("dsn", "")
    if not isinstance(dsn, str):
        raise ConfigError("database.dsn", "must be a string")
    if dsn:
        check_dsn("NEARSYNC_DSN (database.dsn)" if env.get("NEARSYNC_DSN") else "database.dsn", dsn)
    daemon_d = d.get("daemon", {})
    index_d = dict(d.get("index", {}))
    if env.get("NEARSYNC_BACKEND"):
        index_d["backend"] = env["NEARSYNC_BACKEND"]
    signatures, dedup = d.get("signatures", {}), d.get("dedup", {})
    profile = DEFAULT_PROFILE
    if isinstance(signatures, Mapping) and isinstance(dedup, Mapping):
        dedup = dict(dedup)
        profile = profile_name(dedup.pop("profile", None))
        signatures, dedup = apply_profile(profile, signatures, dedup)
    s = Settings(
        dsn=dsn,
        source=SourceSettings.from_mapping(d.get("source", {})),
        daemon=_daemon_settings(daemon_d, env),
        index=IndexSettings.from_mapping(index_d),
        signatures=signatures,
        dedup=dedup,
        profile=profile,
    )
    missing = [c for c in s.source.fields.values() if c not in s.source.tracked_columns and c != "created_at"]
    if missing:
        raise ConfigError("source.tracked_columns", f"must include the columns mapped in source.fields: {missing}")
    return s


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Read settings from ``path`` (or ``NEARSYNC_CONFIG``, or none: defaults) and apply overrides.

    ``overrides`` (``dsn``, ``mode``, ``window_s``, ``batch_size``, ``concurrency``, ``metrics_port``,
    ``backend``, ``profile``: the ``[dedup] profile``) come from command-line flags and
    win over the file and the environment; ``None`` values are ignored.

    Raises:
        ConfigError: unreadable file (key ``config``) or an invalid setting (its key).
    """
    path = path or os.environ.get("NEARSYNC_CONFIG")
    data: dict[str, Any] = {}
    if path:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError("config", f"config file {path} not found") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("config", f"{path} is not valid TOML: {e}") from None
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    if overrides.get("dsn"):
        data.setdefault("database", {})["dsn"] = overrides["dsn"]
    for k in ("mode", "window_s", "batch_size", "concurrency", "metrics_port"):
        if overrides.get(k) is not None:
            data.setdefault("daemon", {})[k] = overrides[k]
    if overrides.get("backend"):
        data.setdefault("index", {})["backend"] = overrides["backend"]
    if overrides.get("profile"):
        data["dedup"] = {**(data.get("dedup") or {}), "profile": overrides["profile"]}
    env = dict(os.environ)
    if overrides.get("dsn"):
        env.pop("NEARSYNC_DSN", None)
    for name, key in (("mode", "NEARSYNC_MODE"), ("backend", "NEARSYNC_BACKEND"),
                      ("metrics_port", "NEARSYNC_METRICS_PORT")):
        if overrides.get(name) is not None:
            env.pop(key, None)
    return settings_from_mapping(data, env=env)


def parse_duration(key: str, text: str) -> float:
    """Parse ``"10s"``, ``"500ms"``, ``"2m"`` or a bare number of seconds into seconds.

    Raises:
        ConfigError: naming ``key`` when the text is not a positive duration.
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m)?\s*", text)
    if not m:
        raise ConfigError(key, f"must be a duration like 10s, 500ms or 2m, got {text!r}")
    value = float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]
    if value <= 0:
        raise ConfigError(key, f"must be positive, got {text!r}")
    return value
