-- Downgrade of migration 0006.
ALTER TABLE nearsync.pair_decisions DROP COLUMN IF EXISTS a_fingerprint;
ALTER TABLE nearsync.pair_decisions DROP COLUMN IF EXISTS b_fingerprint;
