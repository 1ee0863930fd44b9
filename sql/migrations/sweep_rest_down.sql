-- Undo migration 0024.
ALTER TABLE nearsync.dedup_sweeps DROP COLUMN IF EXISTS changed, DROP COLUMN IF EXISTS settled;
