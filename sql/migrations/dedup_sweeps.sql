-- The dedup worker's sweep (migration 0023): while its queue is idle, each `nearsync dedup` worker
-- processes the table's live records again, a few at a time in record id order ([dedup] sweep_per_s),
-- so that what the candidate cap and exhaustive_below saw while the table grew is re-decided on the
-- table as it is (a pass over a settled table gives the links, clusters and flags of a clean pass).
-- One row per table: the last record id handed out (after_id; '' at the start of a pass), the passes
-- completed (their last chunk processed), when the current pass started and how long the last one
-- took (s). Workers take chunks under the row's lock, so two workers never sweep the same records.
CREATE TABLE IF NOT EXISTS nearsync.dedup_sweeps (
    table_name      text PRIMARY KEY,
    after_id        text NOT NULL DEFAULT '',
    passes          integer NOT NULL DEFAULT 0,
    pass_started_at timestamptz NOT NULL DEFAULT now(),
    last_pass_s     double precision
);
