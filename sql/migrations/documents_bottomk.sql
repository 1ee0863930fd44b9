-- The bottom-k sketch in a column of its own (migration 0007): result-set dedup reads it inline
-- (0.5 kB per record) instead of de-TOASTing the ~3 kB signature jsonb (at 1M documents, 100
-- random sketches: ~10 ms through the jsonb, ~3 ms from the column). Documents written from now
-- on keep the sketch here and not in the signature; older ones keep it in the signature until
-- they are rewritten (a change, or `nearsync reindex`), and reads accept both.
ALTER TABLE nearsync.documents ADD COLUMN IF NOT EXISTS bottomk bigint[];
