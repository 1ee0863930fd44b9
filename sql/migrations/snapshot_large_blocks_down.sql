-- Undo migration 0019: snapshots hold title-word frequencies only again.
ALTER TABLE nearsync.rarity_snapshots DROP COLUMN IF EXISTS large_blocks, DROP COLUMN IF EXISTS max_block;
