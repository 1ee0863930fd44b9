"""The candidate keys in a narrow lookup table of their own, ``nearsync.document_lookup``.

Revision ID: 0020
Revises: 0019
"""

from alembic import op

from daemon.db.queries import script

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """``sql/migrations/document_lookup.sql``: create ``nearsync.document_lookup`` (table, record id,
    version, scope, source, hashed candidate keys of every live signed document; a GIN index on the
    keys, a btree on the scope), copy the keys of the existing documents into it, and drop
    ``nearsync.documents.key_hashes`` with its GIN index and the scope index of 0017. Candidate
    lookups then visit ~0.4 kB rows instead of ~2 kB documents rows. Runs in the migration's
    transaction (writes to the index table wait for it; the time per million documents is in
    docs/operations.md). Nothing to reindex."""
    op.execute(script("document_lookup"))


def downgrade(settings=None) -> None:
    """``sql/migrations/document_lookup_down.sql``: the keys back into ``nearsync.documents.key_hashes``
    with its GIN and scope indexes, and drop the lookup table."""
    op.execute(script("document_lookup_down"))
