"""The layer contracts of ``.importlinter`` hold (import-linter), and every package is in a layer.

docs/architecture.md describes the same layers; this test keeps the code and that page honest in CI.
"""

from __future__ import annotations

import configparser
import pkgutil
import subprocess
import sys
from pathlib import Path

import daemon
import daemon.dedup

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / ".importlinter"


def test_import_linter_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--config", str(CONFIG), "--no-cache"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_every_subpackage_is_placed_in_a_layer() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(CONFIG)
    layers = cfg["importlinter:contract:layers"]["layers"]
    placed = {name.strip() for line in layers.splitlines() for name in line.split("|") if name.strip()}
    packages = {f"daemon.{m.name}" for m in pkgutil.iter_modules(daemon.__path__) if m.ispkg}
    # a package is placed whole, or through its modules (daemon.dedup: worker, settings, clusters)
    unplaced = {p for p in packages if p not in placed and not any(n.startswith(p + ".") for n in placed)}
    assert not unplaced, f"packages missing from the layers contract in .importlinter: {sorted(unplaced)}"
    dedup = {f"daemon.dedup.{m.name}" for m in pkgutil.iter_modules(daemon.dedup.__path__)}
    assert dedup <= placed, f"daemon.dedup modules missing from the layers contract: {sorted(dedup - placed)}"
