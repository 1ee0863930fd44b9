-- Moderation: the duplicates queue, moderators' decisions, and the dedup worker's check of them
-- (daemon.api.moderation, daemon.dedup, daemon.evaluate --feedback).

-- name: decisions_among
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- Moderators' decisions on pairs of the given records, with the versions and fingerprints decided
-- on: the dedup worker leaves dismissed pairs unlinked, treats them as cannot-link constraints when
-- it rebuilds a component's clusters, and keeps confirmed flags 'duplicate'.
SELECT d.a, d.b, d.decision, d.a_version, d.b_version, d.a_fingerprint, d.b_fingerprint
FROM nearsync.pair_decisions d
WHERE d.table_name = %(table)s AND d.a = ANY(%(ids)b::text[]) AND d.b = ANY(%(ids)b::text[]);

-- name: moderation_queue
-- Potential duplicates, newest first, with the record and its original as jsonb rows; optional
-- filters: the record's category column value, a minimum score.
SELECT f.record_id, f.original_id, f.flag, f.score, f.summary, f.reasons, f.flagged_at,
       f.record, f.original
FROM nearsync.flagged_records f
WHERE f.flag = 'potential_duplicate'
  AND (%(category)s::text IS NULL OR f.record ->> %(category_col)s::text = %(category)s::text)
  AND (%(min_score)s::float8 IS NULL OR f.score >= %(min_score)s::float8)
ORDER BY f.flagged_at DESC, f.record_id DESC
LIMIT %(limit)s;

-- name: moderation_categories
SELECT DISTINCT f.record ->> %(category_col)s::text AS category
FROM nearsync.flagged_records f
WHERE f.flag = 'potential_duplicate' AND f.record ->> %(category_col)s::text IS NOT NULL
ORDER BY 1;

-- name: flag_for_update
SELECT record_id, flag, original_id, score FROM nearsync.duplicate_flags
WHERE table_name = %(table)s AND record_id = %(record_id)s
FOR UPDATE;

-- name: confirm_flag
UPDATE nearsync.duplicate_flags SET flag = 'duplicate'
WHERE table_name = %(table)s AND record_id = %(record_id)s;

-- name: delete_flag
DELETE FROM nearsync.duplicate_flags WHERE table_name = %(table)s AND record_id = %(record_id)s;

-- name: delete_link
DELETE FROM nearsync.dedup_links WHERE table_name = %(table)s AND a = %(a)s AND b = %(b)s;

-- name: upsert_decision
INSERT INTO nearsync.pair_decisions AS d (table_name, a, b, decision, a_version, b_version, a_fingerprint,
                                          b_fingerprint, decided_by, score)
VALUES (%(table)s, %(a)s, %(b)s, %(decision)s, %(a_version)s, %(b_version)s, %(a_fingerprint)s,
        %(b_fingerprint)s, %(decided_by)s, %(score)s)
ON CONFLICT (table_name, a, b) DO UPDATE SET
    decision = excluded.decision, a_version = excluded.a_version, b_version = excluded.b_version,
    a_fingerprint = excluded.a_fingerprint, b_fingerprint = excluded.b_fingerprint,
    decided_by = excluded.decided_by, decided_at = now(), score = excluded.score;

-- name: decision_of
SELECT decision, a_version, b_version, decided_by, decided_at, score FROM nearsync.pair_decisions
WHERE table_name = %(table)s AND a = %(a)s AND b = %(b)s;

-- name: feedback_pairs
-- Moderators' decisions as labelled pairs (nearsync evaluate --feedback), oldest first.
SELECT table_name, a, b, decision, decided_by, decided_at, score FROM nearsync.pair_decisions
WHERE (%(table)s::text IS NULL OR table_name = %(table)s::text)
ORDER BY decided_at, table_name, a, b;

-- name: serve_health
-- nearsync serve's /healthz: the database answers and holds the nearsync schema (migrated).
SELECT to_regclass('nearsync.flagged_records') IS NOT NULL AS migrated;
