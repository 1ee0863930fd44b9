-- The PostgreSQL index backend (daemon.backends.postgres). Versions are external: a write
-- applies only when its version is newer than the stored one; deletes leave a tombstone that
-- keeps their version, so a late older upsert cannot resurrect a deleted record.

-- name: upsert_documents
-- The bottom-k sketch and the MinHash are kept apart from the signature jsonb, as bigint[]: result-set
-- dedup reads 0.5 kB inline per record instead of de-TOASTing the signature, and a write does not
-- parse 128 jsonb numerics per document. They and the hashed candidate keys (key_hashes, in the
-- lookup table of migration 0020) each come as one packed binary array for the whole batch, sliced per
-- row by offset and length (length -1: NULL); scope, fields, signature and keys come as JSON text
-- (daemon.backends.pg_encoding).
-- One statement writes the documents and their lookup rows (nearsync.document_lookup: version, scope,
-- source, key hashes): the lookup rows are written from the documents upsert's RETURNING, so only for
-- the documents whose version this statement applied, and removed for an applied document without
-- keys (a plain-sync write, or keys the new version no longer has).
-- identifiers (migration 0022): the signature's identifier lists (models, phones, emails and
-- title_codes: those that are arrays), for the dedup worker's candidate screen (get_document_parts),
-- which then does not de-TOAST the signature.
-- Lock rule: the keys change only here and in delete_documents, in the statement that applies their
-- document's version and under that documents row's lock: a concurrent writer of the same record
-- waits for the lock, then re-checks the version on the committed row (applies only when newer, and
-- only then reaches its lookup row), so no stale key is ever left behind.
WITH u AS (
    SELECT u.*
    FROM unnest(%(record_ids)b::text[], %(versions)b::bigint[], %(scopes)b::jsonb[], %(fields)b::jsonb[],
                %(signatures)b::jsonb[], %(keys)b::jsonb[], %(bottomk_offs)b::integer[], %(bottomk_lens)b::integer[],
                %(minhash_offs)b::integer[], %(minhash_lens)b::integer[], %(hashes_offs)b::integer[],
                %(hashes_lens)b::integer[])
         AS u(record_id, version, scope, fields, signature, keys, bottomk_off, bottomk_len, minhash_off, minhash_len,
              hashes_off, hashes_len)
), w AS (
    INSERT INTO nearsync.documents AS d (table_name, record_id, version, deleted, scope, fields, signature, keys,
                                         bottomk, minhash, identifiers, indexed_at)
    SELECT %(table)s, u.record_id, u.version, false, u.scope, u.fields, u.signature, u.keys,
           CASE WHEN u.bottomk_len >= 0
                THEN (%(bottomk)b::bigint[])[u.bottomk_off + 1 : u.bottomk_off + u.bottomk_len] END,
           CASE WHEN u.minhash_len >= 0
                THEN (%(minhash)b::bigint[])[u.minhash_off + 1 : u.minhash_off + u.minhash_len] END,
           CASE WHEN jsonb_typeof(u.signature) = 'object' THEN jsonb_strip_nulls(jsonb_build_object(
               'models', CASE WHEN jsonb_typeof(u.signature -> 'models') = 'array' THEN u.signature -> 'models' END,
               'phones', CASE WHEN jsonb_typeof(u.signature -> 'phones') = 'array' THEN u.signature -> 'phones' END,
               'emails', CASE WHEN jsonb_typeof(u.signature -> 'emails') = 'array' THEN u.signature -> 'emails' END,
               'title_codes', CASE WHEN jsonb_typeof(u.signature -> 'title_codes') = 'array'
                                   THEN u.signature -> 'title_codes' END)) END,
           clock_timestamp()
    FROM u
    ON CONFLICT (table_name, record_id) DO UPDATE SET
        version = excluded.version, deleted = false, scope = excluded.scope, fields = excluded.fields,
        signature = excluded.signature, keys = excluded.keys, bottomk = excluded.bottomk,
        minhash = excluded.minhash, identifiers = excluded.identifiers, indexed_at = excluded.indexed_at
    WHERE d.version < excluded.version
    RETURNING d.record_id
), keyed AS (
    INSERT INTO nearsync.document_lookup AS l (table_name, record_id, version, scope, source, key_hashes)
    SELECT %(table)s, u.record_id, u.version, u.scope, u.fields ->> 'source',
           (%(key_hashes)b::bigint[])[u.hashes_off + 1 : u.hashes_off + u.hashes_len]
    FROM w JOIN u ON u.record_id = w.record_id
    WHERE u.hashes_len >= 0
    ON CONFLICT (table_name, record_id) DO UPDATE SET
        version = excluded.version, scope = excluded.scope, source = excluded.source,
        key_hashes = excluded.key_hashes
), unkeyed AS (
    DELETE FROM nearsync.document_lookup l
    USING w JOIN u ON u.record_id = w.record_id
    WHERE l.table_name = %(table)s AND l.record_id = w.record_id AND u.hashes_len < 0
)
SELECT record_id FROM w;

