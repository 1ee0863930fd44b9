-- Moderators' decisions on flagged pairs (migration 0004). A 'not_duplicate' decision keeps the
-- pair from being linked again while both records keep the document versions decided on; a
-- 'duplicate' decision (a confirmed flag) is kept for evaluation feedback (nearsync evaluate --feedback).
CREATE TABLE IF NOT EXISTS nearsync.pair_decisions (
    table_name  text        NOT NULL,
    a           text        NOT NULL,          -- canonical order, as in dedup_links
    b           text        NOT NULL,
    decision    text        NOT NULL CHECK (decision IN ('duplicate', 'not_duplicate')),
    a_version   bigint,                         -- index document versions when decided
    b_version   bigint,
    decided_by  text        NOT NULL,
    decided_at  timestamptz NOT NULL DEFAULT now(),
    score       real,
    PRIMARY KEY (table_name, a, b)
);
