-- Content fingerprints on moderators' decisions (migration 0006). A decision holds while both
-- records' tracked content is unchanged (IndexDocument.content_fingerprint): a reindex gives every
-- document a new version but not new content, so it no longer lifts dismissals or confirmations.
-- Decisions made before this migration have no fingerprints and keep comparing versions.
ALTER TABLE nearsync.pair_decisions ADD COLUMN IF NOT EXISTS a_fingerprint bigint;
ALTER TABLE nearsync.pair_decisions ADD COLUMN IF NOT EXISTS b_fingerprint bigint;
