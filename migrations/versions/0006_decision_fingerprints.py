"""Content fingerprints on moderators' decisions.

Revision ID: 0006
Revises: 0005
"""

from alembic import op

from daemon.db.queries import script

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Add ``a_fingerprint`` / ``b_fingerprint`` (``sql/migrations/decision_fingerprints.sql``)."""
    op.execute(script("decision_fingerprints"))


def downgrade(settings=None) -> None:
    """Drop them (``sql/migrations/decision_fingerprints_down.sql``)."""
    op.execute(script("decision_fingerprints_down"))
