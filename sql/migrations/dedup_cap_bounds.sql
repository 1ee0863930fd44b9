-- The boundary of each record's capped candidate lookup (migration 0021), written by the dedup worker
-- for the records of a batch whose lookup hit [dedup] candidate_cap: how many candidate keys its last
-- scored candidate shared (matched) and the ids of the scored candidates that shared exactly that many
-- (tied: the lookup's order among them is the backend's tie-break). A record is within another's cap
-- when it shares more keys with it than matched, or as many and is one of tied. Under its lock the
-- worker reads these rows to decide whether a link outside its batch record's capped lookup stays
-- (the partner ranks the batch record within its own cap), instead of looking the partner's
-- candidates up again; a record whose lookup was not capped, or that is gone, has no row.
CREATE TABLE IF NOT EXISTS nearsync.dedup_cap_bounds (
    table_name text NOT NULL,
    record_id  text NOT NULL,
    matched    integer NOT NULL,
    tied       text[] NOT NULL,
    PRIMARY KEY (table_name, record_id)
);
