"""A btree index of the index table's live documents by scope, for the exhaustive-scope count.

Revision ID: 0017
Revises: 0016
"""

from alembic import op

from daemon.db.queries import script

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Create ``nearsync.documents_scope`` on ``(table_name, scope) WHERE NOT deleted``
    (``sql/migrations/documents_scope_index.sql``): the dedup worker's count of a scope's documents
    (``scope_members``) stops after ``exhaustive_below`` of them instead of reading the scope's whole
    GIN posting list. Builds the index in the migration's transaction (writes to the index table wait
    for it: seconds per million documents). Nothing to reindex."""
    op.execute(script("documents_scope_index"))


def downgrade(settings=None) -> None:
    """Drop the index (``sql/migrations/documents_scope_index_down.sql``)."""
    op.execute(script("documents_scope_index_down"))
