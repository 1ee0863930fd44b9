"""nearsync's HTTP surface: the service of ``nearsync serve`` and the health/metrics endpoints.

What lives here:

- :mod:`daemon.http.app` — the Starlette application and its routes.
- :mod:`daemon.http.check` (``POST /v1/check``), :mod:`daemon.http.dedup_set` (``POST /v1/dedup-set``),
  :mod:`daemon.http.moderation` (the duplicates queue), :mod:`daemon.http.openapi`,
  :mod:`daemon.http.options` (``serve``'s options and API keys).
- :mod:`daemon.http.health` — ``/healthz``, ``/readyz`` and ``/metrics`` of the daemon and the worker.
- :mod:`daemon.http.metrics` — the Prometheus metrics those processes export.

May import: :mod:`daemon.service`, :mod:`daemon.dedup`, :mod:`daemon.capture`, :mod:`daemon.db`, the
backend protocol, the pure core, settings, errors and logs. Not operations or evaluation.
"""
