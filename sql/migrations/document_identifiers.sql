-- The identifier lists of each signed document in a narrow column of its own (migration 0022):
-- nearsync.documents.identifiers holds the signature's models, phones, emails and title_codes (those
-- the signature has), written by upsert_documents from the signature in the same statement.
--
-- Why: the dedup worker's lead-field screen (daemon.backends.base.CandidateScreen) reads a
-- candidate's model numbers and title codes before deciding whether to read its whole document.
-- Taken from the signature, each such read de-TOASTed or decompressed the ~0.8 kB signature (and
-- the fields) of every candidate: 2.3-2.5 ms per 46 candidates at 100,000 product listings, against
-- 1.0-1.1 ms from a ~120-byte column of their own and 0.9 ms for the row's version alone
-- (docs/benchmarks.md). The column is in the documents row, not the lookup row, so the candidate
-- lookup's ~600 heap visits per record do not grow.
--
-- Existing documents get NULL: get_document_parts reads them as before until they are written
-- again (nearsync reindex writes them all). No planner statistics (as for the other payload
-- columns, migration 0016): nothing filters on it.
ALTER TABLE nearsync.documents ADD COLUMN IF NOT EXISTS identifiers jsonb;
ALTER TABLE nearsync.documents ALTER COLUMN identifiers SET STATISTICS 0;
