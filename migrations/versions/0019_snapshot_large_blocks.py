"""Large candidate-key blocks in the corpus snapshot (block purging).

Revision ID: 0019
Revises: 0018
"""

from alembic import op

from daemon.db.queries import script

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """``sql/migrations/snapshot_large_blocks.sql``: ``nearsync.rarity_snapshots`` gets ``max_block``
    and ``large_blocks`` (the blocks larger than it, packed int64), which ``nearsync rarity refresh``
    fills and the dedup worker's candidate lookups leave out. Existing snapshots get none, so
    nothing changes until the next refresh."""
    op.execute(script("snapshot_large_blocks"))


def downgrade(settings=None) -> None:
    """``sql/migrations/snapshot_large_blocks_down.sql``: drop both columns."""
    op.execute(script("snapshot_large_blocks_down"))
