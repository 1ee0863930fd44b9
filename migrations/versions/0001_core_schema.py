"""Core schema: tracking table, dead letters, checkpoints, PostgreSQL index tables.

Revision ID: 0001
Revises:
"""

from alembic import op

from daemon.db.queries import script

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Create the ``nearsync`` schema and its tables (``sql/migrations/schema_core.sql``)."""
    op.execute(script("schema_core"))


def downgrade(settings=None) -> None:
    """Drop the ``nearsync`` schema (``sql/migrations/schema_core_down.sql``)."""
    op.execute(script("schema_core_down"))
