"""The Elasticsearch client adapter (official ``elasticsearch`` client, ``AsyncElasticsearch``).

Only sends requests and translates errors; everything else is shared
(:class:`daemon.backends.search.SearchBackend`). Built by
:func:`daemon.backends.factory.create_search_backend`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from elastic_transport import TransportError
from elasticsearch import ApiError, AsyncElasticsearch
from elasticsearch.helpers import async_streaming_bulk

from daemon.backends.base import TransientIndexError
from daemon.backends.search_options import SearchOptions
from daemon.backends.search_client import http_error, tls_kwargs


class ElasticsearchClient:
    """:class:`~daemon.backends.search.SearchClient` over ``AsyncElasticsearch``.

    Args:
        options: validated options (URLs, auth, TLS, ``timeout_s``). The client retries a failed
            connection on another node (``len(urls) - 1`` retries), never on the same one.
    """

    def __init__(self, options: SearchOptions) -> None:
        kw: dict[str, Any] = {"request_timeout": options.timeout_s, "max_retries": len(options.urls) - 1,
                              "retry_on_timeout": len(options.urls) > 1, **tls_kwargs(options)}
        if options.api_key:
            kw["api_key"] = options.api_key
        elif options.username:
            kw["basic_auth"] = (options.username, options.password or "")
        self._client = AsyncElasticsearch(list(options.urls), **kw)

    def __repr__(self) -> str:
        return "ElasticsearchClient()"

    async def request(self, method: str, path: str, body: Any = None, *,
                      params: Mapping[str, str] | None = None, ndjson: bool = False) -> Any:
        """See :meth:`SearchClient.request`."""
        headers = {"accept": "application/json"}
        if body is not None:
            headers["content-type"] = "application/x-ndjson" if ndjson else "application/json"
        try:
            resp = await self._client.perform_request(method, path, params=dict(params or {}), headers=headers,
                                                      body=body)
        except ApiError as e:
            raise http_error(e.meta.status, e.body) from e
        except TransportError as e:
            raise TransientIndexError(f"elasticsearch unreachable: {type(e).__name__}: {e}") from e
        return resp.body if resp.body is not None else {}

    async def bulk(self, actions: list[dict[str, Any]], *, chunk_docs: int, chunk_bytes: int) -> list[dict[str, Any]]:
        """See :meth:`SearchClient.bulk` (``helpers.async_streaming_bulk``, no helper-level retries)."""
        failed: list[dict[str, Any]] = []
        try:
            async for ok, item in async_streaming_bulk(self._client, actions, chunk_size=chunk_docs,
                                                       max_chunk_bytes=chunk_bytes, raise_on_error=False,
                                                       raise_on_exception=True, max_retries=0, yield_ok=False):
                if not ok:
                    failed.append(item)
        except ApiError as e:
            raise http_error(e.meta.status, e.body) from e
        except TransportError as e:
            raise TransientIndexError(f"elasticsearch unreachable: {type(e).__name__}: {e}") from e
        return failed

    async def close(self) -> None:
        """Close the connections (idempotent)."""
        await self._client.close()
