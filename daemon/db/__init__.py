"""PostgreSQL access shared by every process: named queries, pools, codecs, a throwaway server.

What lives here:

- :mod:`daemon.db.queries` — every SQL statement, loaded by name from the ``.sql`` files in ``sql/``.
- :mod:`daemon.db.migrations` — where the Alembic scripts are and which revision is the newest.
- :mod:`daemon.db.pool` — connection pools and session settings.
- :mod:`daemon.db.arrays` — packed ``int4[]`` / ``int8[]`` parameters sent in binary.
- :mod:`daemon.db.jsoncodec` — orjson-based JSON dumps/loads for ``jsonb``.
- :mod:`daemon.db.throwaway` — a private PostgreSQL server for the demo, ``evaluate`` and the tests.

May import: settings, errors, logs and third-party database libraries; nothing else of nearsync.
"""
