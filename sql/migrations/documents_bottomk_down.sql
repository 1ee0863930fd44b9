-- Downgrade of migration 0007: put the sketches back into the signatures, then drop the column.
UPDATE nearsync.documents
SET signature = signature || jsonb_build_object('bottomk', to_jsonb(bottomk))
WHERE bottomk IS NOT NULL AND signature IS NOT NULL;
ALTER TABLE nearsync.documents DROP COLUMN IF EXISTS bottomk;
