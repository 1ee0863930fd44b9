-- Downgrade of migration 0012.
DROP TABLE IF EXISTS nearsync.dedup_parts;
