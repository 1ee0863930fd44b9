"""The one place that picks a concrete index backend from settings.

The daemon, the dedup worker, reindex and the CLI call :func:`create_backend` and know nothing
else about backends; concrete modules are imported lazily so an unused client library is never
loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from daemon.backends.base import IndexBackend
from daemon.config import Settings
from daemon.errors import ConfigError

if TYPE_CHECKING:
    from daemon.backends.search import SearchBackend


def create_backend(settings: Settings) -> IndexBackend:
    """Build (not open) the backend named by ``index.backend``: PostgreSQL, or a search backend, which
    with ``index.candidate_store = "postgres"`` (the default) keeps its candidate keys and signatures
    in the nearsync database (:class:`~daemon.backends.pg_candidates.PgCandidatesBackend`).

    Raises:
        ConfigError: unknown backend, or invalid backend options (the key is named).
    """
    name = settings.index.backend
    if name == "postgres":
        from daemon.backends.postgres import PostgresBackend

        return PostgresBackend(settings.require_dsn(), **settings.index.options)
    if name in ("elasticsearch", "opensearch"):
        search = create_search_backend(name, settings)
        if search.options.candidate_store == "postgres":
            from daemon.backends.pg_candidates import PgCandidatesBackend
            from daemon.backends.postgres import PostgresBackend

            cache = search.options.cached_documents
            pg = PostgresBackend(settings.require_dsn(), **({} if cache is None else {"cached_documents": cache}))
            return PgCandidatesBackend(search, pg)
        return search
    raise ConfigError("index.backend", f"unknown backend {name!r}")


def create_search_backend(name: str, settings: Settings | Mapping[str, Any]) -> SearchBackend:
    """Build (not open) the ``elasticsearch`` or ``opensearch`` backend (the search index alone, whatever
    ``candidate_store`` says: :func:`create_backend` adds the PostgreSQL candidate store).

    Args:
        name: ``"elasticsearch"`` or ``"opensearch"``.
        settings: the process :class:`~daemon.config.Settings` (``settings.index.options`` is used),
            or the options mapping itself (tests, tools).

    Returns:
        A :class:`~daemon.backends.search_options.SearchBackend`; call ``await backend.open()``.

    Raises:
        ConfigError: unknown ``name`` (``index.backend``) or an invalid option (``index.<option>``).
    """
    from daemon.backends.search import SearchBackend
    from daemon.backends.search_options import SEARCH_BACKENDS, parse_options

    options = settings.index.options if isinstance(settings, Settings) else settings
    opts = parse_options(options)
    if name == "elasticsearch":
        from daemon.backends.elasticsearch import ElasticsearchClient

        return SearchBackend(name, ElasticsearchClient(opts), opts)
    if name == "opensearch":
        from daemon.backends.opensearch import OpenSearchClient

        return SearchBackend(name, OpenSearchClient(opts), opts)
    raise ConfigError("index.backend", f"not a search backend: {name!r} (expected one of {', '.join(SEARCH_BACKENDS)})")
