"""Where nearsync's Alembic migrations live and which revision is the newest, without a database.

Alembic (and SQLAlchemy under it: ~0.25 s of CPU to import) is imported only when the newest
revision is asked for, not with this module: :mod:`daemon.capture.source` imports this module, and
the signature pool's forkserver, which imports the document code, never needs Alembic.
"""

from __future__ import annotations

from pathlib import Path


def migrations_dir() -> Path:
    """The Alembic script directory (source checkout, or ``daemon/_migrations`` in a wheel).

    Returns:
        The directory holding ``env.py`` and ``versions/``.

    Raises:
        FileNotFoundError: neither exists (a broken install).
    """
    here = Path(__file__).resolve().parents[1]  # the daemon package
    for candidate in (here.parent / "migrations", here / "_migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(f"nearsync's migrations/ directory is missing next to {here}")


def head_revision_id() -> str:
    """The newest revision shipped with this version of nearsync (e.g. ``"0009"``), read from the
    migrations directory without a database.

    Raises:
        FileNotFoundError: the migrations directory is missing.
    """
    from alembic.script import ScriptDirectory  # here, not at module level: see the module docstring

    head = ScriptDirectory(str(migrations_dir())).get_current_head()
    assert head is not None
    return head
