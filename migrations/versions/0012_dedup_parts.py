"""The part of the link graph each linked record was last clustered in (``nearsync.dedup_parts``).

Revision ID: 0012
Revises: 0011
"""

from alembic import op

from daemon.db.queries import script

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Create ``nearsync.dedup_parts`` (``sql/migrations/dedup_parts.sql``), empty. Components up
    to ``max_component`` records need nothing more (each is one part); a component over it is cut
    by the score ladder from its next change on (see docs/operations.md, "Upgrading")."""
    op.execute(script("dedup_parts"))


def downgrade(settings=None) -> None:
    """Drop it (``sql/migrations/dedup_parts_down.sql``)."""
    op.execute(script("dedup_parts_down"))
