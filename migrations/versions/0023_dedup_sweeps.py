"""The dedup worker's sweep: a cursor per table over the live records, re-examined while idle.

Revision ID: 0023
Revises: 0022
"""

from alembic import op

from daemon.db.queries import script

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """``sql/migrations/dedup_sweeps.sql``: ``nearsync.dedup_sweeps`` (table, the last record id
    handed out, passes completed, when the pass started, the last pass's duration), which
    :mod:`daemon.dedup.sweep` advances. A new empty table: no rewrite."""
    op.execute(script("dedup_sweeps"))


def downgrade(settings=None) -> None:
    """``sql/migrations/dedup_sweeps_down.sql``: drop the table."""
    op.execute(script("dedup_sweeps_down"))
