"""The tracked source table: its id type, the columns to load, and rows turned into field values.

Identifiers come from configuration and are always quoted with ``sql.Identifier``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from daemon.config import SourceSettings
from daemon.errors import ConfigError, NearsyncError
from daemon.db.migrations import head_revision_id
from daemon.db.queries import query

_INT_TYPES = {"int2", "int4", "int8"}
_TEXT_TYPES = {"text", "varchar", "bpchar"}


class SchemaError(NearsyncError):
    """The database is not ready: a missing table, column or migration. The message says which."""


@dataclass(frozen=True)
class SourceTable:
    """A validated view of the tracked table.

    Attributes:
        settings: the ``[source]`` settings.
        id_kind: ``"int"``, ``"text"`` or ``"uuid"``: how text record ids are turned back into keys.
    """

    settings: SourceSettings
    id_kind: str

    @property
    def name(self) -> str:
        """``schema.table`` (the name used in tracking rows and documents)."""
        return self.settings.qualified

    @property
    def ident(self) -> sql.Identifier:
        """The quoted table identifier."""
        return sql.Identifier(self.settings.schema, self.settings.table)

    @property
    def id_ident(self) -> sql.Identifier:
        """The quoted id column."""
        return sql.Identifier(self.settings.id_column)

    def id_converter(self) -> Callable[[str], Any]:
        """A function from text record id to a key value of the column's type."""
        return {"int": int, "uuid": uuid.UUID, "text": str}[self.id_kind]

    def convert_ids(self, ids: Sequence[str]) -> list[Any]:
        """Text ids -> typed keys (for ``= ANY(%s)`` with index use)."""
        conv = self.id_converter()
        return [conv(i) for i in ids]

    def load_columns(self) -> list[str]:
        """Columns read per changed row: the id, mapped fields and the active column, deduplicated."""
        s = self.settings
        cols = [s.id_column, *s.fields.values()]
        if s.active_column:
            cols.append(s.active_column)
        return list(dict.fromkeys(cols))

    def formatted(self, name: str) -> sql.Composed:
        """The named query ``name`` with this table's ``{table}``, ``{id}`` and ``{columns}`` filled in."""
        return query(name).format(
            table=self.ident,
            id=self.id_ident,
            columns=sql.SQL(", ").join(sql.Identifier(c) for c in self.load_columns()),
        )

    def is_active(self, row: Mapping[str, Any]) -> bool:
        """Whether a loaded row belongs in the index (``active_column`` value in ``active_values``)."""
        s = self.settings
        if not s.active_column:
            return True
        return str(row.get(s.active_column)) in s.active_values

    def fields_of(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Field name -> value for one loaded row, for every mapped field (fixed roles and other
        names alike): JSON-safe (:func:`json_safe`: dates as ISO 8601 text, decimals as floats, a
        non-finite float as None) except for the numeric roles ``price``, ``lat`` and ``lon``,
        whose numbers are kept as they are (decimals as floats, NaN and infinities included), so
        that :func:`daemon.capture.documents.coerce_numbers` can refuse what the check API refuses."""
        return {role: (_number_or_text(row.get(col)) if role in NUMBER_ROLES else json_safe(row.get(col)))
                for role, col in self.settings.fields.items()}


NUMBER_ROLES = ("price", "lat", "lon")
"""Field roles read as numbers (validated by :func:`daemon.capture.documents.coerce_numbers`)."""


def _number_or_text(v: Any) -> Any:
    """A numeric role's column value: numbers (decimals as floats) and text as they are."""
    if isinstance(v, decimal.Decimal):
        return float(v)
    return v if v is None or isinstance(v, (str, bool, int, float)) else str(v)


def json_safe(v: Any) -> Any:
    """One column value as a JSON-serialisable value (see :meth:`SourceTable.fields_of`)."""
    if v is None or isinstance(v, (str, bool, int)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, decimal.Decimal):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    return str(v)


async def inspect_source(conn: psycopg.AsyncConnection[Any], settings: SourceSettings) -> SourceTable:
    """Check that the table and its columns exist and that migrations ran; return a SourceTable.

    Raises:
        SchemaError: missing table or column, or the database is not at the newest nearsync
            migration.
        ConfigError: unsupported id column type (``source.id_column``).
    """
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query("table_exists"), {"name": "nearsync.index_tracking"})
        if not (await cur.fetchone() or {}).get("present"):
            raise SchemaError("nearsync is not installed in this database: run `nearsync migrate` first")
        await cur.execute(query("schema_revision_readable"))
        wanted = head_revision_id()
        found: str | None = wanted  # not checked when the role may not read the version table
        if (await cur.fetchone() or {}).get("readable"):
            await cur.execute(query("schema_revision"))
            found = (await cur.fetchone() or {}).get("version_num")
        if found != wanted:
            raise SchemaError(f"the database's nearsync schema is at migration {found}, this version of nearsync "
                              f"needs {wanted}: run `nearsync migrate` first")
        qualified = str(sql.Identifier(settings.schema, settings.table).as_string(conn))
        await cur.execute(query("table_exists"), {"name": qualified})
        if not (await cur.fetchone() or {}).get("present"):
            raise SchemaError(f"table {settings.qualified} does not exist (source.table / source.schema)")
        await cur.execute(query("column_types"), {"name": qualified})
        types = {r["column_name"]: r["base_type"] for r in await cur.fetchall()}
    return SourceTable(settings, check_columns(settings, types))


def check_columns(settings: SourceSettings, types: Mapping[str, str], *, tracked: bool = False) -> str:
    """Check the table's columns against the ``[source]`` settings that name them.

    Args:
        settings: the ``[source]`` settings. types: column name -> base type name (``int4``,
            ``text``...) as the named query ``column_types`` reads them.
        tracked: also require ``tracked_columns`` (the triggers' columns; ``migrate`` checks them).
    Returns:
        the id kind: ``"int"``, ``"text"`` or ``"uuid"``.
    Raises:
        SchemaError: a missing column, naming the setting that names it (``source.id_column``,
            ``source.fields``, ``source.active_column`` or ``source.tracked_columns``).
        ConfigError: an id column of an unsupported type (``source.id_column``).
    """
    where = f"table {settings.qualified} has no column"
    if settings.id_column not in types:
        raise SchemaError(f"{where} {settings.id_column} (source.id_column)")
    named = [("source.fields", [c for c in settings.fields.values() if c not in types])]
    if settings.active_column and settings.active_column not in types:
        named.append(("source.active_column", [settings.active_column]))
    if tracked:
        named.append(("source.tracked_columns", [c for c in settings.tracked_columns if c not in types]))
    for key, missing in named:
        if missing:
            raise SchemaError(f"{where}(s) {', '.join(dict.fromkeys(missing))} ({key})")
    id_type = types[settings.id_column]
    if id_type in _INT_TYPES:
        return "int"
    if id_type in _TEXT_TYPES:
        return "text"
    if id_type == "uuid":
        return "uuid"
    raise ConfigError("source.id_column", f"type {id_type} is not supported (use an integer, text or uuid key)")


async def load_rows(conn: psycopg.AsyncConnection[Any], table: SourceTable, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Load the rows with the given text ids in one query; returns ``{record_id: row}``.

    Ids that no longer exist are absent from the result (the caller deletes them from the index).
    """
    if not ids:
        return {}
    id_col = table.settings.id_column
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(table.formatted("load_rows"), {"ids": table.convert_ids(ids)})
        return {str(r[id_col]): r for r in await cur.fetchall()}

