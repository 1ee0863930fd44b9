"""The dedup sweep rests on a settled table: a change flag and the pass's chunk counts per table.

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
    progress does not rest before a whole pass after the upgrade), ``pass_no``, ``handed`` and
    ``done`` (the current pass's chunks handed out and reported processed), ``handed_at``, and
    ``resting`` generated from them. The generated column rewrites the table: one row per tracked
    table."""
    op.execute(script("sweep_rest"))


def downgrade(settings=None) -> None:
    """``sql/migrations/sweep_rest_down.sql``: drop the six columns (the sweep of 0023 never rests)."""
    op.execute(script("sweep_rest_down"))
