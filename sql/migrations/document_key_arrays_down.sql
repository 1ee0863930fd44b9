-- Downgrade of migration 0010: the key arrays back into one nearsync.document_keys row per
-- (document, key) with the indexes of migrations 0001 and 0005, then the column and its GIN index go.
CREATE TABLE IF NOT EXISTS nearsync.document_keys (
    key         bigint NOT NULL,
    table_name  text   NOT NULL,
    record_id   text   NOT NULL
);
INSERT INTO nearsync.document_keys (key, table_name, record_id)
SELECT h.key, d.table_name, d.record_id
FROM nearsync.documents d CROSS JOIN LATERAL unnest(d.key_hashes) AS h(key)
WHERE d.key_hashes IS NOT NULL AND NOT d.deleted;
CREATE INDEX IF NOT EXISTS document_keys_record ON nearsync.document_keys (table_name, record_id);
CREATE INDEX IF NOT EXISTS document_keys_lookup ON nearsync.document_keys (key, table_name) INCLUDE (record_id);
DROP INDEX IF EXISTS nearsync.documents_key_hashes;
ALTER TABLE nearsync.documents DROP COLUMN IF EXISTS key_hashes;
