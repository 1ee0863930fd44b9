"""The MinHash signature in a column of its own; lz4 compression of the document jsonb.

Revision ID: 0009
Revises: 0008
"""

from alembic import op

from daemon.db.queries import script

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Add ``nearsync.documents.minhash`` and compress with lz4 where available (``sql/migrations/documents_minhash.sql``)."""
    op.execute(script("documents_minhash"))


def downgrade(settings=None) -> None:
    """Fold the MinHash back into the signatures and drop it (``sql/migrations/documents_minhash_down.sql``)."""
    op.execute(script("documents_minhash_down"))
