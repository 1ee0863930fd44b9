-- Undo migration 0018: the candidate-key array gets the server's statistics target again, and the
-- sketch arrays the default compression (for values written from now on).
ALTER TABLE nearsync.documents ALTER COLUMN key_hashes SET STATISTICS -1;
ALTER TABLE nearsync.documents ALTER COLUMN bottomk SET COMPRESSION default,
                               ALTER COLUMN minhash SET COMPRESSION default;
