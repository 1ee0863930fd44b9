-- The dedup worker's named queries (daemon.dedup).

-- name: dedup_lock
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- Serialise link/cluster/flag rewrites per table (scoring itself runs in parallel).
SELECT pg_advisory_xact_lock(28276, hashtext(%(table)s));

-- name: delete_links_of
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- Drop the links of the given records and return the records whose clusters must be rebuilt: the
-- given ones, their former partners, every member of the clusters any of these belonged to, and
-- every member of the parts (nearsync.dedup_parts) these or the new partners (partners) were in.
-- One row per record and reason, (id, part_id, level, cluster_id, original_id): a given record or
-- former partner with NULLs, a cluster member with its cluster row, a part member with its part
-- row; so the worker knows the stored part row of each of these records and of the partners
-- (none when no row came), and the stored cluster row of each of the first and of the cluster
-- members, and leaves the rows it would rewrite unchanged alone.
-- Driven from the few seeds whatever the planner's estimates: each seed's cluster and part through
-- the primary key, each distinct cluster's and part's members through its index (LATERAL
-- subqueries that OFFSET 0 keeps from being flattened). An OR of the seeds and the partners in one
-- join condition made the planner scan the whole dedup_parts table, and a part was listed once per
-- seed in it (20,000 product listings, a part of 773 records: 3.0 ms against ~0.6 ms a call; a
-- record in no part: 1.2 ms against 0.2 ms; the scan grows with the table); as plain IN joins,
-- statistics taken while the tables were empty made it scan every part row and join each to its
-- part (up to 260 ms a call).
WITH gone AS (
    DELETE FROM nearsync.dedup_links
    WHERE table_name = %(table)s AND (a = ANY(%(ids)b::text[]) OR b = ANY(%(ids)b::text[]))
    RETURNING a, b
), seeds AS (
    SELECT unnest(%(ids)b::text[]) AS id UNION SELECT a FROM gone UNION SELECT b FROM gone
), clusters_in AS MATERIALIZED (
    SELECT DISTINCT c.cluster_id
    FROM seeds s CROSS JOIN LATERAL (
        SELECT c1.cluster_id FROM nearsync.clusters c1
        WHERE c1.table_name = %(table)s AND c1.record_id = s.id OFFSET 0
    ) c
), parts_in AS MATERIALIZED (
    SELECT DISTINCT p.part_id
    FROM (SELECT id FROM seeds UNION SELECT unnest(%(partners)b::text[])) s CROSS JOIN LATERAL (
        SELECT p1.part_id FROM nearsync.dedup_parts p1
        WHERE p1.table_name = %(table)s AND p1.record_id = s.id OFFSET 0
    ) p
)
SELECT id, NULL::text AS part_id, NULL::real AS level, NULL::text AS cluster_id, NULL::text AS original_id
FROM seeds
UNION ALL
SELECT m.record_id, NULL, NULL, m.cluster_id, m.original_id FROM clusters_in k CROSS JOIN LATERAL (
    SELECT c2.record_id, c2.cluster_id, c2.original_id FROM nearsync.clusters c2
    WHERE c2.table_name = %(table)s AND c2.cluster_id = k.cluster_id OFFSET 0
) m
UNION ALL
SELECT m.record_id, m.part_id, m.level, NULL, NULL FROM parts_in k CROSS JOIN LATERAL (
    SELECT p2.record_id, p2.part_id, p2.level FROM nearsync.dedup_parts p2
    WHERE p2.table_name = %(table)s AND p2.part_id = k.part_id OFFSET 0
) m;

-- name: insert_links
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
INSERT INTO nearsync.dedup_links AS l (table_name, a, b, score, reasons, summary)
SELECT %(table)s, x.a, x.b, x.score, x.reasons, x.summary
FROM unnest(%(a)b::text[], %(b)b::text[], %(score)b::real[], %(reasons)b::jsonb[], %(summary)b::text[])
     AS x(a, b, score, reasons, summary)
ON CONFLICT (table_name, a, b) DO UPDATE SET
    score = excluded.score, reasons = excluded.reasons, summary = excluded.summary, scored_at = now();

