"""Packaging: every import of the package is declared, and the `eval` extra is optional.

After a plain ``pip install nearsync`` every command must work, so each third-party module that
``daemon/`` imports must come from a distribution named in ``[project] dependencies`` — except the
baselines' (``datasketch``, ``simhash``), which are the ``eval`` extra and are imported only when
present.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EVAL_ONLY = {"daemon/evaluation/baselines.py"}


def _requirement_names(reqs: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}


def _third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n != "daemon" and n not in sys.stdlib_module_names and n != "__future__"}


def test_every_third_party_import_is_a_declared_dependency() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = _requirement_names(project["dependencies"])
    eval_extra = _requirement_names(project["optional-dependencies"]["eval"])
    dists = {m: {d.lower().replace("_", "-") for d in ds} for m, ds in packages_distributions().items()}
    missing: dict[str, set[str]] = {}
    for path in sorted((REPO / "daemon").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        allowed = declared | (eval_extra if rel in EVAL_ONLY else set())
        for module in _third_party_imports(path):
            if not dists.get(module, {module}) & allowed:
                missing.setdefault(rel, set()).add(module)
    assert not missing, f"imported but not declared in pyproject.toml [project] dependencies: {missing}"


def test_baselines_are_skipped_with_a_clear_message_without_the_eval_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from daemon.evaluation import evaluate
    from daemon.evaluation.datasets import Dataset

    monkeypatch.delitem(sys.modules, "daemon.evaluation.baselines", raising=False)
    monkeypatch.setitem(sys.modules, "datasketch", None)  # as if not installed: importing it raises
    out = evaluate._baselines(Dataset(name="empty", records=[], pairs=set()), set(), {}, False)
    assert out == {"skipped": "the baselines need datasketch: pip install 'nearsync[eval]' (or pass --no-baselines)"}
