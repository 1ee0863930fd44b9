"""Candidate-key lookup index on (key, table_name) including record_id.

Revision ID: 0005
Revises: 0004
"""

from alembic import op

from daemon.db.queries import script

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Replace the key index (``sql/migrations/keys_lookup_index.sql``)."""
    op.execute(script("keys_lookup_index"))


def downgrade(settings=None) -> None:
    """Restore the single-column key index (``sql/migrations/keys_lookup_index_down.sql``)."""
    op.execute(script("keys_lookup_index_down"))