-- name: component_links
-- The connected component(s) of the given records over the links scored at least min_score
-- (at most max_nodes records; the given ones come first) and those links among them, in one row:
-- ids, then the links' ends and scores as parallel arrays (NULL when there is none). Not their
-- reasons and summaries: decoding every link's reasons of a component of ~800 records took ~20 ms
-- of the worker's time, and only flags need them (upsert_flags copies them from the rows). Each step follows a record's links in both
-- directions through the two indexes (a LATERAL union, not an OR join, which the planner cannot
-- drive from an index). The links among the nodes are those from a node (each node's own index
-- scan of a, in a LATERAL subquery that OFFSET 0 keeps from being flattened) to a node (a hashed
-- semi-join: nodes are distinct, as UNION makes them); "= ANY" of the nodes' array tested each
-- link's b against the array element by element (2,000 nodes, 3,600 links: 120-140 ms against
-- 30-40 ms, the same rows). As a plain join, the planner, which estimates the nodes at about
-- max_nodes whatever the walk finds, read the whole link table into a hash for a component of 2 or
-- 3 records (20,000 product listings, 14,000 links: 5.7 ms against 0.65 ms a walk, growing with the
-- table); and "touching" is MATERIALIZED so that the semi-join's hash of the nodes is built once,
-- not once per node (a component of 773 records: 105 ms against 18 ms).
WITH RECURSIVE comp(id) AS (
    SELECT unnest(%(ids)b::text[])
    UNION
    SELECT x.id
    FROM comp CROSS JOIN LATERAL (
        SELECT l.b AS id FROM nearsync.dedup_links l
        WHERE l.table_name = %(table)s AND l.a = comp.id AND l.score >= %(min_score)s
        UNION ALL
        SELECT l.a FROM nearsync.dedup_links l
        WHERE l.table_name = %(table)s AND l.b = comp.id AND l.score >= %(min_score)s
    ) x
), nodes AS MATERIALIZED (
    SELECT id FROM comp LIMIT %(max_nodes)s
), touching AS MATERIALIZED (
    SELECT n.id AS a, l.b, l.score
    FROM nodes n CROSS JOIN LATERAL (
        SELECT l.b, l.score FROM nearsync.dedup_links l
        WHERE l.table_name = %(table)s AND l.a = n.id AND l.score >= %(min_score)s
        OFFSET 0
    ) l
), among AS (
    SELECT t.a, t.b, t.score FROM touching t WHERE t.b IN (SELECT id FROM nodes)
)
SELECT (SELECT array_agg(id) FROM nodes) AS ids, array_agg(a) AS a, array_agg(b) AS b, array_agg(score) AS score
FROM among;

-- name: links_around
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- The links scored at least min_score that touch the given records, in one row: "closed", true
-- when none of them leads out of the given records (they are then a union of whole components
-- over those links: component_links from them would find exactly them), then the links from a
-- given record (all the links among them when closed) as parallel arrays of ends and scores (NULL
-- when there is none). Each record's links are one index scan per direction (LATERAL subqueries
-- that OFFSET 0 keeps from being flattened), where component_links's recursive walk scans each
-- record's links three times and hashes every step: the worker's first walk starts from records
-- whose stored parts it already holds (delete_links_of), so the walk rarely finds anything more
-- (20,000 product listings, a part of 782 records: 18-47 ms against 49-97 ms a call, load 5).
WITH ids AS MATERIALIZED (
    SELECT DISTINCT unnest(%(ids)b::text[]) AS id
), out AS MATERIALIZED (
    SELECT i.id AS a, l.b, l.score FROM ids i CROSS JOIN LATERAL (
        SELECT l1.b, l1.score FROM nearsync.dedup_links l1
        WHERE l1.table_name = %(table)s AND l1.a = i.id AND l1.score >= %(min_score)s OFFSET 0
    ) l
)
SELECT NOT EXISTS (SELECT 1 FROM out WHERE out.b NOT IN (SELECT id FROM ids))
       AND NOT EXISTS (SELECT 1 FROM ids i CROSS JOIN LATERAL (
           SELECT 1 FROM nearsync.dedup_links l2
           WHERE l2.table_name = %(table)s AND l2.b = i.id AND l2.score >= %(min_score)s
             AND l2.a NOT IN (SELECT id FROM ids) OFFSET 0) x) AS closed,
       (SELECT array_agg(a) FROM out) AS a, (SELECT array_agg(b) FROM out) AS b,
       (SELECT array_agg(score) FROM out) AS score;

-- name: clear_clusters_of
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- Remove the cluster rows of the given records (not in a cluster any more): the worker sends only
-- the records that left a re-clustered component. Sending the whole component with the records to
-- keep filtered a scan of the table by both arrays (a part of 773 of 20,000 product listings:
-- 1-2 ms per table against ~0.05 ms through the primary key for the few that leave).
DELETE FROM nearsync.clusters
WHERE table_name = %(table)s AND record_id = ANY(%(ids)b::text[]);

