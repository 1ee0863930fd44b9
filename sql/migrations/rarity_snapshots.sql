-- Migration 0014: versioned document-frequency snapshots of the title words, per tracked table.
-- One row per snapshot: how many documents it counted and, packed, the sorted 64-bit hashes of the
-- title words (token_hashes: little-endian int64, ascending) and each one's document frequency (dfs:
-- little-endian int32, same order). One row instead of one row per word: the dedup worker reads a
-- snapshot whole, and one packed value is read in one fetch however many words it holds. At most one
-- snapshot of a table is active (the partial unique index); the dedup worker scores with the active
-- one, and none means no rarity at all (scores as before 0014).
CREATE TABLE IF NOT EXISTS nearsync.rarity_snapshots (
    version      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_name   text NOT NULL,
    documents    bigint NOT NULL,
    tokens       integer NOT NULL,
    built_at     timestamptz NOT NULL DEFAULT now(),
    active       boolean NOT NULL DEFAULT false,
    token_hashes bytea NOT NULL,
    dfs          bytea NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS rarity_snapshots_active ON nearsync.rarity_snapshots (table_name) WHERE active;
