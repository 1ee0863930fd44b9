-- Migration 0012: the part of the link graph each linked record was last clustered in.
-- A connected component of links larger than [dedup] max_component is cut into parts by a ladder
-- of link-score levels (the weakest links first); a record's part is its component at the lowest
-- level where that component fits. The worker re-clusters every member of a changed record's old
-- part, so the parts (and the flags) stay a function of the links, not of the processing order.
CREATE TABLE IF NOT EXISTS nearsync.dedup_parts (
    table_name text NOT NULL,
    record_id  text NOT NULL,
    part_id    text NOT NULL,
    level      real NOT NULL,
    PRIMARY KEY (table_name, record_id)
);
CREATE INDEX IF NOT EXISTS dedup_parts_part ON nearsync.dedup_parts (table_name, part_id);
