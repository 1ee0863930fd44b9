-- Downgrade of migration 0015.
ALTER TABLE nearsync.index_tracking DROP COLUMN IF EXISTS takeovers;
