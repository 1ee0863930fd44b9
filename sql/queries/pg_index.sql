-- The PostgreSQL index backend (daemon.backends.postgres). Versions are external: a write
-- applies only when its version is newer than the stored one; deletes leave a tombstone that
-- keeps their version, so a late older upsert cannot resurrect a deleted record.

-- name: upsert_documents
-- The bottom-k sketch and the MinHash are kept apart from the signature jsonb, as bigint[]: result-set
-- dedup reads 0.5 kB inline per record instead of de-TOASTing the signature, and a write does not
-- parse 128 jsonb numerics per document. They and the hashed candidate keys (key_hashes, under the
-- GIN index of migration 0010) each come as one packed binary array for the whole batch, sliced per
-- row by offset and length (length -1: NULL); scope, fields, signature and keys come as JSON text
-- (daemon.backends.pg_encoding).
-- The keys change only here and in delete_documents, in the row whose version they belong to and
-- under its lock: a concurrent writer of the same record waits for the lock, then re-checks the
-- version on the committed row (applies only when newer), so no stale key is ever left behind.
INSERT INTO nearsync.documents AS d (table_name, record_id, version, deleted, scope, fields, signature, keys,
                                     bottomk, minhash, key_hashes, indexed_at)
SELECT %(table)s, u.record_id, u.version, false, u.scope, u.fields, u.signature, u.keys,
       CASE WHEN u.bottomk_len >= 0
            THEN (%(bottomk)b::bigint[])[u.bottomk_off + 1 : u.bottomk_off + u.bottomk_len] END,
       CASE WHEN u.minhash_len >= 0
            THEN (%(minhash)b::bigint[])[u.minhash_off + 1 : u.minhash_off + u.minhash_len] END,
       CASE WHEN u.hashes_len >= 0
            THEN (%(key_hashes)b::bigint[])[u.hashes_off + 1 : u.hashes_off + u.hashes_len] END,
       clock_timestamp()
FROM unnest(%(record_ids)b::text[], %(versions)b::bigint[], %(scopes)b::jsonb[], %(fields)b::jsonb[],
            %(signatures)b::jsonb[], %(keys)b::jsonb[], %(bottomk_offs)b::integer[], %(bottomk_lens)b::integer[],
            %(minhash_offs)b::integer[], %(minhash_lens)b::integer[], %(hashes_offs)b::integer[],
            %(hashes_lens)b::integer[])
     AS u(record_id, version, scope, fields, signature, keys, bottomk_off, bottomk_len, minhash_off, minhash_len,
          hashes_off, hashes_len)
ON CONFLICT (table_name, record_id) DO UPDATE SET
    version = excluded.version, deleted = false, scope = excluded.scope, fields = excluded.fields,
    signature = excluded.signature, keys = excluded.keys, bottomk = excluded.bottomk,
    minhash = excluded.minhash, key_hashes = excluded.key_hashes, indexed_at = excluded.indexed_at
WHERE d.version < excluded.version
RETURNING d.record_id;

-- name: delete_documents
INSERT INTO nearsync.documents AS d (table_name, record_id, version, deleted, indexed_at)
SELECT %(table)s, u.record_id, u.version, true, clock_timestamp()
FROM unnest(%(record_ids)b::text[], %(versions)b::bigint[]) AS u(record_id, version)
ON CONFLICT (table_name, record_id) DO UPDATE SET
    version = excluded.version, deleted = true, scope = '{}', fields = NULL, signature = NULL,
    keys = NULL, bottomk = NULL, minhash = NULL, key_hashes = NULL, indexed_at = excluded.indexed_at
WHERE d.version < excluded.version
RETURNING d.record_id;

-- name: get_documents
SELECT record_id, version, scope, fields, signature, keys, bottomk, minhash FROM nearsync.documents
WHERE table_name = %(table)s AND record_id = ANY(%(record_ids)b::text[]) AND NOT deleted;

-- name: get_versions
SELECT record_id, version FROM nearsync.documents
WHERE table_name = %(table)s AND record_id = ANY(%(record_ids)b::text[]) AND NOT deleted;

-- name: get_sketches
-- Only the version and the bottom-k sketch (result-set dedup): the rest of the document is not
-- read. Documents written before migration 0007 still hold the sketch in the signature.
SELECT record_id, version, bottomk,
       CASE WHEN bottomk IS NULL THEN signature->'bottomk' END AS bottomk_in_signature
FROM nearsync.documents
WHERE table_name = %(table)s AND record_id = ANY(%(record_ids)b::text[]) AND NOT deleted;

-- name: candidates
-- Records sharing at least %(min_match)s hashed keys (the hash folds in table and scope, so the
-- lookup is blocked by scope for free), best first, with their documents; with %(exclude_source)s,
-- records whose source field equals it are left out before the limit. The GIN index finds the
-- documents sharing any key (&&); the shared keys are counted from each one's array.
SELECT d.record_id, d.version, d.scope, d.fields, d.signature, d.keys, d.bottomk, d.minhash, m.matched
FROM nearsync.documents d
CROSS JOIN LATERAL (SELECT count(*)::integer AS matched FROM unnest(d.key_hashes) AS h(key)
                    WHERE h.key = ANY(%(keys)b::bigint[])) m
WHERE d.key_hashes && %(keys)b::bigint[] AND d.table_name = %(table)s AND NOT d.deleted
  AND d.record_id IS DISTINCT FROM %(exclude_id)s
  AND (%(exclude_source)s::text IS NULL OR d.fields ->> 'source' IS DISTINCT FROM %(exclude_source)s::text)
  AND m.matched >= %(min_match)s
ORDER BY m.matched DESC, d.record_id
LIMIT %(limit)s;

