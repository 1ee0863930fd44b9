"""``nearsync migrate``: Alembic upgrade/downgrade plus re-attaching triggers when configuration changed.

Alembic's version table is ``public.nearsync_alembic_version``. Upgrading to head is idempotent; if
the configured tracked columns differ from what the triggers were built with, the triggers are
re-attached (also idempotent).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, pool

from daemon.capture.source import SchemaError, check_columns
from daemon.config import Settings, SourceSettings
from daemon.db.migrations import head_revision_id, migrations_dir
from daemon.db.queries import query


def alembic_config(settings: Settings) -> Config:
    """An Alembic Config pointing at our migrations with ``settings`` attached for env.py."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["settings"] = settings
    return cfg


def current_revision(settings: Settings) -> str | None:
    """The database's current nearsync revision, or ``None`` when never migrated."""
    dsn = settings.require_dsn()
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": "nearsync_alembic_version"})
            return ctx.get_current_revision()
    finally:
        engine.dispose()


def head_revision(settings: Settings) -> str:
    """The newest revision shipped with this version of nearsync."""
    return head_revision_id()


def upgrade(settings: Settings, revision: str = "head") -> dict[str, Any]:
    """Upgrade to ``revision`` and re-sync triggers with the configuration.

    Returns:
        ``{"from": old_rev, "to": new_rev, "triggers_resynced": bool}``.

    Raises:
        psycopg.OperationalError: database unreachable. ConfigError: no DSN.
        SchemaError: the source table or a column the settings name is missing (checked before
            anything is migrated, unless ``source.create_reference_table`` creates the table).
    """
    if not settings.source.create_reference_table:
        check_source(settings)
    before = current_revision(settings)
    command.upgrade(alembic_config(settings), revision)
    after = current_revision(settings)
    resynced = False
    if after == head_revision(settings) and before == after:
        resynced = sync_triggers(settings)
    return {"from": before, "to": after, "triggers_resynced": resynced}


def check_source(settings: Settings) -> None:
    """Check that the source table and every column the ``[source]`` settings name exist, so that
    ``migrate`` fails before migrating anything rather than halfway (attaching the triggers).

    Raises:
        SchemaError: naming the missing table (``source.schema`` / ``source.table``) or the setting
            of a missing column (see :func:`daemon.capture.source.check_columns`).
        ConfigError: unsupported id column type. psycopg.OperationalError: database unreachable.
    """
    src = settings.source
    with psycopg.connect(settings.require_dsn(), connect_timeout=10) as conn:
        qualified = sql.Identifier(src.schema, src.table).as_string(conn)
        row = conn.execute(query("table_exists"), {"name": qualified}).fetchone()
        if not (row and row[0]):
            raise SchemaError(f"table {src.qualified} does not exist (source.schema / source.table): create it "
                              "first, or set source.create_reference_table = true for the reference ads table")
        types = {r[0]: r[2] for r in conn.execute(query("column_types"), {"name": qualified}).fetchall()}
    check_columns(src, types, tracked=True)


def downgrade(settings: Settings, revision: str = "base") -> dict[str, Any]:
    """Downgrade to ``revision`` (``base`` removes everything nearsync created)."""
    before = current_revision(settings)
    command.downgrade(alembic_config(settings), revision)
    return {"from": before, "to": current_revision(settings)}


def sync_triggers(settings: Settings) -> bool:
    """Re-attach the source table's triggers if its configured columns differ; True if it did."""
    src = settings.source
    with psycopg.connect(settings.require_dsn()) as conn:
        rows = {r[0]: (r[1], list(r[2])) for r in conn.execute(query("tracked_tables")).fetchall()}
        if rows.get(src.qualified) == (src.id_column, list(src.tracked_columns)):
            return False
        attach_source(conn, src)
        create_flag_view(conn, src)
        return True


def attach_source(conn: psycopg.Connection[Any], settings: SourceSettings) -> None:
    """Attach (or re-attach with new columns) the nearsync triggers to the source table.

    Idempotent. Runs in the caller's transaction.
    """
    qualified = sql.Identifier(settings.schema, settings.table).as_string(conn)
    conn.execute(query("attach_table"), {"table": qualified, "id_column": settings.id_column,
                                          "columns": list(settings.tracked_columns)})


def create_flag_view(conn: psycopg.Connection[Any], settings: SourceSettings) -> None:
    """(Re)create ``nearsync.flagged_records``: flags joined to the source rows. Idempotent."""
    qualified = sql.Identifier(settings.schema, settings.table).as_string(conn)
    conn.execute(query("create_flag_view"), {"table": qualified, "id_column": settings.id_column})
