"""The identifier lists of each signed document in a column of their own, for the dedup worker's
lead-field screen.

Revision ID: 0022
Revises: 0021
"""

from alembic import op

from daemon.db.queries import script

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """``sql/migrations/document_identifiers.sql``: ``nearsync.documents.identifiers`` (jsonb: the
    signature's ``models``, ``phones``, ``emails`` and ``title_codes``), which the PostgreSQL
    backend writes with each document and reads for a candidate screen instead of de-TOASTing the
    signature. NULL for the documents stored before, which are screened from their signature as
    before until they are written again. A catalogue change (instant, no rewrite)."""
    op.execute(script("document_identifiers"))


def downgrade(settings=None) -> None:
    """``sql/migrations/document_identifiers_down.sql``: drop the column."""
    op.execute(script("document_identifiers_down"))
