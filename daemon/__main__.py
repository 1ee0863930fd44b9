"""``python -m daemon`` runs the ``nearsync`` command line."""

import sys

from daemon.cli import main

sys.exit(main())
