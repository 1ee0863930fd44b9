"""Alembic environment for nearsync: connects with psycopg 3 to the configured database.

Settings come from ``config.attributes["settings"]`` when run by ``nearsync migrate``, else from
``NEARSYNC_CONFIG`` / ``NEARSYNC_DSN`` (plain ``alembic`` runs). The version table is
``public.nearsync_alembic_version`` so it neither clashes with an application's own Alembic table
nor disappears with the ``nearsync`` schema on a full downgrade.
"""

from __future__ import annotations

import psycopg
from alembic import context
from sqlalchemy import create_engine, pool

from daemon.config import load_settings

config = context.config
settings = config.attributes.get("settings") or load_settings()
dsn = settings.require_dsn()

engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=pool.NullPool)
with engine.connect() as connection:
    context.configure(connection=connection, version_table="nearsync_alembic_version",
                      transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations(settings=settings)
engine.dispose()
