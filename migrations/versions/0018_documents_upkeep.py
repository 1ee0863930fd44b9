"""Cheaper upkeep of the index table: no planner statistics for ``key_hashes``, lz4 for the sketch arrays.

Revision ID: 0018
Revises: 0017
"""

from alembic import op

from daemon.db.queries import script

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """``sql/migrations/documents_upkeep.sql``: stop ANALYZE from gathering element statistics of
    ``nearsync.documents.key_hashes``, which no estimate reads (every query compares the array with
    keys from another row set, not with a constant), so the backend's ANALYZE during and after bulk
    loads, and autovacuum's, cost about a third of what they did; and give ``bottomk`` and
    ``minhash`` lz4 compression, so a write's attempt to compress them (they do not compress)
    gives up sooner. Nothing to reindex."""
    op.execute(script("documents_upkeep"))


def downgrade(settings=None) -> None:
    """``sql/migrations/documents_upkeep_down.sql``: the server's statistics target for
    ``key_hashes`` and the default compression for the sketch arrays again."""
    op.execute(script("documents_upkeep_down"))
