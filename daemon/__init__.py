"""nearsync: change-data-capture from PostgreSQL to a search index, with near-duplicate flags.

The package keeps a functional core (``daemon.signatures``, ``daemon.scoring``, ``daemon.dedup.clusters``:
pure, no I/O) apart from an imperative shell (``daemon.db``, ``daemon.backends``, ``daemon.capture.indexer``,
``daemon.cli``).
"""

__version__ = "0.1.0"
