-- Migration 0013: a signed document's candidate keys are its signature's band, block and super-token
-- keys (each once, in that order) followed by "s:scope" (daemon.backends.base.SCOPE_KEY). The
-- PostgreSQL backend now leaves nearsync.documents.keys NULL for such a document and rebuilds the
-- list from the signature when it reads it (daemon.backends.pg_encoding.keys_of), instead of
-- storing ~0.9 kB of jsonb a second time per document (a larger row, and one more TOASTed value to
-- write). Keys that are not the signature's own are stored as before; rows written by older code
-- keep theirs. Nothing to convert: this statement only records the rule in the schema.
COMMENT ON COLUMN nearsync.documents.keys IS
    'candidate keys (jsonb array); NULL on a signed document: its signature''s bands, blocks and super keys, then s:scope';
