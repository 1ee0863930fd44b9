-- No planner statistics for the index table's payload columns (migration 0016).
-- ANALYZE samples up to 30,000 rows (300 x the statistics target) and, for every column with a
-- target, de-TOASTs and hashes each sampled value. The payload columns are wide (the fields and
-- signature jsonb, the MinHash and bottom-k arrays) and no query filters on them: the lookups
-- filter on table_name, record_id, version, deleted and the key_hashes GIN index, and on
-- `fields ->> 'source'`, an expression whose selectivity no column statistic gives. Measured on
-- 25,000 product listings: `ANALYZE nearsync.documents` 2.1-3.3 s, 0.4-0.6 s without these columns
-- (3 rounds alternated, machine busy, load ~4).
-- It is the same for every ANALYZE: the backend's own during and after bulk loads, and autovacuum's
-- (by the server's default, once a tenth of the table has changed).
ALTER TABLE nearsync.documents
    ALTER COLUMN scope SET STATISTICS 0,
    ALTER COLUMN fields SET STATISTICS 0,
    ALTER COLUMN signature SET STATISTICS 0,
    ALTER COLUMN keys SET STATISTICS 0,
    ALTER COLUMN bottomk SET STATISTICS 0,
    ALTER COLUMN minhash SET STATISTICS 0;
