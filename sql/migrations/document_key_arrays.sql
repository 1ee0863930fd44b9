-- Candidate keys as one bigint[] per document (migration 0010), in nearsync.documents.key_hashes
-- under a GIN index, instead of one nearsync.document_keys row per (document, key) under two btree
-- indexes. A write of a signed document then puts one array into the row it upserts anyway (no
-- key-row DELETE and COPY of ~33 rows with ~66 btree entries); a lookup finds the documents
-- sharing a key with `key_hashes && keys` and counts the shared ones from the array.
--
-- Lock rule: the keys live in the document's row, so they change only in the statement that
-- changes its version (the version-checked upsert or tombstone of sql/queries/pg_index.sql), under
-- that row's lock. Two writers of one record are serialised by the lock; the later one re-checks
-- the version on the committed row and applies only when its version is newer, so keys and version
-- can never come from different writes and no stale key can be left behind.
--
-- The existing key rows are converted here (no reindex needed). Storage MAIN keeps the ~0.3 kB
-- array inline in the row (it is read for every document a lookup finds; random hashes do not
-- compress). The GIN index is built after the conversion (one sorted build instead of one insert
-- per row); fastupdate gathers the entries of new writes in a pending list merged in bulk.
ALTER TABLE nearsync.documents ADD COLUMN IF NOT EXISTS key_hashes bigint[];
ALTER TABLE nearsync.documents ALTER COLUMN key_hashes SET STORAGE MAIN;
DO $$
BEGIN
    IF to_regclass('nearsync.document_keys') IS NOT NULL THEN
        UPDATE nearsync.documents d SET key_hashes = k.hashes
        FROM (SELECT table_name, record_id, array_agg(DISTINCT key ORDER BY key) AS hashes
              FROM nearsync.document_keys GROUP BY table_name, record_id) k
        WHERE d.table_name = k.table_name AND d.record_id = k.record_id AND NOT d.deleted;
        DROP TABLE nearsync.document_keys;
    END IF;
END
$$;
CREATE INDEX IF NOT EXISTS documents_key_hashes ON nearsync.documents USING gin (key_hashes) WITH (fastupdate = on);