-- name: candidates_many
-- candidates for several lookups at once: lookup qids[i] has hashed key keys[i]; exclude_ids[q] is
-- lookup q's own record (NULL for none); exclude_sources[q] leaves out candidates whose source field
-- equals it (NULL: no filter). Per lookup, best first, at most %(limit)s candidates: the lookup, the
-- match count, then the document in the column order of get_documents (one round trip; a record
-- that is a candidate of several lookups comes once per lookup).
-- One GIN index scan per (lookup, key) (@> ARRAY[key]); a document's shared keys are counted by
-- grouping those hits, since both arrays hold distinct hashes. (Counting them from each found
-- document's array, unnest(key_hashes) against ANY(keys), compares ~40 x ~40 hashes per hit, and a
-- lookup whose keys include a large block has hundreds of hits: about 4x slower on product
-- listings.)
WITH hits AS (
    SELECT t.qid, d.record_id, count(*)::integer AS matched
    FROM unnest(%(qids)b::integer[], %(keys)b::bigint[]) AS t(qid, key)
    JOIN nearsync.documents d
      ON d.key_hashes @> ARRAY[t.key] AND d.table_name = %(table)s AND NOT d.deleted
    GROUP BY t.qid, d.record_id
    HAVING count(*) >= %(min_match)s
), ranked AS (
    SELECT h.qid, h.record_id, h.matched,
           row_number() OVER (PARTITION BY h.qid ORDER BY h.matched DESC, h.record_id) AS rn
    FROM hits h
    WHERE h.record_id IS DISTINCT FROM (%(exclude_ids)s::text[])[h.qid + 1]
      AND ((%(exclude_sources)s::text[])[h.qid + 1] IS NULL OR NOT EXISTS (
          SELECT 1 FROM nearsync.documents s
          WHERE s.table_name = %(table)s AND s.record_id = h.record_id
            AND s.fields ->> 'source' = (%(exclude_sources)s::text[])[h.qid + 1]))
)
SELECT r.qid, r.matched, d.record_id, d.version, d.scope, d.fields, d.signature, d.keys, d.bottomk, d.minhash
FROM ranked r JOIN nearsync.documents d ON d.table_name = %(table)s AND d.record_id = r.record_id
WHERE r.rn <= %(limit)s AND NOT d.deleted
ORDER BY r.qid, r.rn;

-- name: scope_members
-- The members of small scopes (exhaustive comparison): lookup qids[i]'s scope is the set of documents
-- holding the hashed scope key keys[i] (daemon.backends.base.SCOPE_KEY hashed with the scope) in their
-- key_hashes. n counts at most %(limit)s + 1 of them through the GIN index (@>), once per distinct
-- scope of the call, so a large scope costs limit + 1 matches once (the lookups of a global scope
-- share one count); only a scope of n <= %(limit)s has its documents read, less the lookup's own
-- record (exclude_ids), those of its excluded source (exclude_sources) and, when the lookup has title
-- tokens (toks of tok_qids), those whose title shares none of them. One row per member, or one row
-- with a NULL document for a lookup with none, in record_id order.
WITH q AS (
    SELECT t.qid, t.key FROM unnest(%(qids)b::integer[], %(keys)b::bigint[]) AS t(qid, key)
), t AS (
    SELECT u.qid, u.tok FROM unnest(%(tok_qids)b::integer[], %(toks)b::text[]) AS u(qid, tok)
), counted AS MATERIALIZED (
    SELECT k.key,
           (SELECT count(*) FROM (SELECT 1 FROM nearsync.documents c
                                  WHERE c.key_hashes @> ARRAY[k.key] AND c.table_name = %(table)s
                                    AND NOT c.deleted
                                  LIMIT %(limit)s + 1) AS x)::integer AS n
    FROM (SELECT DISTINCT key FROM q) AS k
), sized AS (
    SELECT q.qid, q.key, c.n FROM q JOIN counted c USING (key)
), members AS (
    SELECT s.qid, d.record_id, d.version, d.scope, d.fields, d.signature, d.keys, d.bottomk, d.minhash
    FROM sized s
    JOIN nearsync.documents d ON d.table_name = %(table)s AND d.key_hashes @> ARRAY[s.key] AND NOT d.deleted
    WHERE s.n <= %(limit)s
      AND d.record_id IS DISTINCT FROM (%(exclude_ids)s::text[])[s.qid + 1]
      AND (NOT EXISTS (SELECT 1 FROM t WHERE t.qid = s.qid)
           OR EXISTS (SELECT 1 FROM t WHERE t.qid = s.qid AND (d.signature -> 'tokens') ? t.tok))
      AND ((%(exclude_sources)s::text[])[s.qid + 1] IS NULL
           OR d.fields ->> 'source' IS DISTINCT FROM (%(exclude_sources)s::text[])[s.qid + 1])
)
SELECT s.qid, s.n, m.record_id, m.version, m.scope, m.fields, m.signature, m.keys, m.bottomk, m.minhash
FROM sized s LEFT JOIN members m ON m.qid = s.qid
ORDER BY s.qid, m.record_id;

-- name: count_documents
SELECT count(*)::bigint AS n FROM nearsync.documents WHERE table_name = %(table)s AND NOT deleted;

-- name: iter_versions
SELECT record_id, version FROM nearsync.documents WHERE table_name = %(table)s AND NOT deleted;

-- name: clear_documents
DELETE FROM nearsync.documents WHERE table_name = %(table)s;

-- name: purge_tombstones
-- Tombstones older than %(older_than_s)s seconds have done their job (no older write is in flight).
DELETE FROM nearsync.documents
WHERE deleted AND indexed_at < clock_timestamp() - make_interval(secs => %(older_than_s)s);
