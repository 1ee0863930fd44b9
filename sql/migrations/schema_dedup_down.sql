-- Downgrade of migration 0003.
DROP VIEW IF EXISTS nearsync.flagged_records;
DROP FUNCTION IF EXISTS nearsync.create_flag_view(regclass, text);
DROP TABLE IF EXISTS nearsync.clusters, nearsync.duplicate_flags, nearsync.dedup_links;
