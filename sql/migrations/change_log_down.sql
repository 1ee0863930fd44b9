-- Downgrade of migration 0008: move what is still in the change log into index_tracking (the
-- coalescing upsert of the relay), put back the 0002 trigger generator (sql/migrations/triggers.sql, run by
-- the migration before this script) and rebuild every tracked table's triggers with it, then drop
-- the view and the log. The log is locked first so that no change committed meanwhile is dropped
-- with it (a concurrent writer waits, then fails on the dropped table rather than losing its change).
LOCK TABLE nearsync.change_log IN EXCLUSIVE MODE;

INSERT INTO nearsync.index_tracking AS t (queue, table_name, record_id, op, seq, changed_at)
SELECT DISTINCT ON (table_name, record_id) 'index', table_name, record_id, op, seq, changed_at
FROM nearsync.change_log ORDER BY table_name, record_id, seq DESC
ON CONFLICT (queue, table_name, record_id) DO UPDATE SET
    op = excluded.op, seq = excluded.seq, changed_at = excluded.changed_at,
    claimed_by = NULL, claimed_at = NULL, attempts = 0, not_before = NULL, last_error = NULL
WHERE t.seq < excluded.seq;

SELECT nearsync.attach_table(to_regclass(table_name), id_column, tracked_columns)
FROM nearsync.tracked_tables WHERE to_regclass(table_name) IS NOT NULL;

DROP VIEW IF EXISTS nearsync.pending_changes;
DROP TABLE IF EXISTS nearsync.change_log;
