-- Candidate lookups read key rows by key and table in one index (key, table_name) that also
-- carries record_id, so `key = ANY(...) AND table_name = ...` is a single (often index-only) scan.
-- The single-column key index it replaces let the planner AND a bitmap of every row of the table
-- (from the (table_name, record_id) index) into small lookups when statistics were stale after a
-- bulk load: 6.5 ms instead of 0.2 ms for a 33-key lookup on 160,000 key rows.
CREATE INDEX IF NOT EXISTS document_keys_lookup ON nearsync.document_keys (key, table_name) INCLUDE (record_id);
DROP INDEX IF EXISTS nearsync.document_keys_key;
