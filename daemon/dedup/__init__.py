"""Near-duplicate detection on top of the index: the dedup worker, its settings and clustering.

What lives here:

- :mod:`daemon.dedup.settings` — :class:`~daemon.dedup.settings.DedupOptions` validated from the
  ``[dedup]`` settings (scope, thresholds, field weights, cluster limits).
- :mod:`daemon.dedup.clusters` — pure clustering of scored links (union-find, splitting of large or
  sparse components, cannot-link constraints). Part of the functional core: no I/O.
- :mod:`daemon.dedup.worker` — :class:`~daemon.dedup.worker.DedupHandler`, one claimed batch of the
  dedup queue: candidates from the backend, scoring, flags and clusters written to PostgreSQL.

May import: the pure core, :mod:`daemon.db`, the backend protocol (:mod:`daemon.backends.base`), the
queue types of :mod:`daemon.capture`, settings, errors and logs. ``clusters`` imports nothing with I/O.
"""
