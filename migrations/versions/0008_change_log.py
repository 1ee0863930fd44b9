"""The triggers append to an index-free change log; the daemon coalesces it into index_tracking.

Revision ID: 0008
Revises: 0007
"""

from alembic import op

from daemon.db.queries import script

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Create ``nearsync.change_log`` and the ``pending_changes`` view, install the log-appending
    trigger generator and rebuild every tracked table's triggers (``sql/migrations/change_log.sql``)."""
    op.execute(script("trigger_helpers"))
    op.execute(script("change_log"))


def downgrade(settings=None) -> None:
    """Move pending log rows into ``index_tracking``, restore the 0002 trigger generator
    (``sql/migrations/triggers.sql``), rebuild the triggers and drop the log (``sql/migrations/change_log_down.sql``)."""
    op.execute(script("trigger_helpers"))
    op.execute(script("triggers"))
    op.execute(script("change_log_down"))
