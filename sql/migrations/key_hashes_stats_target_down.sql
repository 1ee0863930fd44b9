-- Undo migration 0017: the candidate-key array of the index table gets the server's statistics target again.
ALTER TABLE nearsync.documents ALTER COLUMN key_hashes SET STATISTICS -1;
