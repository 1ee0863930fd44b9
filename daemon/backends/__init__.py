"""Index backends: the protocol (:mod:`daemon.backends.base`) and its implementations.

Processes get a backend from :func:`daemon.backends.factory.create_backend` only.
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
