"""Moderators' decisions on flagged pairs.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

from daemon.db.queries import script

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Create ``nearsync.pair_decisions`` (``sql/migrations/schema_decisions.sql``)."""
    op.execute(script("schema_decisions"))


def downgrade(settings=None) -> None:
    """Drop it (``sql/migrations/schema_decisions_down.sql``)."""
    op.execute(script("schema_decisions_down"))