-- name: delete_documents
-- A tombstone, and its record's lookup row removed in the same statement (the lock rule of
-- upsert_documents: only when this statement applied the tombstone's version).
WITH w AS (
    INSERT INTO nearsync.documents AS d (table_name, record_id, version, deleted, indexed_at)
    SELECT %(table)s, u.record_id, u.version, true, clock_timestamp()
    FROM unnest(%(record_ids)b::text[], %(versions)b::bigint[]) AS u(record_id, version)
    ON CONFLICT (table_name, record_id) DO UPDATE SET
        version = excluded.version, deleted = true, scope = '{}', fields = NULL, signature = NULL,
        keys = NULL, bottomk = NULL, minhash = NULL, identifiers = NULL, indexed_at = excluded.indexed_at
    WHERE d.version < excluded.version
    RETURNING d.record_id
), unkeyed AS (
    DELETE FROM nearsync.document_lookup l USING w WHERE l.table_name = %(table)s AND l.record_id = w.record_id
)
SELECT record_id FROM w;

-- name: get_documents
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
SELECT record_id, version, scope, fields, signature, keys, bottomk, minhash FROM nearsync.documents
WHERE table_name = %(table)s AND record_id = ANY(%(record_ids)b::text[]) AND NOT deleted;

-- name: get_documents_known
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- get_documents for records some of whose documents the caller already holds: known[i] is the
-- version held of record_ids[i] (NULL: none). A row whose version is the known one comes with its
-- document columns NULL and cached = true, so its JSON (often TOASTed) is neither read nor sent;
-- the others come whole, as get_documents returns them. One round trip either way.
SELECT d.record_id, d.version,
       CASE WHEN d.version = k.known THEN NULL ELSE d.scope END AS scope,
       CASE WHEN d.version = k.known THEN NULL ELSE d.fields END AS fields,
       CASE WHEN d.version = k.known THEN NULL ELSE d.signature END AS signature,
       CASE WHEN d.version = k.known THEN NULL ELSE d.keys END AS keys,
       CASE WHEN d.version = k.known THEN NULL ELSE d.bottomk END AS bottomk,
       CASE WHEN d.version = k.known THEN NULL ELSE d.minhash END AS minhash,
       coalesce(d.version = k.known, false) AS cached
FROM unnest(%(record_ids)b::text[], %(known)b::bigint[]) AS k(record_id, known)
JOIN nearsync.documents d ON d.table_name = %(table)s AND d.record_id = k.record_id AND NOT d.deleted;

-- name: get_document_parts
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- Only the named keys of each document's fields and signature, for a candidate screen
-- (daemon.backends.base.CandidateScreen: the dedup worker's lead-field check, which needs a
-- candidate's model numbers and title codes, and drops most candidates of a dense catalogue on
-- them). The MinHash and bottom-k columns (TOASTed: a page of the TOAST table each) and the rest of
-- the JSON are neither read nor sent.
-- A document whose identifiers column (migration 0022) holds every one of the signature keys comes
-- as that column alone (identifiers; fields and signature NULL): the screen reads the document's
-- fields only in place of a missing signature key, and the signature and fields are not
-- de-TOASTed (2.3-2.5 against 1.0-1.1 ms per 46 documents at 100,000 product listings). Any other
-- (stored before 0022, or a screen on other keys) comes as before: identifiers NULL, and fields /
-- signature a jsonb object of those of the keys the document has (NULL when it has none).
SELECT d.record_id, d.version, CASE WHEN s.listed THEN d.identifiers END AS identifiers,
       CASE WHEN NOT s.listed THEN
           (SELECT jsonb_object_agg(k, d.fields -> k) FROM unnest(%(field_keys)s::text[]) AS k WHERE d.fields ? k)
       END AS fields,
       CASE WHEN NOT s.listed THEN
           (SELECT jsonb_object_agg(k, d.signature -> k) FROM unnest(%(signature_keys)s::text[]) AS k
            WHERE d.signature ? k)
       END AS signature
FROM nearsync.documents d
CROSS JOIN LATERAL (SELECT coalesce(d.identifiers ?& %(signature_keys)s::text[], false) AS listed) s
WHERE d.table_name = %(table)s AND d.record_id = ANY(%(record_ids)b::text[]) AND NOT d.deleted;

