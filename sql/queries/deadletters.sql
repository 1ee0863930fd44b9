-- Dead letters: records that failed max_attempts times (daemon.ops.deadletters, status).

-- name: dead_letter_count
SELECT queue, count(*)::bigint AS n FROM nearsync.dead_letters GROUP BY queue ORDER BY queue;

-- name: dead_letter_list
SELECT id, queue, table_name, record_id, op, seq, attempts, error, changed_at, failed_at
FROM nearsync.dead_letters ORDER BY id LIMIT %(limit)s;

-- name: dead_letter_ids_absent
-- Which of the given dead-letter ids are not in the table (a retry or purge names them).
SELECT g.id FROM unnest(%(ids)b::bigint[]) AS g(id)
WHERE NOT EXISTS (SELECT 1 FROM nearsync.dead_letters d WHERE d.id = g.id) ORDER BY g.id;

-- name: dead_letter_retry
-- Put dead letters back on their queue with a fresh sequence and zero attempts.
WITH back AS (
    DELETE FROM nearsync.dead_letters WHERE (%(ids)b::bigint[] IS NULL OR id = ANY(%(ids)b::bigint[]))
    RETURNING queue, table_name, record_id, op
)
INSERT INTO nearsync.index_tracking AS t (queue, table_name, record_id, op, seq, changed_at)
SELECT queue, table_name, record_id, op, nextval('nearsync.change_seq'), clock_timestamp() FROM back
ON CONFLICT (queue, table_name, record_id) DO UPDATE SET
    op = excluded.op, seq = excluded.seq, changed_at = excluded.changed_at,
    claimed_by = NULL, claimed_at = NULL, attempts = 0, not_before = NULL, last_error = NULL
RETURNING t.record_id;

-- name: dead_letter_purge
DELETE FROM nearsync.dead_letters WHERE (%(ids)b::bigint[] IS NULL OR id = ANY(%(ids)b::bigint[]));
