-- The MinHash signature in a column of its own (migration 0009), as bigint[] like the bottom-k
-- sketch (0007): 128 numbers cost ~2.4 kB of jsonb text per document, parsed as numeric on every
-- write (a 10,000-document write spent about a third of its upsert time on the signature jsonb).
-- Documents written from now on keep the MinHash here and not in the signature; older ones keep it
-- in the signature until they are rewritten (a change, or `nearsync reindex`), and reads accept both.
ALTER TABLE nearsync.documents ADD COLUMN IF NOT EXISTS minhash bigint[];
-- The jsonb columns are TOASTed (compressed) on every write of a long document: lz4 compresses
-- several times faster than the default pglz. Servers built without lz4 keep the default.
DO $$
BEGIN
    ALTER TABLE nearsync.documents ALTER COLUMN signature SET COMPRESSION lz4,
                                   ALTER COLUMN fields SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'lz4 compression not available: documents keep the default compression';
END
$$;
