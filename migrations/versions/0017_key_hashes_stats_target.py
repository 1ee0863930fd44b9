"""No planner statistics for the index table's candidate-key array (``key_hashes SET STATISTICS 0``).

Revision ID: 0017
Revises: 0016
"""

from alembic import op

from daemon.db.queries import script

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Stop ANALYZE from gathering element statistics of ``nearsync.documents.key_hashes``, which no
    estimate reads since every query compares the array with keys from another row set, not with a
    constant (``sql/migrations/key_hashes_stats_target.sql``): the backend's ANALYZE during and
    after bulk loads, and autovacuum's, cost about a third of what they did. Nothing to reindex."""
    op.execute(script("key_hashes_stats_target"))


def downgrade(settings=None) -> None:
    """Give the column the server's statistics target again (``sql/migrations/key_hashes_stats_target_down.sql``)."""
    op.execute(script("key_hashes_stats_target_down"))
