-- Dedup worker tables (migration 0003). Flags live here, never in the tracked table, so the
-- worker's writes never re-trigger the indexing pipeline.

-- Scored pairs at or above the potential threshold; a < b (text order). Replaced for a record
-- each time it is re-scored (both directions), so the set is independent of processing order.
CREATE TABLE IF NOT EXISTS nearsync.dedup_links (
    table_name  text        NOT NULL,
    a           text        NOT NULL,
    b           text        NOT NULL,
    score       real        NOT NULL,
    reasons     jsonb       NOT NULL,
    summary     text        NOT NULL,
    scored_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_name, a, b)
);
CREATE INDEX IF NOT EXISTS dedup_links_b ON nearsync.dedup_links (table_name, b);

-- One flag per flagged record: what it duplicates (the original: earliest of its cluster).
CREATE TABLE IF NOT EXISTS nearsync.duplicate_flags (
    table_name        text        NOT NULL,
    record_id         text        NOT NULL,
    flag              text        NOT NULL CHECK (flag IN ('duplicate', 'potential_duplicate')),
    original_id       text        NOT NULL,
    cluster_id        text        NOT NULL,
    score             real        NOT NULL,
    reasons           jsonb       NOT NULL,
    summary           text        NOT NULL,
    signature_version integer     NOT NULL,
    flagged_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_name, record_id)
);
CREATE INDEX IF NOT EXISTS duplicate_flags_original ON nearsync.duplicate_flags (table_name, original_id);
CREATE INDEX IF NOT EXISTS duplicate_flags_recent ON nearsync.duplicate_flags (flag, flagged_at DESC);

-- Cluster membership (originals included); cluster ids derive from the original's id.
CREATE TABLE IF NOT EXISTS nearsync.clusters (
    table_name  text NOT NULL,
    record_id   text NOT NULL,
    cluster_id  text NOT NULL,
    original_id text NOT NULL,
    PRIMARY KEY (table_name, record_id)
);
CREATE INDEX IF NOT EXISTS clusters_cluster ON nearsync.clusters (table_name, cluster_id);

-- The moderators' view of flags joined to the records (generated for the configured table).
CREATE OR REPLACE FUNCTION nearsync.create_flag_view(p_table regclass, p_id text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format($v$
        CREATE OR REPLACE VIEW nearsync.flagged_records AS
        SELECT f.table_name, f.record_id, f.flag, f.original_id, f.cluster_id, f.score, f.summary,
               f.reasons, f.signature_version, f.flagged_at,
               to_jsonb(r) AS record, to_jsonb(o) AS original
        FROM nearsync.duplicate_flags f
        LEFT JOIN %1$s r ON r.%2$I::text = f.record_id
        LEFT JOIN %1$s o ON o.%2$I::text = f.original_id
        WHERE f.table_name = nearsync.qualified_name(%3$L::regclass)
    $v$, p_table, p_id, p_table::text);
END
$$;
