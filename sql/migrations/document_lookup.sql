-- The candidate keys in a narrow table of their own (migration 0020): nearsync.document_lookup holds,
-- per live signed document, only what a candidate lookup reads (record id, version, scope, the source
-- field, the hashed candidate keys) under its own GIN index; the keys leave nearsync.documents.
--
-- Why: a lookup (named queries candidates_many, scope_members) finds ~600 documents through the GIN
-- index and visits each one's heap row to check its table, record id and source. A documents row is
-- ~2 kB in the heap (fields, signature, MinHash, bottom-k; more in TOAST), so those visits touched
-- ~600 pages per lookup, and a catalogue of a million documents (~2 GB of heap) no longer stays in
-- shared_buffers. A lookup row is ~0.4 kB (the ~35 keys of a signed document inline, 8 bytes each),
-- so the same visits touch a fifth of the pages (docs/benchmarks.md, "lookup-table layouts").
-- A write puts one more narrow row, and the GIN entries it already made, into this table instead.
--
-- Lock rule (unchanged from migration 0010, restated in sql/queries/pg_index.sql): a lookup row is
-- written only by the statement that applies its document's version (upsert_documents,
-- delete_documents), from that statement's RETURNING, so under the documents row's lock. Two writers
-- of one record are serialised by that lock; the later one re-checks the version on the committed
-- row and touches the lookup row only when its version is newer, so keys and version never come from
-- different writes and no stale key is left behind. Only live documents with keys have a lookup row
-- (tombstones and plain-sync documents have none).
--
-- Storage MAIN keeps the key array inline (random hashes do not compress; a lookup reads it for the
-- scope count); the GIN index has the settings of the documents one: fastupdate with a 256 kB
-- pending list (0011) and no planner statistics for the array (0018: no estimate reads them). The
-- scope btree replaces documents_scope (0017) for scope_members' count of a scope's documents.
-- The existing keys are converted here (no reindex); the indexes are built after the copy (one
-- sorted build each instead of one insert per row).
CREATE TABLE IF NOT EXISTS nearsync.document_lookup (
    table_name  text     NOT NULL,
    record_id   text     NOT NULL,
    version     bigint   NOT NULL,
    scope       jsonb    NOT NULL,
    source      text,               -- fields ->> 'source' (NULL when the document has none)
    key_hashes  bigint[] NOT NULL,  -- the distinct hashed candidate keys (daemon.signatures.blocks.key_hashes)
    PRIMARY KEY (table_name, record_id)
);
ALTER TABLE nearsync.document_lookup ALTER COLUMN key_hashes SET STORAGE MAIN;
-- No planner statistics for the array, the scope and the source, as on nearsync.documents (0016, 0018):
-- no estimate needs the array's; and with the scope's, a table where one scope (the global one, {})
-- holds most rows made the planner count a scope's documents by a sequential scan (a small user
-- scope then read the whole table) instead of through document_lookup_scope, and the source's
-- would re-plan candidates_many on estimates its filter never had on documents.
ALTER TABLE nearsync.document_lookup
    ALTER COLUMN key_hashes SET STATISTICS 0,
    ALTER COLUMN scope SET STATISTICS 0,
    ALTER COLUMN source SET STATISTICS 0;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'nearsync'
               AND table_name = 'documents' AND column_name = 'key_hashes') THEN
        INSERT INTO nearsync.document_lookup (table_name, record_id, version, scope, source, key_hashes)
        SELECT d.table_name, d.record_id, d.version, d.scope, d.fields ->> 'source', d.key_hashes
        FROM nearsync.documents d
        WHERE NOT d.deleted AND d.key_hashes IS NOT NULL
        ON CONFLICT DO NOTHING;
        DROP INDEX IF EXISTS nearsync.documents_key_hashes;
        DROP INDEX IF EXISTS nearsync.documents_scope;
        ALTER TABLE nearsync.documents DROP COLUMN key_hashes;
    END IF;
END
$$;
CREATE INDEX IF NOT EXISTS document_lookup_key_hashes ON nearsync.document_lookup USING gin (key_hashes)
    WITH (fastupdate = on, gin_pending_list_limit = 256);
CREATE INDEX IF NOT EXISTS document_lookup_scope ON nearsync.document_lookup (table_name, scope);