-- name: upsert_clusters
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- A row whose cluster and original are unchanged is left alone (no new row version, no index
-- entry: re-deduplicating a record of a large cluster rewrote every member's row before).
INSERT INTO nearsync.clusters AS c (table_name, record_id, cluster_id, original_id)
SELECT %(table)s, x.record_id, x.cluster_id, x.original_id
FROM unnest(%(record_ids)b::text[], %(cluster_ids)b::text[], %(original_ids)b::text[]) AS x(record_id, cluster_id, original_id)
ON CONFLICT (table_name, record_id) DO UPDATE SET cluster_id = excluded.cluster_id, original_id = excluded.original_id
WHERE (c.cluster_id, c.original_id) IS DISTINCT FROM (excluded.cluster_id, excluded.original_id);

-- name: clear_parts_of
-- Remove the part rows of the given records (not in a part of two or more any more).
DELETE FROM nearsync.dedup_parts
WHERE table_name = %(table)s AND record_id = ANY(%(ids)b::text[]);

-- name: upsert_parts
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- A row whose part and level are unchanged is left alone.
INSERT INTO nearsync.dedup_parts AS p (table_name, record_id, part_id, level)
SELECT %(table)s, x.record_id, x.part_id, x.level
FROM unnest(%(record_ids)b::text[], %(part_ids)b::text[], %(levels)b::real[]) AS x(record_id, part_id, level)
ON CONFLICT (table_name, record_id) DO UPDATE SET part_id = excluded.part_id, level = excluded.level
WHERE (p.part_id, p.level) IS DISTINCT FROM (excluded.part_id, excluded.level);

-- name: clear_flags_of
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- Remove the flags of the given records (not flagged any more).
DELETE FROM nearsync.duplicate_flags
WHERE table_name = %(table)s AND record_id = ANY(%(ids)b::text[]);

-- name: upsert_flags
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- Idempotent: a flag whose kind and original are unchanged keeps its flagged_at, and a flag that
-- is unchanged altogether is not rewritten. A flag whose evidence is a stored link (link_a, link_b
-- given; score and reasons NULL) takes the link row's score, reasons and summary (after the
-- summary given, a prefix), so they do not travel to the worker and back; the others are sent.
-- Each flag's link is one primary-key probe (a LATERAL subquery that OFFSET 0 keeps from being
-- flattened): as a plain LEFT JOIN the planner hashed the whole link table for the flags of a
-- part (20,000 product listings, 13,900 links, the 398 flags of a 782-record part: 10-25 ms against
-- 3-7 ms a call, growing with the link table).
INSERT INTO nearsync.duplicate_flags AS f (table_name, record_id, flag, original_id, cluster_id, score, reasons,
                                           summary, signature_version)
SELECT %(table)s, x.record_id, x.flag, x.original_id, x.cluster_id, coalesce(x.score, l.score),
       coalesce(x.reasons, l.reasons), x.summary || coalesce(l.summary, ''), x.sig_version
FROM unnest(%(record_ids)b::text[], %(flags)b::text[], %(original_ids)b::text[], %(cluster_ids)b::text[],
            %(scores)b::real[], %(reasons)b::jsonb[], %(summaries)b::text[], %(sig_versions)b::integer[],
            %(link_a)b::text[], %(link_b)b::text[])
     AS x(record_id, flag, original_id, cluster_id, score, reasons, summary, sig_version, link_a, link_b)
LEFT JOIN LATERAL (
    SELECT l1.score, l1.reasons, l1.summary FROM nearsync.dedup_links l1
    WHERE l1.table_name = %(table)s AND l1.a = x.link_a AND l1.b = x.link_b OFFSET 0
) l ON true
ON CONFLICT (table_name, record_id) DO UPDATE SET
    flag = excluded.flag, original_id = excluded.original_id, cluster_id = excluded.cluster_id,
    score = excluded.score, reasons = excluded.reasons, summary = excluded.summary,
    signature_version = excluded.signature_version,
    flagged_at = CASE WHEN (f.flag, f.original_id) IS DISTINCT FROM (excluded.flag, excluded.original_id)
                      THEN now() ELSE f.flagged_at END
WHERE (f.flag, f.original_id, f.cluster_id, f.score, f.reasons, f.summary, f.signature_version)
      IS DISTINCT FROM (excluded.flag, excluded.original_id, excluded.cluster_id, excluded.score, excluded.reasons,
                        excluded.summary, excluded.signature_version);

-- name: flags_of_table
SELECT record_id, flag, original_id, cluster_id, score, summary, reasons FROM nearsync.duplicate_flags
WHERE table_name = %(table)s ORDER BY record_id;

