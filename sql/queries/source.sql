-- Reading the tracked table and checking the schema at start (daemon.capture.source).
-- {columns}, {table} and {id} are identifiers from configuration, quoted with sql.Identifier.

-- name: tracked_tables
SELECT table_name, id_column, tracked_columns FROM nearsync.tracked_tables ORDER BY table_name;

-- name: table_exists
SELECT to_regclass(%(name)s) IS NOT NULL AS present;

-- name: schema_revision_readable
-- Whether this role may read Alembic's version table (roles granted before migration 0008 may not).
SELECT to_regclass('public.nearsync_alembic_version') IS NOT NULL
       AND has_table_privilege('public.nearsync_alembic_version', 'SELECT') AS readable;

-- name: schema_revision
-- The database's nearsync migration (Alembic's version table; see daemon.migrate).
SELECT version_num FROM public.nearsync_alembic_version;

-- name: column_types
SELECT a.attname AS column_name, format_type(a.atttypid, a.atttypmod) AS type_name,
       t.typname AS base_type
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = to_regclass(%(name)s) AND a.attnum > 0 AND NOT a.attisdropped;

-- name: load_rows
-- The changed rows, in one query. {columns}, {table} and {id} are identifiers from configuration.
SELECT {columns} FROM {table} WHERE {id} = ANY(%(ids)s);

-- name: count_rows
SELECT count(*)::bigint AS n FROM {table};

-- name: ids_present
-- Which of the given ids exist in the table (verify).
SELECT {id}::text AS record_id FROM {table} WHERE {id} = ANY(%(ids)s);

-- name: max_key
-- The highest id when a reindex starts: rows inserted later are the triggers' (and the daemon's).
SELECT max({id})::text AS max_key FROM {table};

-- name: id_page
-- One page of ids by keyset pagination (verify).
SELECT {id}::text AS record_id, {id} AS key FROM {table}
WHERE %(after)s::text IS NULL OR {id} > %(after_value)s
ORDER BY {id} LIMIT %(limit)s;
