-- Observability: figures read by /metrics, /readyz and the chaos/hygiene checks (daemon.metrics,
-- daemon.health). Queue figures reuse queue.sql's queue_status and deadletters.sql's dead_letter_count.

-- name: notification_queue_usage
-- Fraction (0..1) of the server's NOTIFY queue in use; near 1 means listeners are not keeping up.
SELECT pg_notification_queue_usage()::float8 AS usage;

-- name: tracking_size
-- On-disk size of the tracking table and the change log with their indexes and TOAST (bytes), and
-- their row count.
SELECT (pg_total_relation_size('nearsync.index_tracking') + pg_total_relation_size('nearsync.change_log'))::bigint
           AS bytes,
       (SELECT count(*) FROM nearsync.pending_changes)::bigint AS rows;

-- Checks of the chaos suite (bench/chaos) and the hygiene test.

-- name: pending_for_record
-- Tracking and change-log rows (either queue) still pending for one record.
SELECT count(*)::bigint AS n FROM nearsync.pending_changes
WHERE table_name = %(table)s AND record_id = %(record_id)s;

-- name: pending_rows_for_record
-- The pending tracking and change-log rows of one record (diagnostics of the chaos suite).
SELECT queue, op, seq, claimed_by, attempts, not_before, last_error FROM nearsync.pending_changes
WHERE table_name = %(table)s AND record_id = %(record_id)s ORDER BY queue;

-- name: pending_total
-- Tracking and change-log rows, both queues.
SELECT count(*)::bigint AS n FROM nearsync.pending_changes;

-- name: dead_letter_ids
SELECT queue, record_id FROM nearsync.dead_letters WHERE table_name = %(table)s;

-- name: dedup_reset
-- Forget every link, part, cluster, flag and capped-lookup boundary of a table (before a clean
-- single-worker rerun to compare against; the caller then puts every live document of the index on the
-- dedup queue).
WITH l AS (DELETE FROM nearsync.dedup_links WHERE table_name = %(table)s),
     f AS (DELETE FROM nearsync.duplicate_flags WHERE table_name = %(table)s),
     p AS (DELETE FROM nearsync.dedup_parts WHERE table_name = %(table)s),
     b AS (DELETE FROM nearsync.dedup_cap_bounds WHERE table_name = %(table)s)
DELETE FROM nearsync.clusters WHERE table_name = %(table)s;