-- name: links_of_table
SELECT a, b, score, summary, reasons FROM nearsync.dedup_links WHERE table_name = %(table)s;

-- name: clusters_of_table
SELECT record_id, cluster_id, original_id FROM nearsync.clusters WHERE table_name = %(table)s;

-- name: links_of
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
SELECT a, b FROM nearsync.dedup_links
WHERE table_name = %(table)s AND (a = ANY(%(ids)b::text[]) OR b = ANY(%(ids)b::text[]));

-- name: set_cap_bounds
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- Under the dedup lock, for the records of a batch: the boundary of each capped lookup (migration 0021:
-- the shared-key count of its last scored candidate, and the ids of the scored candidates tied at it:
-- ids[i]'s are counts[i] elements of the flat tied array from offs[i]) replaces the record's row, and
-- the rows of the batch's other records (lookup not capped, or record gone) are removed.
WITH gone AS (
    DELETE FROM nearsync.dedup_cap_bounds b
    WHERE b.table_name = %(table)s AND b.record_id = ANY(%(uncapped)b::text[])
), u AS (
    SELECT u.record_id, u.matched, u.off, u.n
    FROM unnest(%(ids)b::text[], %(matched)b::integer[], %(offs)b::integer[], %(counts)b::integer[])
         AS u(record_id, matched, off, n)
)
INSERT INTO nearsync.dedup_cap_bounds AS b (table_name, record_id, matched, tied)
SELECT %(table)s, u.record_id, u.matched, (%(tied)b::text[])[u.off + 1 : u.off + u.n]
FROM u
ON CONFLICT (table_name, record_id) DO UPDATE SET matched = excluded.matched, tied = excluded.tied;

-- name: cap_bounds_of
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- The capped-lookup boundaries of the given records (set_cap_bounds): record_id, matched, tied; none
-- for a record whose last lookup was not capped or that was never processed.
SELECT record_id, matched, tied FROM nearsync.dedup_cap_bounds
WHERE table_name = %(table)s AND record_id = ANY(%(ids)b::text[]);

-- name: sweep_start
-- The table's sweep row (migration 0023), made at a worker's first sweep; a worker starting (or its
-- sweep reconnecting) marks the current pass changed (migration 0024): its settings may be new, and
-- a chunk it held when it stopped may not have been processed.
INSERT INTO nearsync.dedup_sweeps AS s (table_name) VALUES (%(table)s)
ON CONFLICT (table_name) DO UPDATE SET changed = true WHERE NOT s.changed;

-- name: sweep_changed
-- Something the flags depend on changed (migration 0024): a change of the table processed from the
-- dedup queue (in its batch's transaction, under the dedup lock), a moderator's decision (also under
-- it), a record the sweep could not process. The current pass cannot settle, and a resting sweep
-- starts a pass. Writes only when the flag is not set yet (one write per pass at most): a pass that
-- starts meanwhile processes its chunks under the dedup lock, after the change.
UPDATE nearsync.dedup_sweeps SET changed = true WHERE table_name = %(table)s AND NOT changed;

-- name: sweep_changed_locking
-- sweep_changed for a change that a sweep chunk reads without the dedup lock (a new corpus
-- snapshot, read at the start of each batch): it always writes, so the row stays locked until the
-- change commits and a pass cannot start between the two (sweep_next waits for the lock).
UPDATE nearsync.dedup_sweeps SET changed = true WHERE table_name = %(table)s;

-- name: sweep_next
-- The next chunk of the dedup worker's sweep (daemon.dedup.sweep): up to %(limit)s live records of the
-- table (those with a lookup row: every signed document) after the row's after_id in the order of
-- their ids as text ('' at a pass's start, when an id '' is taken too), taken under the row's lock,
-- so a second worker waits for the first's statement and then takes the next chunk. The cursor
-- moves past them, or back to the start when fewer were left: the chunk ends the pass (last = true;
-- the pass's duration in s is kept; sweep_chunk_done counts the pass once the chunk is processed).
-- The first chunk of a pass starts it: pass_no + 1, pass_started_at now, changed cleared, handed 1,
-- done 0. Back at the start, nothing is handed out or written while the pass that just ended has a
-- chunk not reported processed, handed out less than %(lease_s)s s ago (waiting), or when every
-- chunk of it was processed and nothing changed since it started (resting: it gave a clean pass's
-- flags; until changed is set). A table with no record ends no pass. Returns one row (ids, last,
-- last_pass_s, resting, pass_no: the chunk's pass), or none when sweep_start made no row.
WITH cur AS (
    SELECT after_id, pass_no, resting,
           (after_id = '' AND done < handed
            AND handed_at > clock_timestamp() - make_interval(secs => %(lease_s)s)) AS waiting
    FROM nearsync.dedup_sweeps WHERE table_name = %(table)s FOR UPDATE
), picked AS (
    SELECT d.record_id FROM cur CROSS JOIN LATERAL (
        SELECT l.record_id FROM nearsync.document_lookup l
        WHERE NOT (cur.resting OR cur.waiting) AND l.table_name = %(table)s
          AND (l.record_id > cur.after_id OR (cur.after_id = '' AND l.record_id = ''))
        ORDER BY l.record_id LIMIT %(limit)s) AS d
), got AS (
    SELECT count(*)::integer AS n, max(p.record_id) AS last_id,
           (count(*) < %(limit)s AND (count(*) > 0 OR (SELECT after_id FROM cur) <> '')) AS last,
           ((SELECT after_id FROM cur) = '' AND count(*) > 0) AS starting
    FROM picked p
), moved AS (
    UPDATE nearsync.dedup_sweeps s
    SET after_id = CASE WHEN got.last OR got.n = 0 THEN '' ELSE got.last_id END,
        pass_no = s.pass_no + got.starting::integer,
        pass_started_at = CASE WHEN got.starting THEN clock_timestamp() ELSE s.pass_started_at END,
        changed = s.changed AND NOT got.starting,
        handed = CASE WHEN got.starting THEN 1 ELSE s.handed + (got.n > 0)::integer END,
        done = CASE WHEN got.starting THEN 0 ELSE s.done END,
        handed_at = CASE WHEN got.n > 0 THEN clock_timestamp() ELSE s.handed_at END,
        last_pass_s = CASE WHEN got.last AND got.starting THEN 0.0
                           WHEN got.last THEN extract(epoch FROM clock_timestamp() - s.pass_started_at)::float8
                           ELSE s.last_pass_s END
    FROM got
    WHERE s.table_name = %(table)s AND NOT (SELECT resting OR waiting FROM cur)
    RETURNING got.last, s.last_pass_s, s.pass_no
)
SELECT coalesce((SELECT array_agg(record_id ORDER BY record_id) FROM picked), '{}'::text[]) AS ids,
       coalesce(m.last, false) AS last, m.last_pass_s, cur.resting, coalesce(m.pass_no, cur.pass_no) AS pass_no
FROM cur LEFT JOIN moved m ON true;

-- name: sweep_chunk_done
-- A chunk of the sweep has been processed (its records, those that failed alone included, which
-- marked the table changed): it counts towards done when it belongs to the current pass (%(pass_no)s
-- and %(chunk)s: the chunk held records) and, when it was the pass's last (%(last)s), the pass is
-- complete. Returns the passes completed.
UPDATE nearsync.dedup_sweeps
SET done = done + (pass_no = %(pass_no)s AND %(chunk)s)::integer, passes = passes + %(last)s::integer
WHERE table_name = %(table)s RETURNING passes;

-- name: sweep_status
-- The table's sweep (migrations 0023, 0024): the last record id handed out ('' at a pass's start),
-- passes completed (their last chunk processed), when the current (or, back at the start, the last)
-- pass started, the last pass's duration (s), and whether it rests (every chunk of the last pass
-- processed, nothing changed since it started); then the live records it walks (records) and those
-- up to the cursor (position; 0 at the start), counted on document_lookup's primary key, and the
-- current pass's age (s), for the pass's progress in `nearsync status`; no row before a worker first
-- swept.
SELECT s.after_id, s.passes, s.pass_started_at, s.last_pass_s, s.resting,
       (SELECT count(*) FROM nearsync.document_lookup l WHERE l.table_name = s.table_name) AS records,
       CASE WHEN s.after_id = '' THEN 0
            ELSE (SELECT count(*) FROM nearsync.document_lookup l
                  WHERE l.table_name = s.table_name AND l.record_id <= s.after_id) END AS position,
       extract(epoch FROM clock_timestamp() - s.pass_started_at)::float8 AS pass_age_s
FROM nearsync.dedup_sweeps s WHERE s.table_name = %(table)s;

-- name: sweeps
-- Every table's sweep (migrations 0023, 0024), for the dedup worker's metrics: table_name, passes,
-- last_pass_s, resting.
SELECT table_name, passes, last_pass_s, resting FROM nearsync.dedup_sweeps ORDER BY table_name;
