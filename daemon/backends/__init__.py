"""Index backends: the protocol (:mod:`daemon.backends.base`) and its implementations.

What lives here:

- :mod:`~daemon.backends.base` — :class:`IndexBackend` (and :class:`~daemon.backends.base.VersionedIndex`
  for versioned indices behind an alias), the document and result types, the error types.
- :mod:`~daemon.backends.factory` — the one place a concrete backend is chosen from settings.
- :mod:`~daemon.backends.postgres` + :mod:`~daemon.backends.pg_encoding` — the embedded default.
- :mod:`~daemon.backends.search` (the backend class shared by Elasticsearch and OpenSearch),
  :mod:`~daemon.backends.search_options`, :mod:`~daemon.backends.search_client` (adapter protocol,
  HTTP errors), :mod:`~daemon.backends.search_bodies` (request bodies),
  :mod:`~daemon.backends.search_admin` (index versions, alias swap), and the thin client adapters
  :mod:`~daemon.backends.elasticsearch` / :mod:`~daemon.backends.opensearch`.

Processes get a backend from :func:`daemon.backends.factory.create_backend` only and never import a
concrete module. May import: :mod:`daemon.db`, the pure core, settings, errors and logs; never
capture, dedup, service, http, ops, evaluation or the CLI (``.importlinter``).
"""

from daemon.backends.base import (
    Candidate,
    CandidateQuery,
    DeleteOp,
    IndexBackend,
    IndexDocument,
    Outcome,
    PermanentIndexError,
    TransientIndexError,
    WriteResult,
)

__all__ = ["Candidate", "CandidateQuery", "DeleteOp", "IndexBackend", "IndexDocument", "Outcome", "PermanentIndexError",
           "TransientIndexError", "WriteResult"]
