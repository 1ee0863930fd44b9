"""Candidate keys no longer stored twice: ``nearsync.documents.keys`` is NULL when they are the signature's own.

Revision ID: 0013
Revises: 0012
"""

from alembic import op

from daemon.db.queries import script

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Nothing to convert (``sql/migrations/keys_from_signature.sql`` only documents the rule): keys
    stored by older code stay valid, and documents written from now on leave ``keys`` NULL when the
    PostgreSQL backend can rebuild them from the signature (``daemon.backends.pg_encoding.keys_of``)."""
    op.execute(script("keys_from_signature"))


def downgrade(settings=None) -> None:
    """Write the keys back into every signed document that left them NULL, as older code reads them
    (``sql/migrations/keys_from_signature_down.sql``)."""
    op.execute(script("keys_from_signature_down"))
