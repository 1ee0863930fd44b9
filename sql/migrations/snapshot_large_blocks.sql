-- Large candidate-key blocks in the corpus snapshot (migration 0019; block purging, see
-- daemon/signatures/blocks.py). A snapshot row now also holds, packed, the sorted identities of the
-- candidate-key blocks that held more than max_block documents when it was built (large_blocks:
-- little-endian int64, ascending; the signed xxh64 of table, scope and key that
-- nearsync.documents.key_hashes stores; nearsync.document_lookup since 0020). The dedup worker leaves those keys out of its candidate
-- lookups while the snapshot is active. Snapshots built before hold none (max_block 0: no purging).
ALTER TABLE nearsync.rarity_snapshots
    ADD COLUMN IF NOT EXISTS max_block integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS large_blocks bytea NOT NULL DEFAULT ''::bytea;