-- name: get_versions
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
SELECT record_id, version FROM nearsync.documents
WHERE table_name = %(table)s AND record_id = ANY(%(record_ids)b::text[]) AND NOT deleted;

-- name: get_sketches
-- Only the version and the bottom-k sketch (result-set dedup): the rest of the document is not
-- read. Documents written before migration 0007 still hold the sketch in the signature.
SELECT record_id, version, bottomk,
       CASE WHEN bottomk IS NULL THEN signature->'bottomk' END AS bottomk_in_signature
FROM nearsync.documents
WHERE table_name = %(table)s AND record_id = ANY(%(record_ids)b::text[]) AND NOT deleted;

-- name: candidates_many
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- candidates for several lookups at once: lookup qids[i] has hashed key keys[i]; exclude_ids[q] is
-- lookup q's own record (NULL for none); exclude_sources[q] leaves out candidates whose source field
-- equals it (NULL: no filter). Per lookup, best first, at most %(limit)s candidates, as rows
-- qid, rn (the rank within the lookup, from 1), matched, record_id, version, in no particular order
-- (the caller orders them by (qid, rn)). Only the hits come back, with each candidate's version: the
-- caller reads the documents its cache does not hold with get_documents (on a near-duplicate-dense
-- catalogue most candidates of a batch were read by an earlier one, and sending every candidate's
-- ~3 kB of JSON again cost both sides more than that second round trip).
-- One GIN index scan per (lookup, key) (@> ARRAY[key]) on the narrow lookup table (migration 0020:
-- ~0.4 kB rows holding only what is filtered here, where the ~2 kB documents rows made each of a
-- lookup's ~600 hits a page of its own); a document's shared keys are counted by
-- grouping those hits, since both arrays hold distinct hashes. (Counting them from each found
-- document's array, unnest(key_hashes) against ANY(keys), compares ~40 x ~40 hashes per hit:
-- about 4x slower on product listings.) The lookup's own record and its excluded source are
-- filtered on the lookup row the scan has just read, rather than by a second index lookup per hit.
-- A lookup row exists exactly for a live document with keys (upsert_documents, delete_documents).
-- Each lookup is counted and cut to its best %(limit)s on its own (LATERAL: one small in-memory
-- hash aggregate and a top-N sort of its ~260-360 documents), rather than all lookups' hits in one
-- aggregate, one sort of every (lookup, document) pair and a window over them: on a
-- near-duplicate-dense catalogue those are ~53,000 pairs per 200 lookups, more than the default
-- work_mem holds, and both the aggregate and the sort spilled to disk. The same rows; PostgreSQL
-- CPU per 200-lookup call 8 to 22 per cent lower on 20,000 and 100,000 product listings
-- (interleaved runs on a busy machine; what is left is the ~600 heap rows a lookup visits, ~2 us
-- each at 20,000 listings). It also keeps a GIN scan per key when the table has no statistics yet
-- (before the first ANALYZE): 200 lookups on 20,000 listings took 17 s, against 94 s for the old
-- form, which then joined the keys against a materialised copy of the table.
-- A lookup's keys come as one array and its exclusions are taken from the parameter arrays once
-- per lookup (MATERIALIZED keeps the planner from putting the subscripts into the per-hit filter:
-- a text[] subscript walks the array from its start, ~0.6 us at 200 lookups, per hit).
WITH lk AS MATERIALIZED (
    SELECT t.qid, array_agg(t.key) AS keys, (%(exclude_ids)s::text[])[t.qid + 1] AS x_id,
           (%(exclude_sources)s::text[])[t.qid + 1] AS x_src
    FROM unnest(%(qids)b::integer[], %(keys)b::bigint[]) AS t(qid, key)
    GROUP BY t.qid
)
SELECT l.qid, (row_number() OVER (PARTITION BY l.qid ORDER BY c.matched DESC, c.record_id))::integer AS rn,
       c.matched, c.record_id, c.version
FROM lk l CROSS JOIN LATERAL (
    SELECT d.record_id, d.version, count(*)::integer AS matched
    FROM unnest(l.keys) AS k(key)
    JOIN nearsync.document_lookup d
      ON d.key_hashes @> ARRAY[k.key] AND d.table_name = %(table)s
         AND d.record_id IS DISTINCT FROM l.x_id
         AND (l.x_src IS NULL OR d.source IS DISTINCT FROM l.x_src)
    GROUP BY d.record_id, d.version
    HAVING count(*) >= %(min_match)s
    ORDER BY matched DESC, d.record_id
    LIMIT %(limit)s
) AS c;

-- name: scope_members
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- The members of small scopes (exhaustive comparison): lookup qids[i]'s scope is the set of documents
-- whose scope is scopes[i] and that hold the hashed scope key keys[i]
-- (daemon.backends.base.SCOPE_KEY hashed with that scope) in their key_hashes, both read from their
-- lookup rows (nearsync.document_lookup, migration 0020; the scope equality only restates what the
-- hash says, barring a 64-bit collision). n counts at most %(limit)s + 1 of them, once per distinct
-- scope of the call, through the btree index document_lookup_scope (documents_scope of migration
-- 0017 before 0020), which hands out the scope's rows in order and stops at limit + 1: ~0.3 ms whatever the
-- scope's size. (The key is tested with = ANY, which the GIN index cannot serve, so the planner does
-- not AND in a bitmap of the GIN posting list: that reads the whole scope, 6.7 ms for a global scope
-- of 20,000 listings and growing with it.) Only a scope of n <= %(limit)s has its documents read, less the lookup's own
-- record (exclude_ids), those of its excluded source (exclude_sources) and, when the lookup has title
-- tokens (toks of tok_qids), those whose title shares none of them and that hold fewer than
-- %(min_match)s of its hashed candidate keys (lkeys of key_qids); the title tokens are in the
-- document's signature, read only for a member that does not hold enough of the keys.
-- Two kinds of rows in one result, told apart by qid:
--   * a membership (qid NOT NULL): qid, n, rn (the member's place in record_id order, from 1),
--     record_id (one row per member, or one row with a NULL record_id for a lookup with none), then
--     NULL document columns;
--   * a document (qid NULL): NULL, NULL, NULL, then the document in the column order of
--     get_documents, once for each distinct member, however many lookups share its scope.
-- Rows come in no particular order; the caller orders each lookup's members by rn.
WITH q AS (
    SELECT t.qid, t.key, t.scope
    FROM unnest(%(qids)b::integer[], %(keys)b::bigint[], %(scopes)s::text[]::jsonb[]) AS t(qid, key, scope)
), t AS (  -- each lookup's title tokens, and its hashed candidate keys, as one array per lookup
    SELECT u.qid, array_agg(u.tok) AS toks FROM unnest(%(tok_qids)b::integer[], %(toks)b::text[]) AS u(qid, tok)
    GROUP BY u.qid
), lk AS (
    SELECT u.qid, array_agg(u.key) AS keys
    FROM unnest(%(key_qids)b::integer[], %(lkeys)b::bigint[]) AS u(qid, key) GROUP BY u.qid
), counted AS MATERIALIZED (
    SELECT k.key,
           (SELECT count(*) FROM (SELECT 1 FROM nearsync.document_lookup c
                                  WHERE c.table_name = %(table)s AND c.scope = k.scope
                                    AND k.key = ANY(c.key_hashes)
                                  LIMIT %(limit)s + 1) AS x)::integer AS n
    FROM (SELECT DISTINCT key, scope FROM q) AS k
), sized AS (
    SELECT q.qid, q.key, q.scope, c.n, t.toks, lk.keys AS lkeys
    FROM q JOIN counted c USING (key) LEFT JOIN t ON t.qid = q.qid LEFT JOIN lk ON lk.qid = q.qid
), members AS (
    SELECT s.qid, c.record_id
    FROM sized s
    JOIN nearsync.document_lookup c ON c.table_name = %(table)s AND c.key_hashes @> ARRAY[s.key] AND c.scope = s.scope
    WHERE s.n <= %(limit)s
      AND c.record_id IS DISTINCT FROM (%(exclude_ids)s::text[])[s.qid + 1]
      AND ((%(exclude_sources)s::text[])[s.qid + 1] IS NULL
           OR c.source IS DISTINCT FROM (%(exclude_sources)s::text[])[s.qid + 1])
      AND (s.toks IS NULL
           OR (s.lkeys && c.key_hashes
               AND (%(min_match)s = 1
                    OR (SELECT count(*) FROM unnest(s.lkeys) AS k WHERE k = ANY(c.key_hashes)) >= %(min_match)s))
           OR EXISTS (SELECT 1 FROM nearsync.documents d
                      WHERE d.table_name = %(table)s AND d.record_id = c.record_id AND NOT d.deleted
                        AND (d.signature -> 'tokens') ?| s.toks))
), listed AS MATERIALIZED (
    SELECT s.qid, s.n, m.record_id, row_number() OVER (PARTITION BY s.qid ORDER BY m.record_id)::integer AS rn
    FROM sized s LEFT JOIN members m ON m.qid = s.qid
)
SELECT l.qid, l.n, l.rn, l.record_id, NULL::bigint AS version, NULL::jsonb AS scope, NULL::jsonb AS fields,
       NULL::jsonb AS signature, NULL::jsonb AS keys, NULL::bigint[] AS bottomk, NULL::bigint[] AS minhash
FROM listed l
UNION ALL
SELECT NULL, NULL, NULL, d.record_id, d.version, d.scope, d.fields, d.signature, d.keys, d.bottomk, d.minhash
FROM nearsync.documents d
WHERE d.table_name = %(table)s AND d.record_id IN (SELECT l.record_id FROM listed l) AND NOT d.deleted;

-- name: count_documents
SELECT count(*)::bigint AS n FROM nearsync.documents WHERE table_name = %(table)s AND NOT deleted;

-- name: count_documents_upto
-- The live documents of a table, counted up to %(limit)s (what the candidate screen's switch needs:
-- whether they outnumber the document cache), so that a large table that was never analysed is not
-- counted whole (~0.5 s at 1,000,000 documents) each time the switch is rechecked.
SELECT count(*)::bigint AS n
FROM (SELECT 1 FROM nearsync.documents WHERE table_name = %(table)s AND NOT deleted LIMIT %(limit)s) AS d;

-- name: iter_versions
SELECT record_id, version FROM nearsync.documents WHERE table_name = %(table)s AND NOT deleted;

-- name: iter_corpus
-- What a corpus snapshot counts of every live document (daemon.backends.base.CorpusReader), read
-- through a server-side cursor: the title as jsonb (the value get_documents' fields hold), the scope,
-- and the super tokens ("t:..." keys) among the document's candidate keys, as a jsonb array. Those
-- keys are the stored keys when there are some; else, as daemon.backends.pg_encoding.keys_of
-- rebuilds them, the signature's bands, blocks and super when all three are arrays (else none), of
-- which only super can hold a "t:" key (band keys are "b<i>:...", daemon/signatures/lsh.py;
-- simhash block keys "s<t>:...", daemon/signatures/simhash.py). The signature is tested and read by
-- one jsonpath: it is stored compressed, and each operator on it decompresses it again (four
-- operators took ~15 per cent more server time than one on 100,000 listings). The MinHash, bottom-k and
-- key-hash arrays and the rest of the fields and signature are neither sent nor decoded.
SELECT fields->'title' AS title, scope,
       CASE
           WHEN keys IS NULL THEN jsonb_path_query_array(signature,
               '$ ? (@.bands.type() == "array" && @.blocks.type() == "array" && @.super.type() == "array")'
               '.super[*] ? (@ starts with "t:")')
           WHEN jsonb_typeof(keys) = 'array' THEN jsonb_path_query_array(keys, '$[*] ? (@ starts with "t:")')
       END AS super_keys
FROM nearsync.documents WHERE table_name = %(table)s AND NOT deleted;

-- name: clear_documents
-- The documents and their lookup rows (migration 0020) in one statement.
WITH unkeyed AS (DELETE FROM nearsync.document_lookup WHERE table_name = %(table)s)
DELETE FROM nearsync.documents WHERE table_name = %(table)s;

-- name: purge_tombstones
-- Tombstones older than %(older_than_s)s seconds have done their job (no older write is in flight).
DELETE FROM nearsync.documents
WHERE deleted AND indexed_at < clock_timestamp() - make_interval(secs => %(older_than_s)s);

-- name: analyze_documents
-- Planner statistics for the index table and its lookup table after a bulk load. Without them the planner takes
-- table_name = '...' to match 0.5% of the rows and may join the candidate lookup's keys against a
-- materialised copy of the whole table (millions of array checks per call) instead of one GIN
-- scan per key. Autovacuum does the same within a minute or so; a role that does not own the table
-- gets a warning and nothing happens.
ANALYZE nearsync.documents, nearsync.document_lookup;

-- name: merge_pending_keys
-- Merge the candidate-key index's pending list (fastupdate) into the index now, as VACUUM would. Every
-- GIN key scan reads the pending list whole, and after a bulk load it stays nearly full (up to
-- gin_pending_list_limit) until the next vacuum: 56 us per key scan against 3 us with it empty, measured
-- on 2,173 Abt-Buy documents (a candidate lookup makes ~55). Returns the pages merged. Needs the right
-- to vacuum the table (its owner); otherwise it raises and the caller logs it.
SELECT gin_clean_pending_list('nearsync.document_lookup_key_hashes'::regclass);

-- name: documents_reltuples
-- The planner's row count of the index table (pg_class.reltuples, -1 before the first ANALYZE).
SELECT reltuples::bigint FROM pg_class WHERE oid = 'nearsync.documents'::regclass;
