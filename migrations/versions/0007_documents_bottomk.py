"""The bottom-k sketch in a column of its own.

Revision ID: 0007
Revises: 0006
"""

from alembic import op

from daemon.db.queries import script

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Add ``nearsync.documents.bottomk`` (``sql/migrations/documents_bottomk.sql``)."""
    op.execute(script("documents_bottomk"))


def downgrade(settings=None) -> None:
    """Fold the sketches back into the signatures and drop it (``sql/migrations/documents_bottomk_down.sql``)."""
    op.execute(script("documents_bottomk_down"))
