"""Versioned document-frequency snapshots of the title words (``nearsync.rarity_snapshots``).

Revision ID: 0014
Revises: 0013
"""

from alembic import op

from daemon.db.queries import script

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Create ``nearsync.rarity_snapshots`` (``sql/migrations/rarity_snapshots.sql``), empty: until
    ``nearsync rarity refresh`` builds a snapshot, scores are exactly those of 0013 (see
    docs/operations.md, "Token rarity")."""
    op.execute(script("rarity_snapshots"))


def downgrade(settings=None) -> None:
    """Drop it (``sql/migrations/rarity_snapshots_down.sql``)."""
    op.execute(script("rarity_snapshots_down"))
