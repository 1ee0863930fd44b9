-- Back to the single-column key index of migration 0001.
CREATE INDEX IF NOT EXISTS document_keys_key ON nearsync.document_keys (key);
DROP INDEX IF EXISTS nearsync.document_keys_lookup;
