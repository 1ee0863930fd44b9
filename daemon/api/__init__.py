"""nearsync's HTTP service (``nearsync serve``): the check API, result-set dedup and the duplicates queue.

See :mod:`daemon.api.app` (routes), :mod:`daemon.api.check`, :mod:`daemon.api.dedup_set`,
:mod:`daemon.api.moderation` and :mod:`daemon.api.config` (options).
"""
