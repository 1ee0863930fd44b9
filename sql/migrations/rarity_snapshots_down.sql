-- Downgrade of migration 0014.
DROP TABLE IF EXISTS nearsync.rarity_snapshots;
