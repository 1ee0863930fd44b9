"""``python -m daemon`` runs the ``nearsync`` command line."""

import sys

from daemon.cli import console

if __name__ == "__main__":  # guarded: worker processes re-import the main module
    sys.exit(console())
