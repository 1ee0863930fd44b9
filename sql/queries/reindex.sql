-- Full rebuilds: pages of the tracked table queued in key order, and a resumable checkpoint (daemon.ops.reindex).

-- name: enqueue_page
-- One page of a full reindex, by keyset pagination on the id: every row of the page is put on the
-- index queue with a fresh sequence (coalescing with pending rows), so the normal path indexes it
-- and no concurrent change can be overwritten by an older read. The walk stops at the highest id
-- seen at the start, so inserts faster than the reindex cannot keep it running forever.
WITH page AS (
    SELECT {id} AS id FROM {table}
    WHERE (%(after)s::text IS NULL OR {id} > %(after_value)s)
      AND (%(upto)s::text IS NULL OR {id} <= %(upto_value)s)
    ORDER BY {id} LIMIT %(limit)s
), queued AS (
    INSERT INTO nearsync.index_tracking AS t (queue, table_name, record_id, op, seq, changed_at)
    SELECT 'index', %(table_name)s, page.id::text, 'U', nextval('nearsync.change_seq'), clock_timestamp()
    FROM page
    ON CONFLICT (queue, table_name, record_id) DO UPDATE SET
        op = excluded.op, seq = excluded.seq, changed_at = excluded.changed_at,
        claimed_by = NULL, claimed_at = NULL, attempts = 0, not_before = NULL, last_error = NULL
    RETURNING 1
)
SELECT (SELECT count(*) FROM queued)::bigint AS queued, (SELECT max(id)::text FROM page) AS last_key;

-- name: checkpoint_get
SELECT job, last_key, done, total FROM nearsync.job_checkpoints WHERE job = %(job)s;

-- name: checkpoint_put
INSERT INTO nearsync.job_checkpoints (job, last_key, done, total)
VALUES (%(job)s, %(last_key)s, %(done)s, %(total)s)
ON CONFLICT (job) DO UPDATE SET last_key = excluded.last_key, done = excluded.done,
    total = excluded.total, updated_at = now();

-- name: checkpoint_delete
DELETE FROM nearsync.job_checkpoints WHERE job = %(job)s;
