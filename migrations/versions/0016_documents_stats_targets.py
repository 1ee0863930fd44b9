"""No planner statistics for the index table's payload columns (``SET STATISTICS 0``).

Revision ID: 0016
Revises: 0015
"""

from alembic import op

from daemon.db.queries import script

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Stop ANALYZE from sampling the wide jsonb and array columns of ``nearsync.documents``, which
    no query filters on (``sql/migrations/documents_stats_targets.sql``): every ANALYZE of the
    table, the backend's after a bulk load and autovacuum's, costs a fraction of what it did. Nothing to
    reindex."""
    op.execute(script("documents_stats_targets"))


def downgrade(settings=None) -> None:
    """Give them the server's statistics target again (``sql/migrations/documents_stats_targets_down.sql``)."""
    op.execute(script("documents_stats_targets_down"))
