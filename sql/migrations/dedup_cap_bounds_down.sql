-- Undo migration 0021: the dedup worker's capped-lookup boundaries.
DROP TABLE IF EXISTS nearsync.dedup_cap_bounds;
