-- Corpus snapshots: token rarity (migration 0014) and large candidate-key blocks (0019);
-- daemon.ops.rarity, daemon.db.rarity, daemon.dedup.worker.

-- name: rarity_deactivate
-- Before a new snapshot is stored (same transaction): the table's active one stops being active.
UPDATE nearsync.rarity_snapshots SET active = false WHERE table_name = %(table)s AND active;

-- name: rarity_insert
-- Store a new snapshot as the table's active one; returns its version.
INSERT INTO nearsync.rarity_snapshots (table_name, documents, tokens, active, token_hashes, dfs, max_block, large_blocks)
VALUES (%(table)s, %(documents)s, %(tokens)s, true, %(token_hashes)s, %(dfs)s, %(max_block)s, %(large_blocks)s)
RETURNING version;

-- name: rarity_prune
-- Drop the table's inactive snapshots (only the active one is ever read).
DELETE FROM nearsync.rarity_snapshots WHERE table_name = %(table)s AND NOT active;

-- name: rarity_active_version
-- plan: generic (calls with arrays of at most 100 elements: daemon.db.pool.PlanModeCursor)
-- The version of the table's active snapshot (no row: none); the dedup worker's check per batch.
SELECT version FROM nearsync.rarity_snapshots WHERE table_name = %(table)s AND active;

-- name: rarity_load
-- The table's active snapshot, whole.
SELECT version, documents, token_hashes, dfs, max_block, large_blocks FROM nearsync.rarity_snapshots
WHERE table_name = %(table)s AND active;
