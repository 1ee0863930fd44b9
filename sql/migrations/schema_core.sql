-- nearsync core schema (applied by migration 0001; dropped by its downgrade).
-- The tracking table is a transactional outbox: a row per changed record per queue, written in
-- the user's transaction by the triggers, claimed with SKIP LOCKED, deleted on acknowledgement.

CREATE SCHEMA IF NOT EXISTS nearsync;

-- Monotonic change sequence: the external version of every index write.
CREATE SEQUENCE IF NOT EXISTS nearsync.change_seq AS bigint;

-- Ids for running daemons/workers; a worker holds advisory lock (28275, id) while alive.
CREATE SEQUENCE IF NOT EXISTS nearsync.worker_seq AS integer CYCLE MAXVALUE 2147483647;

CREATE TABLE IF NOT EXISTS nearsync.index_tracking (
    queue       text        NOT NULL,              -- 'index' (daemon) or 'dedup' (worker)
    table_name  text        NOT NULL,              -- schema.table
    record_id   text        NOT NULL,
    op          char(1)     NOT NULL CHECK (op IN ('U', 'D')),
    seq         bigint      NOT NULL,
    changed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    claimed_by  integer,
    claimed_at  timestamptz,
    attempts    integer     NOT NULL DEFAULT 0,
    not_before  timestamptz,
    last_error  text,
    PRIMARY KEY (queue, table_name, record_id)
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
        autovacuum_analyze_scale_factor = 0.02);

CREATE INDEX IF NOT EXISTS index_tracking_queue_seq ON nearsync.index_tracking (queue, seq);

CREATE TABLE IF NOT EXISTS nearsync.dead_letters (
    id          bigserial   PRIMARY KEY,
    queue       text        NOT NULL,
    table_name  text        NOT NULL,
    record_id   text        NOT NULL,
    op          char(1)     NOT NULL,
    seq         bigint      NOT NULL,
    attempts    integer     NOT NULL,
    error       text        NOT NULL,
    changed_at  timestamptz NOT NULL,
    failed_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (queue, table_name, record_id)
);

-- Which tables carry nearsync triggers, and on which columns.
CREATE TABLE IF NOT EXISTS nearsync.tracked_tables (
    table_name      text PRIMARY KEY,             -- schema.table
    id_column       text NOT NULL,
    tracked_columns text[] NOT NULL,
    attached_at     timestamptz NOT NULL DEFAULT now()
);

-- Checkpoints of resumable jobs (reindex): the last key done.
CREATE TABLE IF NOT EXISTS nearsync.job_checkpoints (
    job         text PRIMARY KEY,
    last_key    text,
    done        bigint NOT NULL DEFAULT 0,
    total       bigint,
    started_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The PostgreSQL index backend: one document per record (tombstones keep the version of deletes),
-- and candidate keys hashed to bigint (xxh64 of table, scope and key) for btree lookup.
CREATE TABLE IF NOT EXISTS nearsync.documents (
    table_name  text        NOT NULL,
    record_id   text        NOT NULL,
    version     bigint      NOT NULL,
    deleted     boolean     NOT NULL DEFAULT false,
    scope       jsonb       NOT NULL DEFAULT '{}',
    fields      jsonb,
    signature   jsonb,
    keys        jsonb,
    indexed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (table_name, record_id)
) WITH (fillfactor = 80);

CREATE TABLE IF NOT EXISTS nearsync.document_keys (
    key         bigint NOT NULL,
    table_name  text   NOT NULL,
    record_id   text   NOT NULL
);
CREATE INDEX IF NOT EXISTS document_keys_key ON nearsync.document_keys (key);
CREATE INDEX IF NOT EXISTS document_keys_record ON nearsync.document_keys (table_name, record_id);
