"""Trigger functions, the optional reference ads table, and triggers on the configured table.

Revision ID: 0002
Revises: 0001
"""

from alembic import op
from daemon.db.queries import script

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """Install ``nearsync.attach_table`` (with the helpers of ``sql/migrations/trigger_helpers.sql``)
    and attach the configured source table.

    Creates the reference ``ads`` table first when ``source.create_reference_table`` is true.
    """
    op.execute(script("trigger_helpers"))
    op.execute(script("triggers"))
    if settings is None:
        return
    src = settings.source
    if src.create_reference_table:
        op.execute(script("reference_ads"))
    conn = op.get_bind().connection.driver_connection
    from daemon.ops.migrate import attach_source

    attach_source(conn, src)


def downgrade(settings=None) -> None:
    """Detach every tracked table and drop the trigger functions (``sql/migrations/triggers_down.sql``)."""
    op.execute(script("triggers_down"))
