"""The OpenSearch client adapter (``opensearch-py``, ``AsyncOpenSearch``).

Only sends requests and translates errors; everything else is shared
(:class:`daemon.backends.search.SearchBackend`). Built by
:func:`daemon.backends.factory.create_search_backend`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opensearchpy import AsyncOpenSearch
from opensearchpy.exceptions import ConnectionError as OSConnectionError
from opensearchpy.exceptions import TransportError
from opensearchpy.helpers import async_bulk

from daemon.backends.base import TransientIndexError
from daemon.backends.search_options import SearchOptions
from daemon.backends.search_client import http_error, tls_kwargs


class OpenSearchClient:
    """:class:`~daemon.backends.search.SearchClient` over ``AsyncOpenSearch``.

    Args:
        options: validated options. An ``api_key`` is sent as ``Authorization: ApiKey <key>``;
            username/password as HTTP basic auth.
    """

    def __init__(self, options: SearchOptions) -> None:
        kw: dict[str, Any] = {"timeout": options.timeout_s, "max_retries": len(options.urls) - 1,
                              "retry_on_timeout": len(options.urls) > 1, **tls_kwargs(options)}
        if options.api_key:
            kw["headers"] = {"authorization": f"ApiKey {options.api_key}"}
        elif options.username:
            kw["http_auth"] = (options.username, options.password or "")
        self._client = AsyncOpenSearch(list(options.urls), **kw)

    def __repr__(self) -> str:
        return "OpenSearchClient()"

    @staticmethod
    def _translate(e: TransportError) -> Exception:
        if isinstance(e, OSConnectionError) or not isinstance(e.status_code, int):
            return TransientIndexError(f"opensearch unreachable: {type(e).__name__}: {e.error}")
        return http_error(e.status_code, e.info)

    async def request(self, method: str, path: str, body: Any = None, *,
                      params: Mapping[str, str] | None = None, ndjson: bool = False) -> Any:
        """See :meth:`SearchClient.request`."""
        headers = {"content-type": "application/x-ndjson"} if ndjson else None
        if ndjson and body is not None:
            body = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in body)
        try:
            res = await self._client.transport.perform_request(method, path, params=dict(params or {}), body=body,
                                                               headers=headers)
        except TransportError as e:
            raise self._translate(e) from e
        return res if res is not None else {}

    async def bulk(self, actions: list[dict[str, Any]], *, chunk_docs: int, chunk_bytes: int) -> list[dict[str, Any]]:
        """See :meth:`SearchClient.bulk` (``helpers.async_bulk``, no helper-level retries)."""
        try:
            _, errors = await async_bulk(self._client, actions, chunk_size=chunk_docs, max_chunk_bytes=chunk_bytes,
                                         raise_on_error=False, raise_on_exception=True, max_retries=0,
                                         stats_only=False)
        except TransportError as e:
            raise self._translate(e) from e
        return list(errors) if isinstance(errors, list) else []

    async def close(self) -> None:
        """Close the connections (idempotent)."""
        await self._client.close()
