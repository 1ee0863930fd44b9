-- Migration 0008: the triggers append to an index-free change log; the daemon coalesces it into
-- index_tracking (the `relay_claim` query in sql/queries/queue.sql) before each claim.
--
-- Why: an upsert into index_tracking (a primary key and a seq index to maintain, a conflict check
-- per row) made a bulk INSERT ~4x slower than without triggers. Appending to a heap with no index,
-- with one change sequence value and one timestamp per statement, costs ~1.4x. Coalescing still
-- happens, one step later: the relay moves log rows into index_tracking in one statement (DELETE
-- ... RETURNING, latest change per record, upsert), so a change is in exactly one of the two
-- tables at every moment and nothing can be lost between them. User transactions no longer touch
-- index_tracking rows at all, so they never wait on a daemon's claim, ack or failure update.
--
-- Sequence values: every change of one statement shares the statement's value. A record changes
-- at most once per statement, and a later statement (or transaction) on the same record draws a
-- later value, so per record the sequence still orders changes (the external version and the
-- version-checked ack need no more).

CREATE TABLE IF NOT EXISTS nearsync.change_log (
    table_name  text        NOT NULL,              -- schema.table
    record_id   text        NOT NULL,
    op          char(1)     NOT NULL,              -- 'U' upsert, 'D' delete
    seq         bigint      NOT NULL,
    changed_at  timestamptz NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000);

-- Everything not yet processed, per queue: tracking rows plus log rows not yet relayed (which all
-- belong to the index queue). A record can appear in both until the next relay; counters group by
-- record.
CREATE OR REPLACE VIEW nearsync.pending_changes AS
SELECT queue, table_name, record_id, op, seq, changed_at, claimed_by, attempts, not_before, last_error
FROM nearsync.index_tracking
UNION ALL
SELECT 'index', table_name, record_id, op, seq, changed_at, NULL::integer, 0, NULL::timestamptz, NULL::text
FROM nearsync.change_log;

-- The trigger generator, now appending to the log (the rest as in triggers.sql: statement-level
-- triggers with transition tables, tracked columns compared, at most one pg_notify per statement,
-- an UPDATE of the primary key is a delete of the old id and an upsert of the new).
CREATE OR REPLACE FUNCTION nearsync.attach_table(p_table regclass, p_id text, p_columns text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    fn        text := nearsync.trigger_function_name(p_table);
    tname     text := nearsync.qualified_name(p_table);
    old_cols  text;
    new_cols  text;
    append    text := 'INSERT INTO nearsync.change_log (table_name, record_id, op, seq, changed_at) ';
BEGIN
    PERFORM nearsync.require_columns(p_table, p_id, p_columns);
    SELECT string_agg(format('o.%I', c), ', '), string_agg(format('n.%I', c), ', ')
      INTO old_cols, new_cols FROM unnest(p_columns) AS c;
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION nearsync.%1$I() RETURNS trigger LANGUAGE plpgsql AS $body$
        DECLARE
            changed bigint;
            s       bigint := nextval('nearsync.change_seq');
            ts      timestamptz := clock_timestamp();
        BEGIN
            IF TG_OP = 'INSERT' THEN
                %2$s
                SELECT %3$L, n.%4$I::text, 'U', s, ts FROM new_rows n;
            ELSIF TG_OP = 'UPDATE' THEN
                %2$s
                SELECT %3$L, coalesce(n.%4$I, o.%4$I)::text, CASE WHEN n.%4$I IS NULL THEN 'D' ELSE 'U' END, s, ts
                FROM new_rows n FULL JOIN old_rows o ON o.%4$I = n.%4$I
                WHERE n.%4$I IS NULL OR o.%4$I IS NULL OR ROW(%5$s) IS DISTINCT FROM ROW(%6$s);
            ELSE
                %2$s
                SELECT %3$L, o.%4$I::text, 'D', s, ts FROM old_rows o;
            END IF;
            GET DIAGNOSTICS changed = ROW_COUNT;
            IF changed > 0 THEN
                PERFORM pg_notify('nearsync', %3$L);
            END IF;
            RETURN NULL;
        END
        $body$ $f$, fn, append, tname, p_id, old_cols, new_cols);

    PERFORM nearsync.install_triggers(p_table, p_id, p_columns, fn);
END
$$;

-- Rebuild the triggers of every tracked table with the new generator.
SELECT nearsync.attach_table(to_regclass(table_name), id_column, tracked_columns)
FROM nearsync.tracked_tables WHERE to_regclass(table_name) IS NOT NULL;
