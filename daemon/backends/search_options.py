"""Elasticsearch / OpenSearch index backends: option validation.

:func:`daemon.backends.factory.create_search_backend` builds the backend for
``index.backend = "elasticsearch"`` or ``"opensearch"`` from these options. Both backends are the same class,
:class:`daemon.backends.search_options.SearchBackend`, around a thin client adapter
(:mod:`daemon.backends.elasticsearch` or :mod:`daemon.backends.opensearch`); request bodies are
built once in :mod:`daemon.backends.search_bodies`.

Options (the ``[index]`` TOML table minus ``backend``; every error names ``index.<option>``):

==================  ====================  ==================================================
option              default               meaning
==================  ====================  ==================================================
url                 http://localhost:9200 str or list of str; env ``NEARSYNC_INDEX_URL``
                                          overrides (comma-separated for several nodes)
api_key             none                  env ``NEARSYNC_INDEX_API_KEY`` overrides
username/password   none                  basic auth; env ``NEARSYNC_INDEX_PASSWORD``
                                          overrides the password (when a username is set)
ca_certs            none                  path of a CA bundle (must exist)
verify_certs        true                  verify TLS certificates
timeout_s           30.0                  per-request timeout, seconds
index               "nearsync_ads"        the alias the daemon reads and writes; concrete
                                          indices are ``<index>_v<N>``
bulk_docs           2000                  max actions per bulk request, and the rows per
                                          write the indexer sends (``write_rows``)
bulk_bytes          16 MiB                max bytes per bulk request
msearch_size        20                    max candidate searches per ``_msearch`` request
                                          (a batch's lookups are split; each request stays
                                          well inside ``timeout_s`` on a loaded server)
keep_versions       2                     index versions kept by ``prune_versions``
min_should_match    1                     floor on ``min_match`` for candidate queries
more_like_this      false                 add a more_like_this clause (title/body of the
                                          excluded record) that re-ranks candidates
candidate_store     "postgres"            where the candidate keys and signatures live:
                                          ``"postgres"`` (in nearsync's PostgreSQL tables;
                                          the search index stores the fields only, see
                                          :mod:`daemon.backends.pg_candidates`) or
                                          ``"search"`` (in each search document; before
                                          2026-11-27 the only way)
cached_documents    the PostgreSQL        with ``candidate_store = "postgres"`` only: the
                    backend's             dedup worker's document cache (see
                                          :mod:`daemon.backends.doc_cache`)
==================  ====================  ==================================================

Secrets (``api_key``, ``password`` and any ``user:password@`` in a URL) never appear in the
``repr`` of the options or of the backend.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.backends.base import DEFAULT_CANDIDATE_STORE
from daemon.config import redact_dsn
from daemon.errors import ConfigError

SEARCH_BACKENDS = ("elasticsearch", "opensearch")
DEFAULT_URL = "http://localhost:9200"
ENV_URL = "NEARSYNC_INDEX_URL"
ENV_API_KEY = "NEARSYNC_INDEX_API_KEY"
ENV_PASSWORD = "NEARSYNC_INDEX_PASSWORD"
_ALIAS = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,200}$")
_KNOWN = {"url", "api_key", "username", "password", "ca_certs", "verify_certs", "timeout_s", "index",
          "bulk_docs", "bulk_bytes", "msearch_size", "keep_versions", "min_should_match", "more_like_this",
          "candidate_store", "cached_documents"}
CANDIDATE_STORES = ("postgres", "search")
@dataclass(frozen=True)
class SearchOptions:
    """Validated options of a search backend (see the module docstring for meanings and defaults).

    ``api_key`` and ``password`` are excluded from ``repr``; URLs are shown redacted.
    """

    urls: tuple[str, ...] = (DEFAULT_URL,)
    api_key: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_certs: str | None = None
    verify_certs: bool = True
    timeout_s: float = 30.0
    index: str = "nearsync_ads"
    bulk_docs: int = 2000
    bulk_bytes: int = 16 * 1024 * 1024
    msearch_size: int = 20
    keep_versions: int = 2
    min_should_match: int = 1
    more_like_this: bool = False
    candidate_store: str = DEFAULT_CANDIDATE_STORE
    cached_documents: int | None = None

    def __repr__(self) -> str:
        urls = ", ".join(redact_dsn(u) for u in self.urls)
        auth = "api_key" if self.api_key else ("basic" if self.username else "none")
        return (f"SearchOptions(urls=[{urls}], auth={auth}, index={self.index!r}, timeout_s={self.timeout_s}, "
                f"bulk_docs={self.bulk_docs}, bulk_bytes={self.bulk_bytes}, msearch_size={self.msearch_size}, "
                f"keep_versions={self.keep_versions}, "
                f"min_should_match={self.min_should_match}, more_like_this={self.more_like_this}, "
                f"candidate_store={self.candidate_store!r})")


def _key(name: str) -> str:
    return f"index.{name}"


def _int(name: str, v: Any, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ConfigError(_key(name), f"must be an integer >= {minimum}, got {v!r}")
    return v


def _str(name: str, v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(_key(name), f"must be a non-empty string, got {type(v).__name__}")
    return v


def _urls(v: Any) -> tuple[str, ...]:
    items = [u.strip() for u in v.split(",")] if isinstance(v, str) else v
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError(_key("url"), "must be a URL string or a non-empty list of URL strings")
    out: list[str] = []
    for u in items:
        if not isinstance(u, str) or not re.match(r"^https?://[^/\s]+", u):
            shown = redact_dsn(u) if isinstance(u, str) else type(u).__name__
            raise ConfigError(_key("url"), f"each URL must start with http:// or https:// and name a host, got {shown!r}")
        out.append(u.rstrip("/"))
    return tuple(out)


def parse_options(options: Mapping[str, Any], env: Mapping[str, str] | None = None) -> SearchOptions:
    """Validate the ``[index]`` options of a search backend, applying environment overrides.

    Args:
        options: the ``[index]`` table without ``backend``.
        env: the environment (default ``os.environ``); ``NEARSYNC_INDEX_URL``,
            ``NEARSYNC_INDEX_API_KEY`` and ``NEARSYNC_INDEX_PASSWORD`` override the file.

    Returns:
        The validated :class:`SearchOptions`.

    Raises:
        ConfigError: an unknown or invalid option; ``key`` is ``index.<option>``.
    """
    env = os.environ if env is None else env
    if not isinstance(options, Mapping):
        raise ConfigError("index", "must be a table")
    for k in options:
        if k not in _KNOWN:
            raise ConfigError(_key(str(k)), f"unknown option (allowed: backend, {', '.join(sorted(_KNOWN))})")
    d = dict(options)
    if env.get(ENV_URL):
        d["url"] = env[ENV_URL]
    if env.get(ENV_API_KEY):
        d["api_key"] = env[ENV_API_KEY]
    if env.get(ENV_PASSWORD) and d.get("username") is not None:  # the password of the configured user
        d["password"] = env[ENV_PASSWORD]
    kw: dict[str, Any] = {}
    if "url" in d:
        kw["urls"] = _urls(d["url"])
    for name in ("api_key", "username", "password"):
        if d.get(name) is not None:
            kw[name] = _str(name, d[name])
    if ("username" in kw) != ("password" in kw):
        missing = "password" if "username" in kw else "username"
        raise ConfigError(_key(missing), f"username and password go together (set {ENV_PASSWORD} for the password)")
    if "api_key" in kw and "username" in kw:
        raise ConfigError(_key("api_key"), "give either api_key or username/password, not both")
    if d.get("ca_certs") is not None:
        path = _str("ca_certs", d["ca_certs"])
        if not Path(path).is_file():
            raise ConfigError(_key("ca_certs"), f"no such file: {path}")
        kw["ca_certs"] = path
    for name in ("verify_certs", "more_like_this"):
        if name in d:
            if not isinstance(d[name], bool):
                raise ConfigError(_key(name), f"must be true or false, got {d[name]!r}")
            kw[name] = d[name]
    if "timeout_s" in d:
        t = d["timeout_s"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= 3600:
            raise ConfigError(_key("timeout_s"), f"must be a number of seconds in (0, 3600], got {t!r}")
        kw["timeout_s"] = float(t)
    if "index" in d:
        name = d["index"]
        if not isinstance(name, str) or not _ALIAS.match(name):
            raise ConfigError(_key("index"), f"must be a lowercase index name (a-z, 0-9, _, -), got {name!r}")
        kw["index"] = name
    for name, minimum in (("bulk_docs", 1), ("bulk_bytes", 1024), ("msearch_size", 1), ("keep_versions", 1),
                          ("min_should_match", 1)):
        if name in d:
            kw[name] = _int(name, d[name], minimum)
    store = d.get("candidate_store", DEFAULT_CANDIDATE_STORE)
    if store not in CANDIDATE_STORES:
        raise ConfigError(_key("candidate_store"), f"must be one of {', '.join(map(repr, CANDIDATE_STORES))}, "
                                                   f"got {store!r}")
    kw["candidate_store"] = store
    for name, default in (("more_like_this", False), ("min_should_match", 1)):
        if store == "postgres" and kw.get(name, default) != default:
            raise ConfigError(_key(name), "applies to candidate queries on the search server; with "
                                          "candidate_store = \"postgres\" (the default) PostgreSQL answers them: "
                                          "remove it, or set candidate_store = \"search\"")
    if "cached_documents" in d:
        if store != "postgres":
            raise ConfigError(_key("cached_documents"), "applies with candidate_store = \"postgres\" only (the "
                                                        "document cache of PostgreSQL's candidate store)")
        kw["cached_documents"] = _int("cached_documents", d["cached_documents"], 0)
    return SearchOptions(**kw)

