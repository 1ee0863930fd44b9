-- Undo migration 0024.
ALTER TABLE nearsync.dedup_sweeps DROP COLUMN IF EXISTS resting;
ALTER TABLE nearsync.dedup_sweeps DROP COLUMN IF EXISTS changed, DROP COLUMN IF EXISTS pass_no,
    DROP COLUMN IF EXISTS handed, DROP COLUMN IF EXISTS done, DROP COLUMN IF EXISTS handed_at;
