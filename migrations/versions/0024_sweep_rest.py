"""The dedup sweep rests on a settled table: a flag per table for a change since the pass started.

Revision ID: 0024
Revises: 0023
"""

from alembic import op

from daemon.db.queries import script

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade(settings=None) -> None:
    """``sql/migrations/sweep_rest.sql``: ``nearsync.dedup_sweeps`` gains ``changed`` (something the
    flags depend on changed since the current pass started; true for existing rows, so a sweep in
    progress completes a pass before it rests) and ``settled`` (the last completed pass saw no
    change). Two columns with constant defaults: no rewrite."""
    op.execute(script("sweep_rest"))


def downgrade(settings=None) -> None:
    """``sql/migrations/sweep_rest_down.sql``: drop the two columns (the sweep of 0023 never rests)."""
    op.execute(script("sweep_rest_down"))
