"""Change capture: from the tracked table's change queue to index documents.

What lives here:

- :mod:`daemon.capture.queue` — the adapter for the ``index_tracking`` / ``dedup_tracking`` queues the
  triggers fill (register a worker, relay the change log, claim with ``SKIP LOCKED``, ack by
  (record, sequence), enqueue for dedup, dead letters).
- :mod:`daemon.capture.loop` — :class:`~daemon.capture.loop.QueueLoop`, the LISTEN/NOTIFY loop with
  poll fallback, realtime and batch-window modes, lanes, retries with backoff and adaptive batch size.
- :mod:`daemon.capture.indexer` — :class:`~daemon.capture.indexer.IndexHandler`, one claimed batch:
  load rows, build documents, upsert/delete in the index backend.
- :mod:`daemon.capture.source` — the tracked table: inspection at start and loading rows by id.
- :mod:`daemon.capture.documents` — :class:`~daemon.capture.documents.DocumentBuilder` (row → index
  document with its signature) and the signature process pool.

May import: the pure core (:mod:`daemon.signatures`, :mod:`daemon.scoring`), :mod:`daemon.db`, the
backend *protocol* (:mod:`daemon.backends.base`), settings, errors and logs. Never a concrete backend,
the dedup worker, the HTTP service, operations or evaluation (import-linter contracts in
``.importlinter``).
"""
