-- Undo migration 0023.
DROP TABLE IF EXISTS nearsync.dedup_sweeps;
