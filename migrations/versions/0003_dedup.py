"""Dedup worker tables: scored links, duplicate flags, clusters, and the moderators' view.

Revision ID: 0003
Revises: 0002
"""

from alembic import op

from daemon.db.queries import script

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Create the dedup tables and the ``nearsync.flagged_records`` view for the source table."""
    op.execute(script("schema_dedup"))
    if settings is not None:
        from daemon.ops.migrate import create_flag_view

        create_flag_view(op.get_bind().connection.driver_connection, settings.source)


def downgrade(settings=None) -> None:
    """Drop the dedup tables and view (``sql/migrations/schema_dedup_down.sql``)."""
    op.execute(script("schema_dedup_down"))
