"""The boundary of each record's capped candidate lookup, for the dedup worker.

Revision ID: 0021
Revises: 0020
"""

from alembic import op

from daemon.db.queries import script

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """``sql/migrations/dedup_cap_bounds.sql``: ``nearsync.dedup_cap_bounds`` (table, record id, the
    shared-key count of its capped lookup's last scored candidate and the ids tied at it), which the
    dedup worker writes and reads under its lock to keep a link outside a capped lookup only while
    one end is within the other's cap. Empty at first: until a record is processed again its links
    are kept as before."""
    op.execute(script("dedup_cap_bounds"))


def downgrade(settings=None) -> None:
    """``sql/migrations/dedup_cap_bounds_down.sql``: drop the table."""
    op.execute(script("dedup_cap_bounds_down"))
