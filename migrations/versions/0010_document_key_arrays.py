"""Candidate keys as one ``bigint[]`` per document under a GIN index, instead of one row per key.

Revision ID: 0010
Revises: 0009
"""

from alembic import op

from daemon.db.queries import script

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Move the key rows of ``nearsync.document_keys`` into ``nearsync.documents.key_hashes`` and drop
    the table (``sql/migrations/document_key_arrays.sql``)."""
    op.execute(script("document_key_arrays"))


def downgrade(settings=None) -> None:
    """Put the key arrays back as rows of ``nearsync.document_keys`` and drop the column
    (``sql/migrations/document_key_arrays_down.sql``)."""
    op.execute(script("document_key_arrays_down"))
