"""nearsync's HTTP surface: the service of ``nearsync serve`` and the health/metrics endpoints.

What lives here:

- :mod:`daemon.http.app` — the Starlette application and its routes.
- :mod:`daemon.http.check` (``POST /v1/check``), :mod:`daemon.http.dedup_set` (``POST /v1/dedup-set``),
  :mod:`daemon.http.moderation` (the duplicates queue), :mod:`daemon.http.openapi` (generated from
  the models), :mod:`daemon.http.options` (``serve``'s options, API keys, the bind check).
- :mod:`daemon.http.models` — the pydantic request models, the bounded JSON reader, 422 errors.
- :mod:`daemon.http.auth` — API keys, sign-in sessions, CSRF tokens.
- :mod:`daemon.http.health` — ``/healthz``, ``/readyz`` and ``/metrics`` of the daemon and the worker.
- :mod:`daemon.http.metrics` — the Prometheus metrics those processes export.

May import: :mod:`daemon.service`, :mod:`daemon.dedup`, :mod:`daemon.capture`, :mod:`daemon.db`, the
backend protocol, the pure core, settings, errors and logs. Not operations or evaluation.
"""
