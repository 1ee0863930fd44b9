"""Where nearsync's Alembic migrations live and which revision is the newest, without a database.

Neither reads the scripts through Alembic: importing it (and SQLAlchemy under it) costs ~0.3 s of
CPU, which every command that opens the source table (``run``, ``dedup``, ``reindex``, ``status``,
...) paid for :func:`head_revision_id` alone. Only ``nearsync migrate`` imports Alembic.
"""

from __future__ import annotations

import ast
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


def head_revision_id(directory: Path | None = None) -> str:
    """The newest revision shipped with this version of nearsync (e.g. ``"0009"``), read from the
    migrations directory without a database and without Alembic: the module-level ``revision`` and
    ``down_revision`` assignments of ``versions/*.py`` (literals, as Alembic's script template
    writes them), and the one revision no other revises, which is what Alembic's
    ``ScriptDirectory.get_current_head()`` returns.

    Args:
        directory: the script directory (holding ``versions/``); default :func:`migrations_dir`.

    Raises:
        FileNotFoundError: the migrations directory is missing.
        ValueError: no revision, more than one head (a branch not merged), or a script whose
            ``revision`` is not a string literal.
    """
    revisions: set[str] = set()
    revised: set[str] = set()
    for path in sorted(((directory or migrations_dir()) / "versions").glob("*.py")):
        found = _revision_of(path)
        if found is None:
            continue
        rev, down = found
        revisions.add(rev)
        revised.update(down)
    heads = sorted(revisions - revised)
    if len(heads) != 1:
        raise ValueError(f"nearsync's migrations have {len(heads)} heads ({', '.join(heads) or 'none'}), one is needed")
    return heads[0]


def _revision_of(path: Path) -> tuple[str, tuple[str, ...]] | None:
    """``(revision, the revisions it revises)`` of one migration script, from its module-level
    assignments; ``None`` for a file without ``revision`` (not a migration script).

    Raises:
        ValueError: ``revision`` is not a string literal, or ``down_revision`` is not None, a string
            or a tuple / list of strings.
    """
    values: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in ("revision", "down_revision")):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                raise ValueError(f"{path}: {node.targets[0].id} is not a literal") from None
    rev, down = values.get("revision"), values.get("down_revision")
    if rev is None:
        return None
    if not isinstance(rev, str):
        raise ValueError(f"{path}: revision is not a string")
    downs = (down,) if isinstance(down, str) else () if down is None else tuple(down)  # type: ignore[arg-type]
    if not all(isinstance(d, str) for d in downs):
        raise ValueError(f"{path}: down_revision is not None, a string or strings")
    return rev, downs
