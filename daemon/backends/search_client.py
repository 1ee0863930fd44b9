"""The client side shared by the Elasticsearch and OpenSearch adapters: the adapter protocol and
HTTP error translation.

* connection errors, timeouts, HTTP 429 and 5xx -> :class:`~daemon.backends.base.TransientIndexError`;
* any other HTTP error -> :class:`SearchHTTPError` (a :class:`PermanentIndexError` carrying the status).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from daemon.backends.base import PermanentIndexError, TransientIndexError
from daemon.backends.search_options import SearchOptions


class SearchHTTPError(PermanentIndexError):
    """A non-retryable HTTP error from the server.

    Attributes:
        status: the HTTP status (e.g. 400, 404).
        error_type: the server's error type (e.g. ``index_not_found_exception``), or ``""``.
        reason: the server's reason text.
    """

    def __init__(self, status: int, error_type: str, reason: str) -> None:
        super().__init__(f"HTTP {status} {error_type}: {reason}")
        self.status, self.error_type, self.reason = status, error_type, reason


def error_fields(body: Any) -> tuple[str, str]:
    """``(type, reason)`` of an error body (``{"error": {...}}``, ``{"error": "text"}`` or anything)."""
    err = body.get("error", body) if isinstance(body, Mapping) else body
    if isinstance(err, Mapping):
        return str(err.get("type", "")), str(err.get("reason", ""))
    return "", str(err)


def is_transient_status(status: int) -> bool:
    """True for statuses worth retrying later: 429 and 5xx."""
    return status == 429 or status >= 500


def http_error(status: int, body: Any) -> Exception:
    """The exception for an HTTP error response: TransientIndexError (429/5xx) or SearchHTTPError."""
    etype, reason = error_fields(body)
    if is_transient_status(status):
        return TransientIndexError(f"index returned HTTP {status} {etype}: {reason}")
    return SearchHTTPError(status, etype, reason)


def tls_kwargs(options: SearchOptions) -> dict[str, Any]:
    """``verify_certs``/``ca_certs`` client arguments, only when some URL is ``https`` (both clients
    refuse or warn about TLS options on plain HTTP)."""
    if not any(u.startswith("https://") for u in options.urls):
        return {}
    kw: dict[str, Any] = {"verify_certs": options.verify_certs}
    if options.ca_certs:
        kw["ca_certs"] = options.ca_certs
    return kw


class SearchClient(Protocol):
    """The thin adapter around one client library. Every method raises TransientIndexError on
    connection errors, timeouts, 429 and 5xx, and SearchHTTPError on other HTTP errors."""

    async def request(self, method: str, path: str, body: Any = None, *,
                      params: Mapping[str, str] | None = None, ndjson: bool = False) -> Any:
        """Send one request; ``body`` is a dict, or a list of dicts sent as NDJSON when ``ndjson``.

        Returns the decoded JSON response body (``{}`` for an empty body, e.g. HEAD).
        """

    async def bulk(self, actions: list[dict[str, Any]], *, chunk_docs: int, chunk_bytes: int) -> list[dict[str, Any]]:
        """Send bulk-helper ``actions`` in chunks of at most ``chunk_docs`` actions / ``chunk_bytes`` bytes.

        Returns the failed items only (``{op_type: {"_id", "_index", "status", "error"}}``).
        """

    async def close(self) -> None:
        """Close the client's connections; safe to call twice."""
