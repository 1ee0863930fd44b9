-- Undo migration 0016: the payload columns of the index table get the server's statistics target again.
ALTER TABLE nearsync.documents
    ALTER COLUMN scope SET STATISTICS -1,
    ALTER COLUMN fields SET STATISTICS -1,
    ALTER COLUMN signature SET STATISTICS -1,
    ALTER COLUMN keys SET STATISTICS -1,
    ALTER COLUMN bottomk SET STATISTICS -1,
    ALTER COLUMN minhash SET STATISTICS -1;
