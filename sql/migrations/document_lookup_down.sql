-- Undo migration 0020: the candidate keys back into nearsync.documents.key_hashes (storage main, no
-- statistics) with the GIN index of 0010/0011 and the scope index of 0017, then the lookup table goes.
ALTER TABLE nearsync.documents ADD COLUMN IF NOT EXISTS key_hashes bigint[];
ALTER TABLE nearsync.documents ALTER COLUMN key_hashes SET STORAGE MAIN;
ALTER TABLE nearsync.documents ALTER COLUMN key_hashes SET STATISTICS 0;
DO $$
BEGIN
    IF to_regclass('nearsync.document_lookup') IS NOT NULL THEN
        UPDATE nearsync.documents d SET key_hashes = l.key_hashes
        FROM nearsync.document_lookup l
        WHERE d.table_name = l.table_name AND d.record_id = l.record_id AND NOT d.deleted;
        DROP TABLE nearsync.document_lookup;
    END IF;
END
$$;
CREATE INDEX IF NOT EXISTS documents_key_hashes ON nearsync.documents USING gin (key_hashes)
    WITH (fastupdate = on, gin_pending_list_limit = 256);
CREATE INDEX IF NOT EXISTS documents_scope ON nearsync.documents (table_name, scope) WHERE NOT deleted;
