"""Count worker stops per queued change (``nearsync.index_tracking.takeovers``), for poison records.

Revision ID: 0015
Revises: 0014
"""

from alembic import op

from daemon.db.queries import script

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Add ``takeovers`` (``sql/migrations/tracking_takeovers.sql``), 0 for every queued row: no
    reindex, no requeue (see docs/operations.md, "Poison records")."""
    op.execute(script("tracking_takeovers"))


def downgrade(settings=None) -> None:
    """Drop it (``sql/migrations/tracking_takeovers_down.sql``)."""
    op.execute(script("tracking_takeovers_down"))
