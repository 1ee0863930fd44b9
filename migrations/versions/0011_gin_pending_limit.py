"""A short pending list for the candidate-key GIN index (``gin_pending_list_limit = 256`` kB).

Revision ID: 0011
Revises: 0010
"""

from alembic import op

from daemon.db.queries import script

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Set the index's pending-list limit (``sql/migrations/gin_pending_limit.sql``): lookups scan
    the pending list whole, so a long one slows every candidate lookup after a bulk load."""
    op.execute(script("gin_pending_limit"))


def downgrade(settings=None) -> None:
    """Reset it to the server's setting (``sql/migrations/gin_pending_limit_down.sql``)."""
    op.execute(script("gin_pending_limit_down"))
