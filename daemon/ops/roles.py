"""A least-privilege PostgreSQL role for the daemon and the worker (``nearsync grant-role NAME``).

The role gets: ``SELECT`` on the tracked table (and ``USAGE`` on its schema); ``SELECT, INSERT,
UPDATE, DELETE`` on every table of the ``nearsync`` schema and ``USAGE, SELECT, UPDATE`` on its
sequences, including those later migrations add (default privileges). Nothing else: it cannot write
the tracked table nor create objects. Migrations keep running as the owner. The grants live in
``sql/queries/roles.sql`` as the function ``nearsync.grant_daemon_role(role, table)``.
"""

from __future__ import annotations

import os

import psycopg
from psycopg import sql

from daemon.config import Settings
from daemon.errors import ConfigError
from daemon.db.queries import query

PASSWORD_ENV = "NEARSYNC_ROLE_PASSWORD"


def grant_role(settings: Settings, role: str, *, password: str | None = None) -> dict[str, object]:
    """Create ``role`` if missing (LOGIN, no other attributes) and grant it the daemon's privileges.

    Args:
        settings: connects with ``settings.dsn`` (an owner of the ``nearsync`` schema and the table).
        role: the role name (any text; quoted as an identifier).
        password: the role's password; default ``$NEARSYNC_ROLE_PASSWORD``; unset: no password is
            set (peer/cert auth). Never logged nor returned.

    Returns:
        ``{"role": role, "created": bool, "password_set": bool, "table": schema.table}``.

    Raises:
        ConfigError: empty role name. psycopg.Error: not allowed (run as the schema owner), or the
        schema is not migrated.
    """
    if not role.strip():
        raise ConfigError("grant-role", "the role name is empty")
    secret = password if password is not None else os.environ.get(PASSWORD_ENV) or None
    ident = sql.Identifier(role)
    with psycopg.connect(settings.require_dsn()) as conn:
        row = conn.execute(query("role_exists"), {"role": role}).fetchone()
        created = not (row and row[0])
        if created:
            conn.execute(query("create_role").format(role=ident))
        if secret is not None:
            conn.execute(query("set_role_password").format(role=ident, password=sql.Literal(secret)))
        conn.execute(query("create_grant_function"))
        conn.execute(query("grant_daemon_role"), {"role": role, "table": settings.source.qualified})
    return {"role": role, "created": created, "password_set": secret is not None, "table": settings.source.qualified}
