-- The tracking/claiming protocol: the queues workers claim from (daemon.capture.queue).
-- The triggers append to nearsync.change_log; `relay_claim` coalesces the log into index_tracking, the
-- queue table that workers claim from (the dedup queue is filled by the daemon, not the log).
-- Parameters use psycopg's %(name)s placeholders; {identifiers} are filled with sql.Identifier.

-- name: register_worker
-- A new worker id; the caller then holds advisory lock (28275, id) on its LISTEN connection.
SELECT nextval('nearsync.worker_seq')::integer AS worker_id;

-- name: lock_worker
SELECT pg_try_advisory_lock(28275, %(worker)s) AS locked;

-- name: relay_claim
-- The relay: move up to %(relay_limit)s change-log rows (appended by the triggers, migration 0008)
-- into the index queue in one statement: delete them, keep the latest change per record, upsert it.
-- Moved rows are skipped by concurrent relays (SKIP LOCKED), and the upsert goes in key order, so two
-- relays never deadlock; an older change never overwrites a newer pending one (a newer change that
-- was already processed makes the older one stale at the index, which keeps versions).
-- The claim in the same write: the %(limit)s oldest changes queued are claimed by %(worker)s (0 and
-- NULL: a relay alone), so such a change is written once into index_tracking rather than written by
-- the relay and then updated by `claim` (~9 ms of the database's time per 1,000 rows); the rest are
-- queued unclaimed. A record pending with an older change gets the new change, and the claim when it
-- is among the %(limit)s (another worker busy with the older change then fails its version-checked
-- ack, as it would after a relay alone). Returns the rows claimed, each with the count of log rows
-- moved; one row of NULLs but that count when nothing was claimed.
WITH moved AS (
    DELETE FROM nearsync.change_log c
    WHERE c.ctid = ANY(ARRAY(SELECT l.ctid FROM nearsync.change_log l LIMIT %(relay_limit)s FOR UPDATE SKIP LOCKED))
    RETURNING c.table_name, c.record_id, c.op, c.seq, c.changed_at
), latest AS (
    SELECT DISTINCT ON (table_name, record_id) table_name, record_id, op, seq, changed_at
    FROM moved ORDER BY table_name, record_id, seq DESC
), ranked AS (
    SELECT l.*, row_number() OVER (ORDER BY l.seq, l.table_name, l.record_id) <= %(limit)s AS mine FROM latest l
), queued AS (
    INSERT INTO nearsync.index_tracking AS t (queue, table_name, record_id, op, seq, changed_at, claimed_by, claimed_at)
    SELECT 'index', table_name, record_id, op, seq, changed_at,
           CASE WHEN mine THEN %(worker)s::integer END, CASE WHEN mine THEN clock_timestamp() END
    FROM ranked ORDER BY table_name, record_id
    ON CONFLICT (queue, table_name, record_id) DO UPDATE SET
        op = excluded.op, seq = excluded.seq, changed_at = excluded.changed_at,
        claimed_by = excluded.claimed_by, claimed_at = excluded.claimed_at, attempts = 0, takeovers = 0, not_before = NULL,
        last_error = NULL
    WHERE t.seq < excluded.seq
    RETURNING t.table_name, t.record_id, t.op, t.seq, t.changed_at, t.attempts, t.claimed_by
)
SELECT c.table_name, c.record_id, c.op, c.seq, c.changed_at, c.attempts, m.moved
FROM (SELECT count(*)::bigint AS moved FROM moved) m
LEFT JOIN (SELECT * FROM queued WHERE claimed_by = %(worker)s) c ON true;

-- name: claim
-- Claim up to %(limit)s due rows of a queue, oldest change first. A row is claimable when nobody
-- holds it, or its holder is dead (no longer holds its advisory lock). SKIP LOCKED lets several
-- workers claim side by side; the claim itself commits at once, so user writes never wait on us.
-- A row taken over from a dead holder counts one more takeover (migration 0015): its worker
-- stopped with the row in hand (daemon.capture.loop, "Poison records"). Not when the row was
-- claimed before the server last started: then the holder lost its lock to a restart of
-- PostgreSQL, which every row in hand shares, not to a stop of its own.
WITH alive AS (
    SELECT objid::integer AS worker_id FROM pg_locks
    WHERE locktype = 'advisory' AND classid = 28275 AND objsubid = 2 AND granted
), picked AS (
    SELECT t.queue, t.table_name, t.record_id,
           (t.claimed_by IS NOT NULL AND t.claimed_by <> %(worker)s
            AND t.claimed_at >= pg_postmaster_start_time()) AS orphaned
    FROM nearsync.index_tracking t
    WHERE t.queue = %(queue)s
      AND (t.claimed_by IS NULL OR t.claimed_by = %(worker)s
           OR t.claimed_by NOT IN (SELECT worker_id FROM alive))
      AND (t.not_before IS NULL OR t.not_before <= clock_timestamp())
    ORDER BY t.seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE nearsync.index_tracking t
SET claimed_by = %(worker)s, claimed_at = clock_timestamp(), takeovers = t.takeovers + picked.orphaned::integer
FROM picked
WHERE t.queue = picked.queue AND t.table_name = picked.table_name AND t.record_id = picked.record_id
RETURNING t.table_name, t.record_id, t.op, t.seq, t.changed_at, t.attempts, t.takeovers;

-- name: ack_plan
-- Before `ack`, in its transaction: see there.
SET LOCAL enable_seqscan = off;

-- name: ack
-- Acknowledge processed rows: delete each only if its sequence is still the one we claimed. A
-- change that arrived meanwhile bumped the sequence (and cleared the claim), so it stays pending.
-- One primary-key lookup per acknowledged pair, whatever the table's statistics say. Right after a
-- burst they still describe a nearly empty table until autovacuum catches up, and the planner then
-- joined the other way round: every queued row of the table against the whole batch (quadratic:
-- 1.8 s for an ack of 1,700 rows with 100,000 queued as a `record_id = ANY(...)` filter; 4-10 s
-- for acks of 1,100-2,250 rows as a plain join on the pairs; 0.2-1.2 s with the seq index, as one
-- statement's changes share one sequence value; `auto_explain`). The lookup is by the primary key
-- alone, in its order, with a LIMIT: it stays a subquery run per pair (not pulled up into a join the
-- planner may reorder) that only the primary key's index serves without a sort, and `ack_plan`
-- rules out a scan that stale statistics make look cheaper. The sequence is compared after it; the
-- delete then goes by row address (a row changed since is not the one found, and is left).
DELETE FROM nearsync.index_tracking t
WHERE t.ctid = ANY(ARRAY(
    SELECT x.ctid
    FROM unnest(%(record_ids)b::text[], %(seqs)b::bigint[]) AS a(record_id, seq)
    CROSS JOIN LATERAL (
        SELECT i.ctid, i.seq FROM nearsync.index_tracking i
        WHERE i.queue = %(queue)s AND i.table_name = %(table)s AND i.record_id = a.record_id
        ORDER BY i.queue, i.table_name, i.record_id
        LIMIT 1) AS x
    WHERE x.seq = a.seq));

-- name: fail
-- Record a per-record failure: count the attempt, keep the error, back off exponentially.
UPDATE nearsync.index_tracking t
SET attempts = t.attempts + 1, last_error = f.error, claimed_by = NULL, claimed_at = NULL,
    not_before = clock_timestamp() + make_interval(secs => %(backoff_s)s * power(2, t.attempts))
FROM unnest(%(record_ids)b::text[], %(seqs)b::bigint[], %(errors)b::text[]) AS f(record_id, seq, error)
WHERE t.queue = %(queue)s AND t.table_name = %(table)s
  AND t.record_id = f.record_id AND t.seq = f.seq;

-- name: dead_letter
-- Move rows that failed %(max_attempts)s times to the dead-letter table.
WITH moved AS (
    DELETE FROM nearsync.index_tracking t
    WHERE t.queue = %(queue)s AND t.table_name = %(table)s
      AND t.record_id = ANY(%(record_ids)b::text[]) AND t.attempts >= %(max_attempts)s
    RETURNING t.*
)
INSERT INTO nearsync.dead_letters AS d (queue, table_name, record_id, op, seq, attempts, error, changed_at)
SELECT queue, table_name, record_id, op, seq, attempts, coalesce(last_error, 'unknown error'), changed_at
FROM moved
ON CONFLICT (queue, table_name, record_id) DO UPDATE SET
    op = excluded.op, seq = excluded.seq, attempts = d.attempts + excluded.attempts,
    error = excluded.error, changed_at = excluded.changed_at, failed_at = now()
RETURNING d.record_id;

-- name: release
-- Give back claims we will not finish (shutdown before processing).
UPDATE nearsync.index_tracking SET claimed_by = NULL, claimed_at = NULL
WHERE claimed_by = %(worker)s AND queue = %(queue)s;

-- name: claim_row
-- Claim one given change again (the suspect a lane gave back while it waited to handle it alone),
-- if it is still that change and nobody alive holds it; counts a takeover as `claim` does (not
-- for a claim made before the server last started).
WITH alive AS (
    SELECT objid::integer AS worker_id FROM pg_locks
    WHERE locktype = 'advisory' AND classid = 28275 AND objsubid = 2 AND granted
)
UPDATE nearsync.index_tracking t
SET claimed_by = %(worker)s, claimed_at = clock_timestamp(),
    takeovers = t.takeovers + (t.claimed_by IS NOT NULL AND t.claimed_by <> %(worker)s
                               AND t.claimed_at >= pg_postmaster_start_time())::integer
WHERE t.queue = %(queue)s AND t.table_name = %(table)s AND t.record_id = %(record_id)s AND t.seq = %(seq)s
  AND (t.claimed_by IS NULL OR t.claimed_by = %(worker)s OR t.claimed_by NOT IN (SELECT worker_id FROM alive))
RETURNING t.table_name, t.record_id, t.op, t.seq, t.changed_at, t.attempts, t.takeovers;

-- name: release_rows
-- Give back some of our claims (the rest of a batch put aside while a suspect record is handled
-- alone): no takeover is counted for them should we stop meanwhile.
UPDATE nearsync.index_tracking t SET claimed_by = NULL, claimed_at = NULL
FROM unnest(%(record_ids)b::text[], %(seqs)b::bigint[]) AS r(record_id, seq)
WHERE t.queue = %(queue)s AND t.table_name = %(table)s AND t.record_id = r.record_id AND t.seq = r.seq
  AND t.claimed_by = %(worker)s;

-- name: enqueue
-- Put records on a queue (the dedup queue after indexing) with the sequence they were indexed
-- at; a pending row with a newer sequence wins. Same coalescing as the triggers.
INSERT INTO nearsync.index_tracking AS t (queue, table_name, record_id, op, seq, changed_at)
SELECT %(queue)s, %(table)s, e.record_id, e.op, e.seq, e.changed_at
FROM unnest(%(record_ids)b::text[], %(ops)b::text[], %(seqs)b::bigint[], %(changed_ats)b::timestamptz[])
     AS e(record_id, op, seq, changed_at)
ON CONFLICT (queue, table_name, record_id) DO UPDATE SET
    op = excluded.op, seq = excluded.seq, changed_at = excluded.changed_at,
    claimed_by = NULL, claimed_at = NULL, attempts = 0, takeovers = 0, not_before = NULL, last_error = NULL
WHERE t.seq < excluded.seq;

-- name: enqueue_fresh
-- Put records on a queue with a fresh sequence (repair: missing, orphaned or drifted documents).
INSERT INTO nearsync.index_tracking AS t (queue, table_name, record_id, op, seq, changed_at)
SELECT %(queue)s, %(table)s, e.record_id, e.op, nextval('nearsync.change_seq'), clock_timestamp()
FROM unnest(%(record_ids)b::text[], %(ops)b::text[]) AS e(record_id, op)
ON CONFLICT (queue, table_name, record_id) DO UPDATE SET
    op = excluded.op, seq = excluded.seq, changed_at = excluded.changed_at,
    claimed_by = NULL, claimed_at = NULL, attempts = 0, takeovers = 0, not_before = NULL, last_error = NULL;

-- name: has_due
-- Whether a queue has anything due (batch mode opens its window only then); for the index queue
-- that includes change-log rows not yet relayed.
SELECT EXISTS (
    SELECT 1 FROM nearsync.index_tracking
    WHERE queue = %(queue)s AND (not_before IS NULL OR not_before <= clock_timestamp())
) OR (%(queue)s = 'index' AND EXISTS (SELECT 1 FROM nearsync.change_log)) AS due;

-- name: notify
SELECT pg_notify(%(channel)s, %(payload)s);

-- name: queue_status
-- Per queue: records pending (tracking rows and change-log rows not yet relayed, one per record),
-- the age of the oldest pending change (s), claimed and retrying records.
SELECT queue, count(*)::bigint AS pending,
       coalesce(extract(epoch FROM clock_timestamp() - min(changed_at)), 0)::float8 AS oldest_age_s,
       count(*) FILTER (WHERE claimed)::bigint AS claimed,
       count(*) FILTER (WHERE retrying)::bigint AS retrying
FROM (SELECT queue, min(changed_at) AS changed_at, bool_or(claimed_by IS NOT NULL) AS claimed,
             bool_or(attempts > 0) AS retrying
      FROM nearsync.pending_changes GROUP BY queue, table_name, record_id) AS p
GROUP BY queue ORDER BY queue;
