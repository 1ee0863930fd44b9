-- Cheaper upkeep of the index table (migration 0018): no planner statistics for the candidate-key
-- array, and lz4 for the sketch arrays when a write compresses them.
--
-- key_hashes without statistics. ANALYZE's element statistics of key_hashes (most common elements
-- and their frequencies) hash every key of every sampled row (~30-40 per signed document, up to
-- 30,000 rows): ~70-80% of an ANALYZE of nearsync.documents once the payload columns have none
-- (0016). No estimate reads them: PostgreSQL uses element statistics only for `column @> constant`
-- (arraycontsel); a join clause or a non-constant side gets the fixed 0.5% of DEFAULT_CONTAIN_SEL
-- (arraycontjoinsel), and every query on the array compares it with keys taken from another row
-- set (`@> ARRAY[k.key]`, `lkeys && key_hashes`). EXPLAIN of candidates_many and scope_members
-- (200 lookups on 10,000 generated ads, custom plans) gives the same plans and row estimates with
-- and without them; `ANALYZE nearsync.documents` took 94-112 ms with them and 26-30 ms without.
-- Statistics gathered before stay in pg_statistic (only a superuser can remove them) and no
-- estimate reads them.
ALTER TABLE nearsync.documents ALTER COLUMN key_hashes SET STATISTICS 0;
-- lz4 for bottomk and minhash. A signed row (~2.9 kB with a 128-value MinHash) is over the TOAST
-- threshold (~2 kB), so every write first tries to compress its widest compressible column, the
-- MinHash: 1 kB of hash values that do not compress, with the server's default method (pglz unless
-- default_toast_compression says otherwise), before it compresses the signature (lz4 since 0009).
-- lz4 gives up on incompressible data several times faster than pglz: the upserts of a signed
-- 20,000-ad reindex took 1,193-1,341 ms of statement time against 1,356-1,545 ms (3 rounds
-- alternated, load ~4). What is stored does not change (the arrays stay uncompressed). Servers
-- built without lz4 keep the default.
DO $$
BEGIN
    ALTER TABLE nearsync.documents ALTER COLUMN bottomk SET COMPRESSION lz4,
                                   ALTER COLUMN minhash SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'lz4 compression not available: the sketch arrays keep the default compression';
END
$$;
