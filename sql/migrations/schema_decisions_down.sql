-- Downgrade of migration 0004.
DROP TABLE IF EXISTS nearsync.pair_decisions;
