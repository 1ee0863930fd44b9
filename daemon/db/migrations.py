"""Where nearsync's Alembic migrations live and which revision is the newest, without a database."""

from __future__ import annotations

from pathlib import Path

from alembic.script import ScriptDirectory


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
    head = ScriptDirectory(str(migrations_dir())).get_current_head()
    assert head is not None
    return head
