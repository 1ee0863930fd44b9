-- Downgrade of migration 0009: put the MinHash signatures back into the signatures, drop the
-- column and return the jsonb columns to the default compression (for values written from now on).
UPDATE nearsync.documents
SET signature = signature || jsonb_build_object('minhash', to_jsonb(minhash))
WHERE minhash IS NOT NULL AND signature IS NOT NULL;
ALTER TABLE nearsync.documents DROP COLUMN IF EXISTS minhash;
ALTER TABLE nearsync.documents ALTER COLUMN signature SET COMPRESSION default,
                               ALTER COLUMN fields SET COMPRESSION default;
