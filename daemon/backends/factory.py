"""The one place that picks a concrete index backend from settings.

The daemon, the dedup worker, reindex and the CLI call :func:`create_backend` and know nothing
else about backends; concrete modules are imported lazily so an unused client library is never
loaded.
"""

from __future__ import annotations

from daemon.backends.base import IndexBackend
from daemon.config import Settings
from daemon.errors import ConfigError


def create_backend(settings: Settings) -> IndexBackend:
    """Build (not open) the backend named by ``index.backend``.

    Raises:
        ConfigError: unknown backend, or invalid backend options (the key is named).
    """
    name = settings.index.backend
    if name == "postgres":
        from daemon.backends.postgres import PostgresBackend

        return PostgresBackend(settings.require_dsn(), **settings.index.options)
    if name in ("elasticsearch", "opensearch"):
        try:
            from daemon.backends.search import create_search_backend
        except ImportError as e:  # pragma: no cover - packaging error
            raise ConfigError("index.backend", f"{name} backend unavailable: {e}") from e
        return create_search_backend(name, settings)
    raise ConfigError("index.backend", f"unknown backend {name!r}")
