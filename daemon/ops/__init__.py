"""One-shot operations a person runs: migrations, reindex, dead letters, the least-privilege role.

What lives here:

- :mod:`daemon.ops.migrate` — Alembic upgrade/downgrade and attaching the triggers and the flag view
  to the tracked table.
- :mod:`daemon.ops.reindex` — full rebuild (resumable, alias swap on search backends), verify, repair,
  rollback.
- :mod:`daemon.ops.deadletters` — list, retry and purge dead letters.
- :mod:`daemon.ops.roles` — create and grant the daemon's least-privilege role.

May import: :mod:`daemon.service` (to build an indexer), :mod:`daemon.capture`, :mod:`daemon.db`, the
backend protocol and factory, settings, errors and logs. Not the HTTP service or evaluation.
"""
